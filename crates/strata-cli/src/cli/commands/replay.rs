//! `strata replay`: replay a snapshot's history under other allocator settings.

use std::process::ExitCode;

use crate::cli::args::ReplayArgs;
use crate::cli::commands::shared::load;

/// Replays the snapshot under `--alloc-conf` (and `--capacity`) and prints the comparison.
pub(crate) fn run(args: ReplayArgs) -> ExitCode {
    let ReplayArgs {
        snapshot,
        alloc_conf,
        capacity,
        device,
    } = args;
    let Some(snap) = load(&snapshot, "replay") else {
        return ExitCode::FAILURE;
    };
    match strata::alloc::caching::replay(&snap, device, &alloc_conf, capacity.map(|c| c as u64)) {
        Ok(report) => {
            print!("{}", strata_cli::replay::table(&report));
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("strata replay: {e}");
            ExitCode::FAILURE
        }
    }
}
