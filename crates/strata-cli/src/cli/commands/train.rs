//! `strata train`: train a model and print its report.

use std::process::ExitCode;

use strata_cli::train::{Checkpoints, ProfileRequest, Resume, TrainOptions};

use crate::cli::args::TrainArgs;
use crate::cli::commands::shared::{auto_batch_size, batch_size_auto, step_options, write_json};
use crate::cli::progress::Bars;

/// Trains (first fitting the batch size where it is `auto`) and prints the report.
pub(crate) fn run(args: TrainArgs) -> ExitCode {
    let auto = batch_size_auto(&args.common);
    if args.common.model.is_language_model() && args.epochs.is_some() {
        eprintln!(
            "strata train: the {} trains by steps, not epochs: use --steps N (and --eval-every N)",
            args.common.model.name()
        );
        return ExitCode::FAILURE;
    }
    let checkpoint_dir = args.checkpoint_dir.or_else(|| args.resume.clone());
    let checkpoints = match (checkpoint_dir, args.checkpoint_every) {
        (Some(dir), every) => Some(Checkpoints {
            dir,
            every,
            keep: args.keep,
        }),
        (None, Some(_)) => {
            eprintln!(
                "strata train: --checkpoint-every needs --checkpoint-dir DIR (or --resume DIR)"
            );
            return ExitCode::FAILURE;
        }
        (None, None) => None,
    };
    let mut o = TrainOptions {
        epochs: args.epochs.unwrap_or(5),
        steps: args.steps,
        eval_every: args.eval_every,
        save: args.save,
        load: args.load,
        profile: ProfileRequest {
            table: args.profile,
            trace: args.trace,
        },
        device: args.device,
        snapshot: args.snapshot,
        html: args.html,
        checkpoints,
        resume: args.resume.map(|dir| Resume {
            dir,
            or_start: args.resume_or_start,
        }),
        ..step_options(&args.common, args.step)
    };
    let fitted = if auto {
        match auto_batch_size(&o) {
            Ok(fit) => {
                eprintln!(
                    "batch size auto: {} (the largest whose run holds in {})",
                    fit.batch_size,
                    strata::alloc::caching::format_size(fit.memory_limit)
                );
                o.batch_size = fit.batch_size;
                Some(fit)
            }
            Err(e) => {
                eprintln!("strata train: {e}");
                return ExitCode::FAILURE;
            }
        }
    } else {
        None
    };
    let report = match strata_cli::train::train(&o, &mut Bars::default()) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("strata train: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", report.text());
    if let Some(fit) = fitted {
        let size = strata::alloc::caching::format_size;
        println!(
            "batch size {}: predicted run peak allocated {}, reserved {}; measured {}, {}",
            fit.batch_size,
            size(fit.run_peak_allocated),
            size(fit.run_peak_reserved),
            size(report.run_peak_allocated),
            size(report.run_peak_reserved)
        );
    }
    match write_json(&args.common.report_json, &report) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata train: {e}");
            ExitCode::FAILURE
        }
    }
}
