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
    if let Some(n) = args.nproc {
        if std::env::var_os("OMPI_COMM_WORLD_RANK").is_none() {
            return launch(n as usize, &o);
        }
    }
    if args.zero && !args.distributed && args.nproc.is_none() {
        eprintln!("strata train: --zero shards the optimizer over ranks: add --distributed");
        return ExitCode::FAILURE;
    }
    if args.distributed || args.nproc.is_some() {
        if auto {
            eprintln!("strata train: --distributed needs a number for --batch-size (per rank)");
            return ExitCode::FAILURE;
        }
        return run_distributed(&o, args.zero, &args.common.report_json);
    }
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

/// `--distributed`: trains on every rank; rank 0 prints the report and writes the JSON.
#[cfg(feature = "mpi")]
fn run_distributed(
    o: &TrainOptions,
    zero: bool,
    report_json: &Option<std::path::PathBuf>,
) -> ExitCode {
    let mut progress_on = |rank: usize| -> Box<dyn strata_cli::train::Progress> {
        if rank == 0 {
            Box::new(Bars::default())
        } else {
            Box::new(|_: &str| {})
        }
    };
    let (rank, report) = match strata_cli::train::train_distributed(o, zero, &mut progress_on) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("strata train: {e}");
            return ExitCode::FAILURE;
        }
    };
    if rank != 0 {
        return ExitCode::SUCCESS;
    }
    print!("{}", report.text());
    match write_json(report_json, &report) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata train: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `--distributed` in a strata built without MPI.
#[cfg(not(feature = "mpi"))]
fn run_distributed(_: &TrainOptions, _: bool, _: &Option<std::path::PathBuf>) -> ExitCode {
    eprintln!(
        "strata train: --distributed needs a strata built with the `mpi` feature (cargo build \
         --release -p strata-cli --features mpi, which needs Debian's libopenmpi-dev, \
         libclang-dev and pkg-config); scripts/train --nproc N builds it so"
    );
    ExitCode::FAILURE
}

/// `--nproc N` outside a job: runs this same command on N ranks under `mpirun` (with the
/// options `strata_dist::launch::mpirun` gives) and ends as the job ends.
#[cfg(feature = "mpi")]
fn launch(n: usize, o: &TrainOptions) -> ExitCode {
    if let Err(e) = strata_cli::train::check_distributed(o) {
        eprintln!("strata train: {e}");
        return ExitCode::FAILURE;
    }
    let exe = match std::env::current_exe() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("strata train: cannot find this program to start its ranks: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut cmd = strata_dist::launch::mpirun(n);
    cmd.arg(exe).args(std::env::args_os().skip(1));
    match cmd.status() {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            eprintln!("strata train: the job of {n} ranks failed ({s})");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!(
                "strata train: cannot start mpirun ({e}); install Open MPI (Debian's \
                 openmpi-bin)"
            );
            ExitCode::FAILURE
        }
    }
}

/// `--nproc` in a strata built without MPI.
#[cfg(not(feature = "mpi"))]
fn launch(_: usize, o: &TrainOptions) -> ExitCode {
    run_distributed(o, false, &None)
}
