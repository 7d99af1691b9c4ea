//! `strata replay`: replay a snapshot's history under other allocator settings.

use std::process::ExitCode;

use strata::alloc::caching::AllocatorConfig;
use strata::alloc::offline::{replay_with, ReplayOptions};

use crate::cli::args::ReplayArgs;
use crate::cli::commands::shared::load;

/// Replays the snapshot under `--alloc-conf` (and `--capacity`) and prints the comparison.
pub(crate) fn run(args: ReplayArgs) -> ExitCode {
    let ReplayArgs {
        snapshot,
        alloc_conf,
        capacity,
        limit,
        device,
        window,
    } = args;
    // The settings are checked before the snapshot, which may take long to read.
    if let Err(e) = AllocatorConfig::parse(&alloc_conf) {
        eprintln!("strata replay: --alloc-conf `{alloc_conf}`: {e}");
        return ExitCode::FAILURE;
    }
    let Some(snap) = load(&snapshot, "replay", window) else {
        return ExitCode::FAILURE;
    };
    let options = ReplayOptions {
        capacity: capacity.map(|c| c as u64),
        limit: limit.map(|l| l as u64),
        ..ReplayOptions::new(device, &alloc_conf)
    };
    match replay_with(&snap, &options) {
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
