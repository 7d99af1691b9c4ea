//! The subcommands' argument types and the flag groups they share, so that a new subcommand
//! reuses them and the help stays consistent.

use std::path::PathBuf;

use strata::alloc::offline::TracePoint;

use crate::cli::size::{parse_batch_size, parse_device, parse_size, BatchSize};

/// What `train` and `eval` share.
#[derive(clap::Args)]
pub(crate) struct CommonArgs {
    /// The model.
    #[arg(long, value_enum, default_value = "mlp")]
    pub(crate) model: strata_cli::train::ModelKind,
    /// Samples per batch: 128 images, or 12 windows for the gpt (`train` also takes `auto`,
    /// with `--memory-limit`: the largest batch size that `plan --fit` finds).
    #[arg(long, value_parser = parse_batch_size)]
    pub(crate) batch_size: Option<BatchSize>,
    /// Loader worker threads (0: load on the training thread).
    #[arg(long, default_value_t = 2)]
    pub(crate) workers: usize,
    /// Batches each worker prepares ahead.
    #[arg(long, default_value_t = 2)]
    pub(crate) prefetch: usize,
    /// Where the data is: Fashion-MNIST's IDX files (/usr/share/datasets/fashion-mnist),
    /// or for the gpt the Shakespeare corpus of scripts/fetch-shakespeare
    /// ($XDG_CACHE_HOME/strata/shakespeare, else ~/.cache/strata/shakespeare).
    #[arg(long)]
    pub(crate) data_dir: Option<PathBuf>,
    /// Evaluate on the first N test images only.
    #[arg(long)]
    pub(crate) test_samples: Option<usize>,
    /// Write the report as JSON here.
    #[arg(long)]
    pub(crate) report_json: Option<PathBuf>,
}

/// The options that change what a training step does and the memory it takes, shared by
/// `train` and `plan` (same names, same defaults).
#[derive(clap::Args)]
pub(crate) struct StepArgs {
    /// Learning rate (the gpt's peak, warmed up and decayed to a tenth by its schedule).
    #[arg(long, default_value_t = 1e-3)]
    pub(crate) lr: f64,
    /// The optimizer: adam, or adamw for the gpt.
    #[arg(long, value_enum)]
    pub(crate) optimizer: Option<strata_cli::train::OptimizerKind>,
    /// SGD's momentum.
    #[arg(long, default_value_t = 0.0)]
    pub(crate) momentum: f64,
    /// Weight decay: 0, or 0.1 for the gpt (on its matrices and embeddings only).
    #[arg(long)]
    pub(crate) weight_decay: Option<f64>,
    /// Seed of the weights and the shuffling.
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Cap on reserved memory (bytes, or with KiB, MiB, GiB).
    #[arg(long, value_parser = parse_size)]
    pub(crate) memory_limit: Option<usize>,
    /// Train on the first N training images only.
    #[arg(long)]
    pub(crate) train_samples: Option<usize>,
    /// Mixed precision: forward and loss under autocast (f16 with a loss scaler).
    #[arg(long, value_parser = ["bf16", "f16"])]
    pub(crate) amp: Option<String>,
    /// Step each parameter inside backward and free its gradient at once.
    #[arg(long)]
    pub(crate) optimizer_in_backward: bool,
    /// Recompute activations in backward instead of keeping them (mlp: children 1-4 as one
    /// region; cnn: each conv block; lstm: segments of 7 time steps; gpt: each transformer
    /// block). Bare or `full`: keep only each region's input; `selective` (gpt only): also
    /// keep the products' and the attention's outputs and recompute the pointwise ops.
    #[arg(long, value_enum, num_args = 0..=1, default_missing_value = "full")]
    pub(crate) checkpoint_activations: Option<strata_cli::train::CheckpointMode>,
    /// When a step runs out of memory: `fail`, or `split` it into halves and accumulate.
    #[arg(long, value_enum, default_value = "fail")]
    pub(crate) on_oom: strata_cli::train::OnOom,
}

