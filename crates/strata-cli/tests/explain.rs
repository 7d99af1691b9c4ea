//! `strata explain` end to end on PyTorch-format snapshots (`scripts/make-explain-fixtures.py`
//! and PyTorch's CUDA goldens), and the offline tools checking their arguments before they
//! read a snapshot.

use std::path::PathBuf;
use std::process::{Command, Output};

fn strata(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_strata"))
        .args(args)
        .output()
        .expect("the strata binary runs")
}

fn fixture(path: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../strata-alloc/tests/fixtures")
        .join(path)
        .display()
        .to_string()
}

/// What the command printed, its lines joined by single spaces (the verdict is wrapped).
fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn explain_names_the_fix_for_a_fragmented_oom_and_writes_json() {
    let json = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("explain-fragmented.json");
    let _ = std::fs::remove_file(&json);
    let out = strata(&[
        "explain",
        &fixture("explain/fragmented-oom.pickle"),
        "--json",
        json.to_str().unwrap(),
    ]);
    let text = stdout(&out);
    // The verdict comes first, then the tables.
    assert!(
        text.starts_with("out of memory at trace entry 150: 64.00 MiB requested at"),
        "{text}"
    );
    assert!(text.contains("expandable_segments:True or max_split_size_mb:32 each fit it"));
    assert!(text.contains("live memory by first frame in your code"));
    assert!(text.contains("/home/user/project/model.py:31 (forward)"));
    assert!(text.contains("suggested (each verified by replay"));
    let value: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("the JSON is written"))
            .expect("it parses");
    assert_eq!(value["moment"]["kind"], "out_of_memory");
    assert_eq!(value["capacity"]["source"], "estimated");
    assert_eq!(value["fragmentation"]["largest_free_block"], 12 << 20);
    assert_eq!(
        value["fixes"][1]["change"]["setting"],
        "expandable_segments:True"
    );
    assert_eq!(value["fixes"][1]["helps"], true);
}

#[test]
fn explain_suggests_no_setting_when_only_less_memory_helps() {
    let text = stdout(&strata(&["explain", &fixture("explain/full-oom.pickle")]));
    assert!(!text.contains("suggested"), "{text}");
    assert!(text.contains("No allocator setting fits it"), "{text}");
    assert!(text.contains("without the largest holder"), "{text}");
}

#[test]
fn explain_takes_the_limit_pytorchs_snapshots_leave_out() {
    // PyTorch's run under set_per_process_memory_fraction (1 GiB) that ran out of memory.
    let golden = fixture("pytorch-cuda/oom.default.pickle");
    let without = stdout(&strata(&["explain", &golden]));
    assert!(without.contains("give the bytes the run could hold with --capacity"));
    let with = stdout(&strata(&["explain", &golden, "--capacity", "1073741823"]));
    assert!(
        with.contains("1008.00 MiB reserved of 1024.00 MiB (given)"),
        "{with}"
    );
    assert!(with.contains("verified by replay"), "{with}");
}

#[test]
fn arguments_are_checked_before_the_snapshot_is_read() {
    // The snapshot does not exist: each command must fail on its other argument first.
    let missing = "/nonexistent/snapshot.pickle";
    let out = strata(&["explain", missing, "--json", "/nonexistent/dir/out.json"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--json") && err.contains("does not exist"),
        "{err}"
    );
    let out = strata(&[
        "replay",
        missing,
        "--alloc-conf",
        "expandable_segments:maybe",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--alloc-conf"), "{err}");
    let out = strata(&["viz", missing, "-o", "/nonexistent/dir/page.html"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--output"), "{err}");
}

#[test]
fn a_window_restricts_every_tool() {
    let snapshot = fixture("explain/fragmented-oom.pickle");
    // Before the out-of-memory at entry 150, there is only a peak to explain.
    let text = stdout(&strata(&["explain", &snapshot, "--to", "100"]));
    assert!(text.starts_with("no out-of-memory in the trace"), "{text}");
    let text = stdout(&strata(&["replay", &snapshot, "--from", "60"]));
    assert!(text.contains("replayed 91 trace entries"), "{text}");
    let out = strata(&[
        "viz",
        &snapshot,
        "--from",
        "200",
        "--to",
        "100",
        "-o",
        "/dev/null",
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("holds no entry"), "{err}");
    let out = strata(&["explain", &snapshot, "--from", "soon"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected a trace entry"), "{err}");
}
