//! `--allocations` and `--device meta` over the public suites: the meta device predicts every
//! error-free program's allocator events and peaks exactly, and the events depend on
//! nothing but the program (not the thread count, not the process).

use std::process::Command;

use serde_json::Value;
use strata::prelude::Device;
use strata_cli::conform::{run_document_with, RunOptions};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/conformance");
const SUITES: [&str; 9] = [
    "views",
    "inplace",
    "ops",
    "autograd",
    "nn",
    "layout",
    "inference",
    "layers",
    "train",
];

fn programs(suite: &str) -> (String, String) {
    let path = format!("{FIXTURES}/{suite}.programs.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    (path, text)
}

fn results(doc: &Value) -> &Vec<Value> {
    doc["results"].as_array().expect("a results list")
}

#[test]
fn meta_predicts_the_cpu_allocations_of_every_error_free_program() {
    for suite in SUITES {
        let (_, text) = programs(suite);
        let run = |device| {
            run_document_with(
                &text,
                RunOptions {
                    device,
                    allocations: true,
                },
            )
            .expect("the fixture loads")
        };
        let (cpu, meta) = (run(Device::Cpu), run(Device::Meta));
        let mut compared = 0;
        for (c, m) in results(&cpu).iter().zip(results(&meta)) {
            assert_eq!(c["id"], m["id"]);
            // The protocol's exceptions: programs that fail on the CPU, and those whose CPU
            // run skips a grad-scaler step (meta has no values to find an inf in).
            if !c["error"].is_null() || !c["skipped_scaler_steps"].is_null() {
                continue;
            }
            assert!(m["error"].is_null(), "{suite} {}: {}", m["id"], m["error"]);
            let events = c["allocations"]["events"].as_array().expect("events");
            assert_eq!(c["allocations"], m["allocations"], "{suite} {}", c["id"]);
            compared += usize::from(!events.is_empty());
        }
        // Most programs allocate: the comparison is not over empty lists.
        assert!(
            compared > 100,
            "{suite}: only {compared} programs allocated"
        );
    }
}

/// The `strata conform --allocations` output of `suite` with `threads` kernel threads.
fn run_binary(suite: &str, threads: &str, device: &str) -> Value {
    let (path, _) = programs(suite);
    let out = Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(["conform", "--allocations", "--device", device, &path])
        .env("STRATA_NUM_THREADS", threads)
        .output()
        .expect("the strata binary runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("results JSON")
}

#[test]
fn events_do_not_depend_on_threads_or_process() {
    for suite in ["ops", "autograd", "nn", "train"] {
        let one = run_binary(suite, "1", "cpu");
        let two = run_binary(suite, "2", "cpu");
        let again = run_binary(suite, "2", "cpu");
        for ((a, b), c) in results(&one).iter().zip(results(&two)).zip(results(&again)) {
            assert_eq!(a["allocations"], b["allocations"], "{suite} {}", a["id"]);
            assert_eq!(b["allocations"], c["allocations"], "{suite} {}", a["id"]);
        }
        // The meta device in its own process agrees too.
        let meta = run_binary(suite, "2", "meta");
        for (a, m) in results(&two).iter().zip(results(&meta)) {
            if a["error"].is_null() && a["skipped_scaler_steps"].is_null() {
                assert_eq!(a["allocations"], m["allocations"], "{suite} {}", a["id"]);
            }
        }
    }
}