/// `strata conform`'s options.
#[derive(clap::Args)]
pub(crate) struct ConformArgs {
    /// The programs file (`{"programs": [...]}`).
    pub(crate) programs: PathBuf,
    /// The device every tensor a program creates is made on: `cpu`, or `meta` (shapes,
    /// layouts and allocations without values).
    #[arg(long, default_value = "cpu", value_parser = ["cpu", "meta"])]
    pub(crate) device: String,
    /// Run each program on a fresh caching allocator and report its events and peaks.
    #[arg(long)]
    pub(crate) allocations: bool,
}

/// `strata bench`'s options.
#[derive(clap::Args)]
pub(crate) struct BenchArgs {
    /// Print a Markdown table (for BENCHMARKS.md).
    #[arg(long)]
    pub(crate) markdown: bool,
    /// Write every row as JSON to this file (name, strata, baseline, ratio, unit).
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Fewer repetitions: a smoke run, not a measurement.
    #[arg(long)]
    pub(crate) quick: bool,
    /// Run one group of rows alone: alloc, autograd, cnn, layers, data, plan or attention.
    #[arg(long)]
    pub(crate) only: Option<String>,
}

/// `strata train`'s options.
#[derive(clap::Args)]
pub(crate) struct TrainArgs {
    /// The options `train` and `eval` share.
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// The options of the training step.
    #[command(flatten)]
    pub(crate) step: StepArgs,
    /// Passes over the training set (default 5; the gpt trains by --steps).
    #[arg(long)]
    pub(crate) epochs: Option<usize>,
    /// Optimizer steps of the gpt (default 2000).
    #[arg(long)]
    pub(crate) steps: Option<usize>,
    /// Evaluate the gpt's validation loss after every N steps, and after the last.
    #[arg(long, default_value_t = 250)]
    pub(crate) eval_every: usize,
    /// Save the trained weights (safetensors).
    #[arg(long)]
    pub(crate) save: Option<PathBuf>,
    /// Start from these weights (safetensors).
    #[arg(long)]
    pub(crate) load: Option<PathBuf>,
    /// Profile two steps after the measured one and print the table.
    #[arg(long)]
    pub(crate) profile: bool,
    /// Write those two steps as a Chrome trace (chrome://tracing, Perfetto).
    #[arg(long)]
    pub(crate) trace: Option<PathBuf>,
    /// `cpu`, or `meta`: the whole run's memory without computing (values are null);
    /// `cuda` or `cuda:N` says why a GPU cannot be used yet.
    #[arg(long, default_value = "cpu", value_parser = parse_device)]
    pub(crate) device: strata::core::Device,
    /// Record the allocator's history and save a snapshot pickle here (PyTorch's format).
    #[arg(long)]
    pub(crate) snapshot: Option<PathBuf>,
    /// Record the allocator's history and write the memory page here (see `strata viz`).
    #[arg(long)]
    pub(crate) html: Option<PathBuf>,
    /// Also write a checkpoint every N steps (one is written at the end of each epoch
    /// whenever there is a checkpoint folder).
    #[arg(long, value_name = "N")]
    pub(crate) checkpoint_every: Option<usize>,
    /// Write checkpoints into this folder (made if missing; default: the --resume folder).
    #[arg(long, value_name = "DIR")]
    pub(crate) checkpoint_dir: Option<PathBuf>,
    /// Keep the newest K checkpoints, removing older ones.
    #[arg(long, value_name = "K", default_value_t = 3)]
    pub(crate) keep: usize,
    /// Resume from the newest intact checkpoint in DIR; the other options must be the
    /// run's (--epochs may be raised).
    #[arg(long, value_name = "DIR")]
    pub(crate) resume: Option<PathBuf>,
    /// With --resume: start from the beginning when DIR holds no intact checkpoint.
    #[arg(long, requires = "resume")]
    pub(crate) resume_or_start: bool,
    /// Train data-parallel on every rank of an MPI job (`mpirun -np N strata train
    /// --distributed`, or `scripts/train --nproc N`); --batch-size is per rank. Needs a
    /// strata built with the `mpi` feature.
    #[arg(long)]
    pub(crate) distributed: bool,
    /// Start N ranks on this machine with mpirun, each running this command with
    /// --distributed (the options a container needs included; see README, "Distributed
    /// training").
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) nproc: Option<u32>,
    /// With --distributed: shard the optimizer state over the ranks (ZeRO).
    #[arg(long)]
    pub(crate) zero: bool,
}

