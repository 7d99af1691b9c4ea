//! The `strata` command: run the demo, check conformance against PyTorch's answers.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// strata: PyTorch's tensor memory model in Rust, with every byte accounted for.
#[derive(Parser)]
#[command(name = "strata", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Show views sharing storage, the version counter, and memory returned on drop.
    Demo,
    /// Run conformance programs and print the results JSON on stdout.
    Conform {
        /// The programs file (`{"programs": [...]}`).
        programs: PathBuf,
        /// The device every tensor a program creates is made on: `cpu`, or `meta` (shapes,
        /// layouts and allocations without values).
        #[arg(long, default_value = "cpu", value_parser = ["cpu", "meta"])]
        device: String,
        /// Run each program on a fresh caching allocator and report its events and peaks.
        #[arg(long)]
        allocations: bool,
    },
    /// Measure op costs beside a memory-copy probe and PyTorch (when python3 has torch).
    Bench {
        /// Print a Markdown table (for BENCHMARKS.md).
        #[arg(long)]
        markdown: bool,
        /// Write every row as JSON to this file (name, strata, baseline, ratio, unit).
        #[arg(long)]
        json: Option<PathBuf>,
        /// Fewer repetitions: a smoke run, not a measurement.
        #[arg(long)]
        quick: bool,
    },
    /// Train a model on Fashion-MNIST and report accuracy, time and memory.
    Train(TrainArgs),
    /// Replay a snapshot's recorded history under other allocator settings (strata's or
    /// PyTorch's `_dump_snapshot` pickles, or strata's JSON).
    Replay {
        /// The snapshot.
        snapshot: PathBuf,
        /// The settings to try (`STRATA_ALLOC_CONF` syntax).
        #[arg(long, default_value = "")]
        alloc_conf: String,
        /// The device's capacity for the what-if run (bytes, or with KiB, MiB, GiB).
        #[arg(long, value_parser = parse_size)]
        capacity: Option<usize>,
        /// Which device's trace.
        #[arg(long, default_value_t = 0)]
        device: usize,
    },
    /// Write a snapshot as one self-contained HTML page (timeline by category, scope or
    /// site; segments at any moment; the largest holders at the peak).
    Viz {
        /// The snapshot.
        snapshot: PathBuf,
        /// The page to write.
        #[arg(short = 'o', long, default_value = "memory.html")]
        output: PathBuf,
        /// Also draw the timeline as a PNG here.
        #[arg(long)]
        png: Option<PathBuf>,
    },
    /// Predict the memory of `strata train`'s measured step without running it, or with
    /// `--fit` find the largest batch size that holds under `--memory-limit`.
    Plan(PlanArgs),
    /// Train briefly (one epoch on 2048 images) and print the allocator's memory summary.
    Summary {
        #[command(flatten)]
        common: CommonArgs,
    },
    /// Report the test accuracy and loss of saved weights (PyTorch's key names).
    Eval {
        #[command(flatten)]
        common: CommonArgs,
        /// The weights (safetensors).
        #[arg(long)]
        load: PathBuf,
    },
}

/// What `train` and `eval` share.
#[derive(clap::Args)]
struct CommonArgs {
    /// The model.
    #[arg(long, value_enum, default_value = "mlp")]
    model: strata_cli::train::ModelKind,
    /// Samples per batch (`train` also takes `auto`, with `--memory-limit`: the largest
    /// batch size that `plan --fit` finds).
    #[arg(long, default_value = "128", value_parser = parse_batch_size)]
    batch_size: BatchSize,
    /// Loader worker threads (0: load on the training thread).
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// Batches each worker prepares ahead.
    #[arg(long, default_value_t = 2)]
    prefetch: usize,
    /// Where the IDX files are.
    #[arg(long, default_value = "/usr/share/datasets/fashion-mnist")]
    data_dir: PathBuf,
    /// Evaluate on the first N test images only.
    #[arg(long)]
    test_samples: Option<usize>,
    /// Write the report as JSON here.
    #[arg(long)]
    report_json: Option<PathBuf>,
}

