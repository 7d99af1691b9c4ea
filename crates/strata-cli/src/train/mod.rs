//! `strata train` and `strata eval`: Fashion-MNIST with the mlp, cnn or lstm model, a
//! report of accuracy, time and where the memory of one training step went.

pub mod models;
mod report;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use strata::alloc::{DeviceAllocator, Grouping, HostCachingAllocator};
use strata::core::autocast::autocast;
use strata::core::autograd::inference_mode;
use strata::core::nn::functional::{cross_entropy, Reduction};
use strata::core::{memory, with_allocator, Category, DType, Device, Tensor};
use strata::data::transform::Normalize;
use strata::data::{DataLoader, Dataset, FashionMnist, LoaderOptions, Split, Subset};
use strata::nn::amp::GradScaler;
use strata::nn::optim::{Adam, Optimizer, Sgd};
use strata::nn::state::{LoadOptions, StateDict, StateDictExt};
use strata::nn::Module;
use strata::profile::{GraphWatch, LeakWatch, ProfileOptions, Profiler, Schedule, SortKey};

pub use models::ModelKind;
pub use report::Report;

/// Which optimizer updates the weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OptimizerKind {
    /// SGD (with `--momentum`).
    Sgd,
    /// Adam.
    Adam,
    /// AdamW (decoupled weight decay).
    Adamw,
}

/// What `strata train` runs.
#[derive(Debug, Clone)]
pub struct TrainOptions {
    /// The model.
    pub model: ModelKind,
    /// Passes over the training set.
    pub epochs: usize,
    /// Samples per step.
    pub batch_size: usize,
    /// Learning rate.
    pub lr: f64,
    /// The optimizer.
    pub optimizer: OptimizerKind,
    /// SGD's momentum.
    pub momentum: f64,
    /// Weight decay (L2 for SGD and Adam, decoupled for AdamW).
    pub weight_decay: f64,
    /// Loader worker threads (0: load on the training thread).
    pub workers: usize,
    /// Batches each worker prepares ahead.
    pub prefetch: Option<usize>,
    /// Seed of the weights and the shuffling.
    pub seed: u64,
    /// Cap on the allocator's reserved bytes.
    pub memory_limit: Option<usize>,
    /// Where the dataset's IDX files are (Debian's package by default).
    pub data_dir: PathBuf,
    /// Train on the first N training images only.
    pub train_samples: Option<usize>,
    /// Evaluate on the first N test images only.
    pub test_samples: Option<usize>,
    /// Save the trained weights here (safetensors).
    pub save: Option<PathBuf>,
    /// Start from these weights (safetensors, PyTorch's key names).
    pub load: Option<PathBuf>,
    /// Profile steps 3 and 4 (after a warm-up step): a table, a Chrome trace, or both.
    pub profile: ProfileRequest,
    /// Mixed precision: forward and loss under autocast to this dtype (bf16 or f16; f16
    /// with a GradScaler).
    pub amp: Option<DType>,
    /// Step each parameter inside backward, as soon as its gradient is ready, and free the
    /// gradient at once.
    pub optimizer_in_backward: bool,
}

/// What runs a step: the optimizer, and the loss scaler with f16.
struct Stepper {
    opt: Optimizer,
    scaler: Option<GradScaler>,
    amp: Option<DType>,
}

/// What a run tells whoever watches it (progress bars, logs). Every method has a
/// do-nothing default; a closure taking `&str` gets each epoch's summary line.
pub trait Progress {
    /// Epoch `epoch` (from 1) of `epochs` starts, with `batches` batches.
    fn epoch_started(&mut self, epoch: usize, epochs: usize, batches: usize) {
        let _ = (epoch, epochs, batches);
    }
    /// A batch was trained on: its loss, the epoch's samples per second so far, and the
    /// allocated and peak allocated bytes now.
    fn batch_done(&mut self, loss: f32, samples_per_second: f64, allocated: usize, peak: usize) {
        let _ = (loss, samples_per_second, allocated, peak);
    }
    /// An epoch ended, evaluation included; `line` sums it up.
    fn epoch_done(&mut self, line: &str) {
        let _ = line;
    }
}

impl<F: FnMut(&str)> Progress for F {
    fn epoch_done(&mut self, line: &str) {
        self(line)
    }
}

/// Profiling of a few steps after the measured one.
#[derive(Debug, Clone, Default)]
pub struct ProfileRequest {
    /// Print the profiler's table (by self memory) after the run.
    pub table: bool,
    /// Write the profiled steps as a Chrome trace here.
    pub trace: Option<PathBuf>,
}

