//! `strata conform`: run conformance programs and print the results JSON.

use std::process::ExitCode;

use crate::cli::args::ConformArgs;

/// Runs the programs file on the chosen device; a file it cannot read or run exits with 2.
pub(crate) fn run(args: ConformArgs) -> ExitCode {
    let ConformArgs {
        programs,
        device,
        allocations,
    } = args;
    let options = strata_cli::conform::RunOptions {
        device: if device == "meta" {
            strata::prelude::Device::Meta
        } else {
            strata::prelude::Device::Cpu
        },
        allocations,
    };
    let text = match std::fs::read_to_string(&programs) {
        Ok(t) => t,
        Err(e) => {
            eprintln!("strata conform: cannot read {}: {e}", programs.display());
            return ExitCode::from(2);
        }
    };
    match strata_cli::conform::run_document_with(&text, options) {
        Ok(results) => {
            println!("{results}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("strata conform: {e}");
            ExitCode::from(2)
        }
    }
}
