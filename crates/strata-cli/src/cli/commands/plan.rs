//! `strata plan`: predict the memory of a training step, or fit the batch size to a limit.

use std::process::ExitCode;

use strata::profile::plan::PlanReport;
use strata_cli::train::{sample, Fit, PlanJson, SampleOptions};

use crate::cli::args::PlanArgs;
use crate::cli::commands::shared::{
    auto_batch_size, batch_size_auto, options, step_options, write_json,
};

/// Prints the plan of the measured step (and the fit, with `--fit` or `--batch-size auto`),
/// or with `--sample N` the memory of generating N tokens.
pub(crate) fn run(args: PlanArgs) -> ExitCode {
    if let Some(tokens) = args.sample {
        return plan_sample(&args, tokens);
    }
    if let Some(n) = args.nproc {
        return plan_ranks(args, n as usize);
    }
    let fit_asked = args.fit || batch_size_auto(&args.common);
    let mut o = step_options(&args.common, args.step);
    let mut run = || -> Result<(PlanReport, Option<Fit>), String> {
        let fit = if fit_asked {
            let fit = auto_batch_size(&o)?;
            o.batch_size = fit.batch_size;
            Some(fit)
        } else {
            None
        };
        let report = strata_cli::train::plan(&o).map_err(|e| e.to_string())?;
        Ok((report, fit))
    };
    let (report, fit) = match run() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("strata plan: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!(
        "{} at batch size {} (the step strata train measures):",
        o.model.name(),
        o.batch_size
    );
    print!("{}", report.text());
    if let Some(fit) = &fit {
        let size = strata::alloc::caching::format_size;
        println!(
            "fit: batch size {} is the largest whose run holds in {} (run peak allocated {}, \
             reserved {}); tried {}",
            fit.batch_size,
            size(fit.memory_limit),
            size(fit.run_peak_allocated),
            size(fit.run_peak_reserved),
            fit.trials
                .iter()
                .map(|(b, ok)| format!("{b}{}", if *ok { "" } else { " (no)" }))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    let json = PlanJson::new(&o, &report, fit);
    match write_json(&args.common.report_json, &json) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata plan: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--sample N`: the generation of `strata sample --tokens N`, run on the meta device.
fn plan_sample(args: &PlanArgs, tokens: usize) -> ExitCode {
    if !args.common.model.is_language_model() {
        eprintln!("strata plan: --sample is for the gpt (--model gpt)");
        return ExitCode::FAILURE;
    }
    let o = SampleOptions {
        data_dir: options(&args.common).data_dir,
        prompt: args.prompt.clone(),
        tokens,
        device: strata::core::Device::Meta,
        ..SampleOptions::default()
    };
    match sample(&o) {
        Ok(report) => {
            print!("strata sample: {}", report.memory_text());
            match write_json(&args.common.report_json, &report) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("strata plan: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("strata plan: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--nproc N`: each rank of `strata train --nproc N`, planned on meta.
fn plan_ranks(args: PlanArgs, nproc: usize) -> ExitCode {
    if batch_size_auto(&args.common) || args.fit {
        eprintln!(
            "strata plan: --nproc plans a given --batch-size (per rank); --fit is for one process"
        );
        return ExitCode::FAILURE;
    }
    let o = strata_cli::train::TrainOptions {
        epochs: args.epochs,
        ..step_options(&args.common, args.step)
    };
    let ranks = match strata_cli::train::plan_distributed(&o, args.zero, nproc) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("strata plan: {e}");
            return ExitCode::FAILURE;
        }
    };
    let size = strata::alloc::caching::format_size;
    println!(
        "{} on {nproc} ranks at batch size {} per rank{} (what strata train --nproc {nproc} \
         measures on each):",
        o.model.name(),
        o.batch_size,
        if args.zero {
            ", optimizer state sharded"
        } else {
            ""
        }
    );
    for r in &ranks {
        println!(
            "  rank {}: step peak allocated {}, reserved {}; run peak allocated {}; persistent {}",
            r.rank,
            size(r.step_peak_allocated),
            size(r.step_peak_reserved),
            size(r.run_peak_allocated),
            size(r.persistent_bytes)
        );
    }
    let json = serde_json::json!({
        "model": o.model.name(),
        "batch_size": o.batch_size,
        "world_size": nproc,
        "zero": args.zero,
        "ranks": ranks,
    });
    match write_json(&args.common.report_json, &json) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata plan: {e}");
            ExitCode::FAILURE
        }
    }
}