/// Errors of a run, each naming what failed.
#[derive(Debug, thiserror::Error)]
pub enum TrainError {
    /// An op or the allocator refused.
    #[error(transparent)]
    Core(#[from] strata::core::Error),
    /// The dataset could not be read.
    #[error(transparent)]
    Data(#[from] strata::data::DataError),
    /// Weights could not be saved or loaded.
    #[error(transparent)]
    State(#[from] strata::nn::state::StateError),
    /// A diagnostic failed.
    #[error(transparent)]
    Profile(#[from] strata::profile::ProfileError),
    /// An option is out of range.
    #[error("{0}")]
    Options(String),
}

/// Result of a run.
pub type Result<T> = std::result::Result<T, TrainError>;

fn dataset(dir: &std::path::Path, split: Split, limit: Option<usize>) -> Result<Arc<dyn Dataset>> {
    let full: Arc<dyn Dataset> =
        Arc::new(FashionMnist::load_from(dir, split)?.normalized(Normalize::FASHION_MNIST));
    Ok(match limit {
        Some(n) if n < full.len() => Arc::new(Subset::new(full, (0..n).collect())?),
        _ => full,
    })
}

fn loader(data: Arc<dyn Dataset>, o: &TrainOptions, shuffle: bool) -> Result<DataLoader> {
    Ok(DataLoader::new(
        data,
        LoaderOptions {
            batch_size: o.batch_size,
            shuffle,
            num_workers: o.workers,
            prefetch_factor: if o.workers > 0 { o.prefetch } else { None },
            seed: o.seed,
            ..LoaderOptions::default()
        },
    )?)
}

/// The test set `o` names.
pub fn test_set(o: &TrainOptions) -> Result<Arc<dyn Dataset>> {
    dataset(&o.data_dir, Split::Test, o.test_samples)
}

/// Builds `kind`, with the weights in `load` when given.
pub fn model_with_weights(kind: ModelKind, load: Option<&PathBuf>) -> Result<Arc<dyn Module>> {
    let model = models::build(kind)?;
    if let Some(path) = load {
        let dict = StateDict::load(path)?;
        model.load_state_dict(&dict, LoadOptions::default())?;
    }
    Ok(model)
}

/// Test accuracy (a fraction) and mean loss of `model` on `data`, under inference mode.
pub fn evaluate(
    model: &dyn Module,
    data: Arc<dyn Dataset>,
    o: &TrainOptions,
) -> Result<(f64, f64)> {
    let was_training = model.is_training();
    model.eval();
    let mut loader = loader(data, o, false)?;
    let (mut correct, mut loss_sum, mut n) = (0usize, 0f64, 0usize);
    let result = inference_mode(|| -> Result<()> {
        for batch in loader.epoch()? {
            let batch = batch?;
            let (x, y) = (&batch.tensors[0], &batch.tensors[1]);
            let logits = model.call(x)?;
            let b = y.numel();
            loss_sum += f64::from(cross_entropy(&logits, y, Reduction::Sum)?.item::<f32>()?);
            let hits = logits.argmax(Some(1), false)?.eq(y)?;
            correct += hits.to_vec::<bool>()?.iter().filter(|h| **h).count();
            n += b;
        }
        Ok(())
    });
    if was_training {
        model.train();
    }
    result?;
    let n = n.max(1) as f64;
    Ok((correct as f64 / n, loss_sum / n))
}

fn optimizer(model: &dyn Module, o: &TrainOptions) -> Result<Optimizer> {
    let params = model.parameters();
    Ok(match o.optimizer {
        OptimizerKind::Sgd => Optimizer::sgd(
            params,
            Sgd {
                lr: o.lr,
                momentum: o.momentum,
                weight_decay: o.weight_decay,
                ..Sgd::default()
            },
        )?,
        OptimizerKind::Adam | OptimizerKind::Adamw => {
            let config = Adam {
                lr: o.lr,
                weight_decay: o.weight_decay,
                ..Adam::default()
            };
            if o.optimizer == OptimizerKind::Adam {
                Optimizer::adam(params, config)?
            } else {
                Optimizer::adamw(params, config)?
            }
        }
    })
}

/// What one measured step left: the fresh allocator's peaks, its categories, and the
/// largest holders after the forward.
struct Measured {
    allocated: usize,
    reserved: usize,
    requested: usize,
    categories: Vec<(Category, usize)>,
    holders: Vec<String>,
}

/// Trains as `o` says, telling `progress` as it goes.
pub fn train(o: &TrainOptions, progress: &mut dyn Progress) -> Result<Report> {
    if o.batch_size == 0 || o.epochs == 0 {
        return Err(TrainError::Options(
            "--batch-size and --epochs must be at least 1".into(),
        ));
    }
    strata::core::manual_seed(o.seed);
    memory::set_memory_limit(o.memory_limit, Device::Cpu)?;
    let train_data = dataset(&o.data_dir, Split::Train, o.train_samples)?;
    let test_data = test_set(o)?;
    let model = model_with_weights(o.model, o.load.as_ref())?;
    if o.amp == Some(DType::F16) && o.optimizer_in_backward {
        return Err(TrainError::Options(
            "--amp f16 needs a loss scaler, which steps after backward: it cannot be used with \
             --optimizer-in-backward (use --amp bf16)"
                .into(),
        ));
    }
    let mut opt = optimizer(model.as_ref(), o)?;
    if o.optimizer_in_backward {
        opt.set_step_in_backward(true)?;
    }
    let mut stepper = Stepper {
        opt,
        scaler: (o.amp == Some(DType::F16)).then(GradScaler::new),
        amp: o.amp,
    };
    let mut loader = loader(train_data.clone(), o, true)?;
    let mut leaks = LeakWatch::new(Device::Cpu);
    let mut graphs = GraphWatch::new();
    let mut findings: Vec<String> = Vec::new();
    let (mut train_loss, mut epoch_seconds, mut accuracy) = (Vec::new(), Vec::new(), Vec::new());
    let (mut wait, mut samples, mut step) = (0f64, 0usize, 0usize);
    let mut measured: Option<Measured> = None;
    let mut test_loss = 0.0;
    let profiling = o.profile.table || o.profile.trace.is_some();
    // Steps 0 and 1 (the measured one) idle, step 2 warms up, steps 3 and 4 are kept.
    let mut profiler = profiling
        .then(|| Profiler::start(ProfileOptions::default().schedule(Schedule::new(2, 1, 2))));
    memory::reset_peak_memory_stats(Device::Cpu)?;
    for epoch in 0..o.epochs {
        model.train();
        let start = Instant::now();
        let (mut loss_sum, mut n) = (0f64, 0usize);
        progress.epoch_started(epoch + 1, o.epochs, loader.len());
        let mut batches = loader.epoch()?;
        loop {
            let waited = Instant::now();
            let Some(batch) = batches.next() else { break };
            wait += waited.elapsed().as_secs_f64();
            let batch = batch?;
            let (x, y) = (&batch.tensors[0], &batch.tensors[1]);
            let b = y.numel();
            let loss = if step == 1 {
                // The measured step: after the first optimizer step (its state exists),
                // with the gradients cleared and the batch loaded, one step on a fresh
                // allocator with the run's settings.
                let fresh = Arc::new(
                    HostCachingAllocator::host().map_err(|e| TrainError::Options(e.to_string()))?,
                );
                let routed: Arc<dyn DeviceAllocator> = fresh.clone();
                let (loss, holders) = with_allocator(&routed, || {
                    one_step(model.as_ref(), &mut stepper, x, y, Some(&fresh))
                })?;
                let stats = fresh.memory_stats();
                measured = Some(Measured {
                    allocated: stats.allocated_bytes.all.peak.max(0) as usize,
                    reserved: stats.reserved_bytes.all.peak.max(0) as usize,
                    requested: stats.requested_bytes.all.peak.max(0) as usize,
                    categories: Category::ALL
                        .iter()
                        .map(|c| (*c, stats.category_bytes.get(*c).peak.max(0) as usize))
                        .collect(),
                    holders,
                });
                loss
            } else {
                one_step(model.as_ref(), &mut stepper, x, y, None)?.0
            };
            loss_sum += f64::from(loss) * b as f64;
            n += b;
            step += 1;
            drop(batch);
            if let Some(p) = profiler.as_mut() {
                p.step();
            }
            progress.batch_done(
                loss,
                n as f64 / start.elapsed().as_secs_f64().max(1e-9),
                memory::memory_allocated(Device::Cpu)?,
                memory::max_memory_allocated(Device::Cpu)?,
            );
            for f in leaks.step()?.into_iter().chain(graphs.step()) {
                if !findings.contains(&f.message) {
                    findings.push(f.message);
                }
            }
        }
        drop(batches);
        let secs = start.elapsed().as_secs_f64();
        samples += n;
        epoch_seconds.push(secs);
        train_loss.push(loss_sum / n.max(1) as f64);
        let (acc, tl) = evaluate(model.as_ref(), test_data.clone(), o)?;
        accuracy.push(acc);
        test_loss = tl;
        progress.epoch_done(&format!(
            "epoch {}/{}: train loss {:.4}, test accuracy {:.2}%, {:.1} s, {:.0} samples/s",
            epoch + 1,
            o.epochs,
            loss_sum / n.max(1) as f64,
            100.0 * acc,
            secs,
            n as f64 / secs.max(1e-9)
        ));
    }
    if let Some(path) = &o.save {
        model.state_dict().save(path)?;
    }
    let (profile_table, trace_error) = match profiler.map(Profiler::finish) {
        Some(p) => {
            let table = o
                .profile
                .table
                .then(|| p.key_averages().table(SortKey::SelfCpuMemoryUsage, 15));
            let err = o
                .profile
                .trace
                .as_ref()
                .and_then(|path| p.export_chrome_trace(path).err().map(|e| (path.clone(), e)));
            (table, err)
        }
        None => (None, None),
    };
    if let Some((path, e)) = trace_error {
        return Err(TrainError::Options(format!(
            "cannot write the trace to {}: {e}",
            path.display()
        )));
    }
    let m = measured.unwrap_or(Measured {
        allocated: 0,
        reserved: 0,
        requested: 0,
        categories: Vec::new(),
        holders: Vec::new(),
    });
    let stats = memory::memory_stats(Device::Cpu)?;
    let mut categories: std::collections::BTreeMap<String, usize> = m
        .categories
        .iter()
        .filter(|(c, _)| !matches!(c, Category::Parameter | Category::OptimizerState))
        .map(|(c, b)| (c.as_str().to_owned(), *b))
        .collect();
    for c in [Category::Parameter, Category::OptimizerState] {
        categories.insert(
            c.as_str().to_owned(),
            stats.category_bytes.get(c).current.max(0) as usize,
        );
    }
    let total: f64 = epoch_seconds.iter().sum();
    Ok(Report {
        model: o.model.name().to_owned(),
        test_accuracy: accuracy.last().copied().unwrap_or(0.0),
        test_loss,
        test_accuracy_per_epoch: accuracy,
        train_loss,
        epoch_seconds,
        data_wait_seconds: wait,
        samples_per_second: samples as f64 / total.max(1e-9),
        step_peak_allocated: m.allocated,
        step_peak_reserved: m.reserved,
        step_peak_requested: m.requested,
        categories_at_peak: categories,
        top_holders: m.holders,
        split_steps: 0,
        run_peak_allocated: stats.allocated_bytes.all.peak.max(0) as usize,
        run_peak_reserved: stats.reserved_bytes.all.peak.max(0) as usize,
        watch_findings: findings,
        profile_table,
    })
}

/// One training step: forward, loss, backward, optimizer step, gradients cleared. With
/// `holders`, also the five sites holding the most memory on that allocator when the
/// forward ends.
fn one_step(
    model: &dyn Module,
    stepper: &mut Stepper,
    x: &Tensor,
    y: &Tensor,
    holders: Option<&HostCachingAllocator>,
) -> Result<(f32, Vec<String>)> {
    let (logits, loss) = {
        let _region = stepper.amp.map(autocast).transpose()?;
        let logits = model.call(x)?;
        let loss = cross_entropy(&logits, y, Reduction::Mean)?;
        (logits, loss)
    };
    let top = if let Some(a) = holders {
        let mut live = a.live_allocations_by(Grouping::Site);
        live.truncate(5);
        live.iter()
            .map(|g| {
                format!(
                    "{}: {} in {} blocks",
                    g.key,
                    strata::alloc::caching::format_size(g.bytes),
                    g.count
                )
            })
            .collect()
    } else {
        Vec::new()
    };
    drop(logits);
    match &mut stepper.scaler {
        Some(scaler) => {
            scaler.scale(&loss)?.backward()?;
            scaler.step(&mut stepper.opt)?;
            scaler.update()?;
        }
        None => {
            loss.backward()?;
            stepper.opt.step()?;
        }
    }
    stepper.opt.zero_grad(true)?;
    Ok((loss.to(DType::F32)?.item::<f32>()?, top))
}