/// `strata replay`'s options.
#[derive(clap::Args)]
pub(crate) struct ReplayArgs {
    /// The snapshot.
    pub(crate) snapshot: PathBuf,
    /// The settings to try (`STRATA_ALLOC_CONF` syntax).
    #[arg(long, default_value = "")]
    pub(crate) alloc_conf: String,
    /// The device's capacity for the what-if run (bytes, or with KiB, MiB, GiB).
    #[arg(long, value_parser = parse_size)]
    pub(crate) capacity: Option<usize>,
    /// The recorded run's memory limit (bytes, or with KiB, MiB, GiB), for snapshots that
    /// do not record one: PyTorch's leave out `set_per_process_memory_fraction`.
    #[arg(long, value_parser = parse_size)]
    pub(crate) limit: Option<usize>,
    /// Which device's trace.
    #[arg(long, default_value_t = 0)]
    pub(crate) device: usize,
    /// The part of the trace to replay.
    #[command(flatten)]
    pub(crate) window: WindowArgs,
}

/// The part of a trace an offline tool looks at.
#[derive(clap::Args, Clone, Copy)]
pub(crate) struct WindowArgs {
    /// Start at this trace entry (1200) or this long after the first entry (2.5s, 300ms,
    /// 40us); blocks live then count as allocated before the window.
    #[arg(long, value_parser = parse_point)]
    pub(crate) from: Option<TracePoint>,
    /// End before this trace entry or time (the snapshot's own end-of-run segments are then
    /// left out).
    #[arg(long, value_parser = parse_point)]
    pub(crate) to: Option<TracePoint>,
}

fn parse_point(s: &str) -> Result<TracePoint, String> {
    s.parse()
}

/// `strata explain`'s options.
#[derive(clap::Args)]
pub(crate) struct ExplainArgs {
    /// The snapshot (PyTorch's `_dump_snapshot` pickle, or strata's pickle or JSON).
    pub(crate) snapshot: PathBuf,
    /// The bytes the run could hold: the device's memory, or the limit it ran under
    /// (`set_per_process_memory_fraction`); bytes, or with KiB, MiB, GiB. PyTorch's snapshots
    /// record neither; without it the limit a strata snapshot records is used, else an
    /// estimate from the out-of-memory entry.
    #[arg(long, value_parser = parse_size)]
    pub(crate) capacity: Option<usize>,
    /// Also write the explanation as JSON here.
    #[arg(long)]
    pub(crate) json: Option<PathBuf>,
    /// Which device's trace.
    #[arg(long, default_value_t = 0)]
    pub(crate) device: usize,
    /// Group the live memory by its first frame even in library code (PyTorch's, Python's,
    /// installed packages), not by the first frame in your own code.
    #[arg(long)]
    pub(crate) library_frames: bool,
    /// How many holders to list.
    #[arg(long, default_value_t = 10)]
    pub(crate) top: usize,
    /// The part of the trace to explain.
    #[command(flatten)]
    pub(crate) window: WindowArgs,
}

