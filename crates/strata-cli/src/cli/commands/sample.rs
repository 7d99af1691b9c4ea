//! `strata sample`: text from a trained gpt, and the memory its generation took.

use std::process::ExitCode;

use strata_cli::train::{default_data_dir, sample, ModelKind, SampleOptions};

use crate::cli::args::SampleArgs;
use crate::cli::commands::shared::write_json;

/// Generates, prints the text on stdout and the memory on stderr.
pub(crate) fn run(args: SampleArgs) -> ExitCode {
    let o = SampleOptions {
        data_dir: args
            .data_dir
            .unwrap_or_else(|| default_data_dir(ModelKind::Gpt)),
        load: Some(args.load),
        prompt: args.prompt,
        tokens: args.tokens,
        temperature: args.temperature,
        top_k: (args.top_k > 0).then_some(args.top_k),
        seed: args.seed,
        ..SampleOptions::default()
    };
    let report = match sample(&o) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("strata sample: {e}");
            return ExitCode::FAILURE;
        }
    };
    if let Some(text) = &report.text {
        println!("{text}");
    }
    eprint!("{}", report.memory_text());
    match write_json(&args.report_json, &report) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata sample: {e}");
            ExitCode::FAILURE
        }
    }
}
