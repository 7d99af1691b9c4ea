//! `strata demo`: the tour of views, the version counter and memory returned on drop.

use std::process::ExitCode;

/// Runs the demo on stdout.
pub(crate) fn run() -> ExitCode {
    match strata_cli::demo::run(&mut std::io::stdout()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata demo failed: {e}");
            ExitCode::FAILURE
        }
    }
}
