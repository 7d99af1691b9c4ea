//! `strata summary`: train briefly and print the allocator's memory summary.

use std::process::ExitCode;

use strata_cli::train::TrainOptions;

use crate::cli::args::SummaryArgs;
use crate::cli::commands::shared::options;

/// Trains one epoch on 2048 images (the gpt: 50 steps), then prints the CPU allocator's
/// memory summary.
pub(crate) fn run(args: SummaryArgs) -> ExitCode {
    let common = args.common;
    let o = TrainOptions {
        // The gpt: 50 steps, evaluated once at the end.
        steps: common.model.is_language_model().then_some(50),
        eval_every: 50,
        train_samples: Some(2048),
        test_samples: Some(common.test_samples.unwrap_or(1000)),
        ..options(&common)
    };
    let run = || -> strata_cli::train::Result<String> {
        strata_cli::train::train(&o, &mut |_: &str| {})?;
        Ok(strata::core::memory::memory_summary(
            strata::core::Device::Cpu,
            false,
        )?)
    };
    match run() {
        Ok(text) => {
            print!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("strata summary: {e}");
            ExitCode::FAILURE
        }
    }
}