/// The options that change what a training step does and the memory it takes, shared by
/// `train` and `plan` (same names, same defaults).
#[derive(clap::Args)]
struct StepArgs {
    /// Learning rate.
    #[arg(long, default_value_t = 1e-3)]
    lr: f64,
    /// The optimizer.
    #[arg(long, value_enum, default_value = "adam")]
    optimizer: strata_cli::train::OptimizerKind,
    /// SGD's momentum.
    #[arg(long, default_value_t = 0.0)]
    momentum: f64,
    /// Weight decay.
    #[arg(long, default_value_t = 0.0)]
    weight_decay: f64,
    /// Seed of the weights and the shuffling.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Cap on reserved memory (bytes, or with KiB, MiB, GiB).
    #[arg(long, value_parser = parse_size)]
    memory_limit: Option<usize>,
    /// Train on the first N training images only.
    #[arg(long)]
    train_samples: Option<usize>,
    /// Mixed precision: forward and loss under autocast (f16 with a loss scaler).
    #[arg(long, value_parser = ["bf16", "f16"])]
    amp: Option<String>,
    /// Step each parameter inside backward and free its gradient at once.
    #[arg(long)]
    optimizer_in_backward: bool,
    /// Recompute activations in backward instead of keeping them (mlp: children 1-4 as one
    /// region; cnn: each conv block; lstm: segments of 7 time steps).
    #[arg(long)]
    checkpoint_activations: bool,
    /// When a step runs out of memory: `fail`, or `split` it into halves and accumulate.
    #[arg(long, value_enum, default_value = "fail")]
    on_oom: strata_cli::train::OnOom,
}

/// `strata train`'s options.
#[derive(clap::Args)]
struct TrainArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    step: StepArgs,
    /// Passes over the training set.
    #[arg(long, default_value_t = 5)]
    epochs: usize,
    /// Save the trained weights (safetensors).
    #[arg(long)]
    save: Option<PathBuf>,
    /// Start from these weights (safetensors).
    #[arg(long)]
    load: Option<PathBuf>,
    /// Profile two steps after the measured one and print the table.
    #[arg(long)]
    profile: bool,
    /// Write those two steps as a Chrome trace (chrome://tracing, Perfetto).
    #[arg(long)]
    trace: Option<PathBuf>,
    /// `cpu`, or `meta`: the whole run's memory without computing (values are null).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "meta"])]
    device: String,
    /// Record the allocator's history and save a snapshot pickle here (PyTorch's format).
    #[arg(long)]
    snapshot: Option<PathBuf>,
    /// Record the allocator's history and write the memory page here (see `strata viz`).
    #[arg(long)]
    html: Option<PathBuf>,
}

/// `strata plan`'s options.
#[derive(clap::Args)]
struct PlanArgs {
    #[command(flatten)]
    common: CommonArgs,
    #[command(flatten)]
    step: StepArgs,
    /// Find the largest batch size whose whole run (two epochs, evaluation, the loader's
    /// prefetched batches) holds under `--memory-limit`.
    #[arg(long)]
    fit: bool,
}

/// Progress bars on stderr: one per epoch, with the loss, samples per second and memory.
#[derive(Default)]
struct Bars {
    bar: Option<indicatif::ProgressBar>,
}

impl strata_cli::train::Progress for Bars {
    fn epoch_started(&mut self, epoch: usize, epochs: usize, batches: usize) {
        let bar = indicatif::ProgressBar::new(batches as u64);
        let style =
            indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar());
        bar.set_style(style.progress_chars("=> "));
        bar.set_prefix(format!("epoch {epoch}/{epochs}"));
        self.bar = Some(bar);
    }

    fn batch_done(
        &mut self,
        loss: Option<f32>,
        samples_per_second: f64,
        allocated: usize,
        peak: usize,
    ) {
        if let Some(bar) = &self.bar {
            let loss = loss.map_or_else(|| "-".to_owned(), |l| format!("{l:.4}"));
            bar.set_message(format!(
                "loss {loss} · {samples_per_second:.0} samples/s · memory {} (peak {})",
                strata::alloc::caching::format_size(allocated),
                strata::alloc::caching::format_size(peak)
            ));
            bar.inc(1);
        }
    }

    fn epoch_done(&mut self, line: &str) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
        eprintln!("{line}");
    }
}