/// `strata viz`'s options.
#[derive(clap::Args)]
pub(crate) struct VizArgs {
    /// The snapshot.
    pub(crate) snapshot: PathBuf,
    /// The page to write.
    #[arg(short = 'o', long, default_value = "memory.html")]
    pub(crate) output: PathBuf,
    /// Also draw the timeline as a PNG here.
    #[arg(long)]
    pub(crate) png: Option<PathBuf>,
    /// Serve the page on this loopback address (127.0.0.1:0 picks a free port) instead of
    /// writing it, so that zooming into a long trace reads that window's exact blocks.
    #[arg(long, value_name = "ADDR", num_args = 0..=1, default_missing_value = "127.0.0.1:0")]
    pub(crate) serve: Option<std::net::SocketAddr>,
    /// Up to this many allocations the page holds every one; beyond, it draws a summary of
    /// the timeline and the blocks live at the peak.
    #[arg(long, value_name = "N", default_value_t = 200_000)]
    pub(crate) exact_lives: usize,
    /// The part of the trace to draw.
    #[command(flatten)]
    pub(crate) window: WindowArgs,
}

/// `strata plan`'s options.
#[derive(clap::Args)]
pub(crate) struct PlanArgs {
    /// The options `train` and `eval` share.
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// The options of the training step.
    #[command(flatten)]
    pub(crate) step: StepArgs,
    /// Find the largest batch size whose whole run (two epochs, evaluation, the loader's
    /// prefetched batches) holds under `--memory-limit`.
    #[arg(long)]
    pub(crate) fit: bool,
    /// For the gpt: predict the memory of `strata sample --tokens N` instead (the key/value
    /// cache and the generation's peak), with `--prompt`.
    #[arg(long, value_name = "N")]
    pub(crate) sample: Option<usize>,
    /// The prompt of `--sample`.
    #[arg(long, default_value = "\n")]
    pub(crate) prompt: String,
    /// Plan each rank of `strata train --nproc N` (with the same options): its step and
    /// run peaks, buckets and shards included, one rank after another on meta.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) nproc: Option<u32>,
    /// With --nproc: the optimizer state sharded over the ranks, as `strata train --zero`.
    #[arg(long, requires = "nproc")]
    pub(crate) zero: bool,
    /// With --nproc: the epochs of the planned run (its run peak is reached in the first).
    #[arg(long, default_value_t = 1, requires = "nproc")]
    pub(crate) epochs: usize,
}

/// `strata sample`'s options.
#[derive(clap::Args)]
pub(crate) struct SampleArgs {
    /// The gpt's trained weights (safetensors, nanoGPT's keys).
    #[arg(long)]
    pub(crate) load: PathBuf,
    /// Tokens to generate.
    #[arg(long, default_value_t = 500)]
    pub(crate) tokens: usize,
    /// The text to start from.
    #[arg(long, default_value = "\n")]
    pub(crate) prompt: String,
    /// Divides the logits before the softmax (below 1: more likely tokens).
    #[arg(long, default_value_t = 0.8)]
    pub(crate) temperature: f64,
    /// Draw only among the K most likely tokens (0: all).
    #[arg(long, default_value_t = 200)]
    pub(crate) top_k: usize,
    /// Seed of the draws.
    #[arg(long, default_value_t = 1337)]
    pub(crate) seed: u64,
    /// The corpus the model was trained on (its vocabulary); the default is where
    /// scripts/fetch-shakespeare puts it.
    #[arg(long)]
    pub(crate) data_dir: Option<PathBuf>,
    /// Write the report (text, cache and peak bytes) as JSON here.
    #[arg(long)]
    pub(crate) report_json: Option<PathBuf>,
}

/// `strata summary`'s options.
#[derive(clap::Args)]
pub(crate) struct SummaryArgs {
    /// The options `train` and `eval` share.
    #[command(flatten)]
    pub(crate) common: CommonArgs,
}

/// `strata eval`'s options.
#[derive(clap::Args)]
pub(crate) struct EvalArgs {
    /// The options `train` and `eval` share.
    #[command(flatten)]
    pub(crate) common: CommonArgs,
    /// The weights (safetensors).
    #[arg(long)]
    pub(crate) load: PathBuf,
}
