//! `strata explain`: why a snapshot's run ran out of memory, and what would have helped.

use std::process::ExitCode;

use strata::alloc::offline::{explain, ExplainOptions};

use crate::cli::args::ExplainArgs;
use crate::cli::commands::shared::{check_output, load, write_json};

/// Explains the snapshot and prints the report (and writes `--json`).
pub(crate) fn run(args: ExplainArgs) -> ExitCode {
    let ExplainArgs {
        snapshot,
        capacity,
        json,
        device,
        library_frames,
        top,
        window,
    } = args;
    if let Err(e) = check_output(json.as_deref()) {
        eprintln!("strata explain: --json: {e}");
        return ExitCode::FAILURE;
    }
    let Some(snap) = load(&snapshot, "explain", window) else {
        return ExitCode::FAILURE;
    };
    let options = ExplainOptions {
        device,
        capacity: capacity.map(|c| c as u64),
        library_frames,
    };
    let e = explain(&snap, &options);
    print!("{}", strata_cli::explain::report(&e, top));
    if let Err(e) = write_json(&json, &e) {
        eprintln!("strata explain: --json: {e}");
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