/// `2GiB`, `512MiB`, `64KiB` or a number of bytes.
fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let (num, unit) = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .map_or((t, ""), |i| t.split_at(i));
    let scale: f64 = match unit.trim() {
        "" | "B" => 1.0,
        "KiB" | "K" | "KB" => 1024.0,
        "MiB" | "M" | "MB" => 1024.0 * 1024.0,
        "GiB" | "G" | "GB" => 1024.0 * 1024.0 * 1024.0,
        other => {
            return Err(format!(
                "unknown unit `{other}`: use bytes, KiB, MiB or GiB"
            ))
        }
    };
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a size: write 2GiB, 512MiB or a number of bytes"))?;
    Ok((n * scale) as usize)
}

/// `--batch-size`: a number of samples, or `auto` (`None`).
#[derive(Debug, Clone, Copy)]
struct BatchSize(Option<usize>);

fn parse_batch_size(s: &str) -> Result<BatchSize, String> {
    if s == "auto" {
        return Ok(BatchSize(None));
    }
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(BatchSize(Some(n))),
        _ => Err(format!(
            "`{s}` is not a batch size: write a positive number or `auto`"
        )),
    }
}

fn options(common: &CommonArgs) -> strata_cli::train::TrainOptions {
    strata_cli::train::TrainOptions {
        model: common.model,
        epochs: 1,
        batch_size: common.batch_size.0.unwrap_or(128),
        workers: common.workers,
        prefetch: Some(common.prefetch),
        data_dir: common.data_dir.clone(),
        test_samples: common.test_samples,
        ..Default::default()
    }
}

fn write_json(path: &Option<PathBuf>, value: &impl serde::Serialize) -> Result<(), String> {
    if let Some(path) = path {
        let text = serde_json::to_string_pretty(value).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The options `step` sets on top of `common`'s.
fn step_options(common: &CommonArgs, step: StepArgs) -> strata_cli::train::TrainOptions {
    strata_cli::train::TrainOptions {
        lr: step.lr,
        optimizer: step.optimizer,
        momentum: step.momentum,
        weight_decay: step.weight_decay,
        seed: step.seed,
        memory_limit: step.memory_limit,
        train_samples: step.train_samples,
        amp: match step.amp.as_deref() {
            Some("bf16") => Some(strata::core::DType::BF16),
            Some(_) => Some(strata::core::DType::F16),
            None => None,
        },
        optimizer_in_backward: step.optimizer_in_backward,
        checkpoint_activations: step.checkpoint_activations,
        on_oom: step.on_oom,
        ..options(common)
    }
}

/// `--batch-size auto`: the largest batch size `plan --fit` finds under the memory limit.
fn auto_batch_size(o: &strata_cli::train::TrainOptions) -> Result<strata_cli::train::Fit, String> {
    let Some(limit) = o.memory_limit else {
        return Err("--batch-size auto needs --memory-limit, the memory to fit in".into());
    };
    strata_cli::train::fit(o, limit).map_err(|e| e.to_string())
}

fn train(args: TrainArgs) -> ExitCode {
    let auto = args.common.batch_size.0.is_none();
    let mut o = strata_cli::train::TrainOptions {
        epochs: args.epochs,
        save: args.save,
        load: args.load,
        profile: strata_cli::train::ProfileRequest {
            table: args.profile,
            trace: args.trace,
        },
        device: if args.device == "meta" {
            strata::core::Device::Meta
        } else {
            strata::core::Device::Cpu
        },
        snapshot: args.snapshot,
        html: args.html,
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

fn plan(args: PlanArgs) -> ExitCode {
    let fit_asked = args.fit || args.common.batch_size.0.is_none();
    let mut o = step_options(&args.common, args.step);
    let mut run = || -> Result<(strata::profile::plan::PlanReport, Option<strata_cli::train::Fit>), String> {
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
    let json = strata_cli::train::PlanJson::new(&o, &report, fit);
    match write_json(&args.common.report_json, &json) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("strata plan: {e}");
            ExitCode::FAILURE
        }
    }
}

fn summary(common: CommonArgs) -> ExitCode {
    let o = strata_cli::train::TrainOptions {
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

fn eval(common: CommonArgs, load: PathBuf) -> ExitCode {
    let o = options(&common);
    let run = || -> strata_cli::train::Result<(f64, f64)> {
        let model = strata_cli::train::model_with_weights(o.model, Some(&load))?;
        let test = strata_cli::train::test_set(&o)?;
        strata_cli::train::evaluate(model.as_ref(), test, &o)
    };
    match run() {
        Ok((accuracy, loss)) => {
            println!(
                "{}: test accuracy {:.2}%, test loss {loss:.4}",
                o.model.name(),
                100.0 * accuracy
            );
            let value = serde_json::json!({"model": o.model.name(), "test_accuracy": accuracy, "test_loss": loss});
            match write_json(&common.report_json, &value) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("strata eval: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("strata eval: {e}");
            ExitCode::FAILURE
        }
    }
}

fn load(path: &std::path::Path, command: &str) -> Option<strata::alloc::Snapshot> {
    match strata::alloc::Snapshot::load_with_notes(path) {
        Ok((snap, notes)) => {
            if notes.skipped_trace_entries() > 0 {
                eprintln!(
                    "strata {command}: skipped {} trace entries of actions strata does not replay",
                    notes.skipped_trace_entries()
                );
            }
            Some(snap)
        }
        Err(e) => {
            eprintln!("strata {command}: {}: {e}", path.display());
            None
        }
    }
}

fn replay(
    snapshot: PathBuf,
    alloc_conf: String,
    capacity: Option<usize>,
    device: usize,
) -> ExitCode {
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

fn viz(snapshot: PathBuf, output: PathBuf, png: Option<PathBuf>) -> ExitCode {
    let Some(snap) = load(&snapshot, "viz") else {
        return ExitCode::FAILURE;
    };
    let title = snapshot
        .file_name()
        .map_or_else(|| "snapshot".into(), |n| n.to_string_lossy().into_owned());
    match strata_cli::viz::write(&snap, &title, &output, png.as_deref()) {
        Ok(data) => {
            println!(
                "wrote {} ({} allocations, peak {} at entry {})",
                output.display(),
                data.lives.len(),
                strata::alloc::caching::format_size(data.peak_bytes as usize),
                data.peak_entry
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("strata viz: {e}");
            ExitCode::FAILURE
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Settle STRATA_ALLOC_CONF before any work, so a bad setting stops the run at once.
    if let Err(e) = strata::core::routing::default_host_allocator() {
        eprintln!("strata: {e}");
        return ExitCode::FAILURE;
    }
    let command = cli.command.unwrap_or(Command::Demo);
    if let Command::Eval { common, .. } | Command::Summary { common } = &command {
        if common.batch_size.0.is_none() {
            eprintln!("strata: --batch-size auto is for train and plan; give a number");
            return ExitCode::FAILURE;
        }
    }
    match command {
        Command::Train(args) => train(args),
        Command::Plan(args) => plan(args),
        Command::Replay {
            snapshot,
            alloc_conf,
            capacity,
            device,
        } => replay(snapshot, alloc_conf, capacity, device),
        Command::Viz {
            snapshot,
            output,
            png,
        } => viz(snapshot, output, png),
        Command::Eval { common, load } => eval(common, load),
        Command::Summary { common } => summary(common),
        Command::Demo => match strata_cli::demo::run(&mut std::io::stdout()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("strata demo failed: {e}");
                ExitCode::FAILURE
            }
        },
        Command::Bench {
            markdown,
            json,
            quick,
        } => {
            let rows = match strata_cli::bench::run(quick) {
                Ok(rows) => rows,
                Err(e) => {
                    eprintln!("strata bench: {e}");
                    return ExitCode::FAILURE;
                }
            };
            if markdown {
                print!("{}", strata_cli::bench::markdown(&rows));
            } else {
                print!("{}", strata_cli::bench::table(&rows));
            }
            if let Some(path) = json {
                let text = serde_json::to_string_pretty(&rows).unwrap_or_default();
                if let Err(e) = std::fs::write(&path, text) {
                    eprintln!("strata bench: cannot write {}: {e}", path.display());
                    return ExitCode::FAILURE;
                }
            }
            ExitCode::SUCCESS
        }
        Command::Conform {
            programs,
            device,
            allocations,
        } => {
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
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    #[test]
    fn the_command_line_definition_is_consistent() {
        super::Cli::command().debug_assert();
    }
}
