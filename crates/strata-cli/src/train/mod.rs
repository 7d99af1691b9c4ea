//! `strata train` and `strata eval`: Fashion-MNIST with the mlp, cnn or lstm model, or
//! nanoGPT's character model on Shakespeare; a report of accuracy or validation loss, time
//! and where the memory of one training step went.

mod checkpoint;
mod data;
mod distributed;
mod figures;
mod measure;
pub mod models;
mod plan;
pub mod recipe;
mod report;
mod resume;
mod sample;
mod step;
mod text;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use strata::alloc::RecordContext;
use strata::core::autograd::inference_mode;
use strata::core::device::DefaultDevice;
use strata::core::nn::functional::{cross_entropy, Reduction};
use strata::core::{memory, DType, Device};
use strata::data::{Dataset, Split};
use strata::nn::state::{LoadOptions, StateDict, StateDictExt};
use strata::nn::Module;
use strata::profile::{GraphWatch, LeakWatch, ProfileOptions, Profiler, Schedule, SortKey};

use data::Data;
use measure::{measure_on_fresh, Measured};

pub use checkpoint::{
    summary as checkpoint_summary, FileError as CheckpointFileError, Summary as CheckpointSummary,
};
pub use data::{test_set, TEST_IMAGES, TRAIN_IMAGES};
#[cfg(feature = "mpi")]
pub use distributed::train_distributed;
pub use distributed::{check_distributed, plan_distributed};
pub use models::{CheckpointMode, Model, ModelKind, Vocabulary};
pub use plan::{fit, plan, Fit, PlanJson};
pub use report::{Evaluation, RankFigures, Report};
pub use resume::{Checkpoints, Resume};
pub use sample::{sample, SampleOptions, SampleReport};
pub use step::{OnOom, StepOutcome, Stepper};
pub use text::{default_data_dir, Text, BLOCK, EVAL_WINDOWS};

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
    /// Passes over the training set (the classifiers).
    pub epochs: usize,
    /// Optimizer steps of a model trained by steps (the gpt; 2,000 when `None`).
    pub steps: Option<usize>,
    /// A model trained by steps is evaluated after every this many steps, and at the end.
    pub eval_every: usize,
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
    /// Checkpoint each region (see [`Model::build`] for the regions): keep only its inputs
    /// (`Full`), or also what the model's policy saves (`Selective`, the gpt only), and
    /// recompute the rest in backward. `None`: keep every activation.
    pub checkpoint_activations: Option<CheckpointMode>,
    /// `Device::Cpu`, or `Device::Meta`: the whole run's allocations without computing
    /// (every value in the report is then `None`).
    pub device: Device,
    /// What a step that runs out of memory does.
    pub on_oom: OnOom,
    /// Record the allocator's history through the run and save a snapshot pickle here.
    pub snapshot: Option<PathBuf>,
    /// Record the allocator's history and write the memory page (`strata viz`) here.
    pub html: Option<PathBuf>,
    /// Write checkpoints as the run goes (see README, "Checkpoints and resuming").
    pub checkpoints: Option<Checkpoints>,
    /// Resume from the newest intact checkpoint of a folder.
    pub resume: Option<Resume>,
}

impl Default for TrainOptions {
    /// The default recipe: the mlp, 5 epochs of Adam (lr 1e-3) in batches of 128, two
    /// loader workers, on the CPU, with Debian's Fashion-MNIST.
    fn default() -> Self {
        TrainOptions {
            model: ModelKind::Mlp,
            epochs: 5,
            steps: None,
            eval_every: 250,
            batch_size: 128,
            lr: 1e-3,
            optimizer: OptimizerKind::Adam,
            momentum: 0.0,
            weight_decay: 0.0,
            workers: 2,
            prefetch: Some(2),
            seed: 0,
            memory_limit: None,
            data_dir: PathBuf::from(strata::data::FashionMnist::DEFAULT_DIR),
            train_samples: None,
            test_samples: None,
            save: None,
            load: None,
            profile: ProfileRequest::default(),
            amp: None,
            optimizer_in_backward: false,
            checkpoint_activations: None,
            device: Device::Cpu,
            on_oom: OnOom::Fail,
            snapshot: None,
            html: None,
            checkpoints: None,
            resume: None,
        }
    }
}

impl TrainOptions {
    /// The steps a model trained by steps takes.
    pub fn steps_or_default(&self) -> usize {
        self.steps.unwrap_or(recipe::DEFAULT_STEPS)
    }

    /// The text of a language model (read from `data_dir`), `None` for the classifiers.
    pub fn text(&self) -> Result<Option<Text>> {
        self.model
            .is_language_model()
            .then(|| Text::load(&self.data_dir))
            .transpose()
    }
}

/// What a run tells whoever watches it (progress bars, logs). Every method has a
/// do-nothing default; a closure taking `&str` gets each epoch's summary line.
pub trait Progress {
    /// Epoch `epoch` (from 1) of `epochs` starts, with `batches` batches.
    fn epoch_started(&mut self, epoch: usize, epochs: usize, batches: usize) {
        let _ = (epoch, epochs, batches);
    }
    /// A batch was trained on: its loss (`None` on meta), the epoch's samples per second so
    /// far, and the allocated and peak allocated bytes now.
    fn batch_done(
        &mut self,
        loss: Option<f32>,
        samples_per_second: f64,
        allocated: usize,
        peak: usize,
    ) {
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
    /// A checkpoint could not be written or read.
    #[error(transparent)]
    Checkpoint(#[from] checkpoint::FileError),
    /// An option is out of range.
    #[error("{0}")]
    Options(String),
}

/// Result of a run.
pub type Result<T> = std::result::Result<T, TrainError>;

/// The model `o` names (the gpt for `text`'s vocabulary), fresh weights.
fn build_model(o: &TrainOptions, text: Option<&Text>) -> Result<Model> {
    Ok(match text {
        Some(t) => Model::language_model(t.vocabulary(), o.checkpoint_activations)?,
        None => Model::build(o.model, o.checkpoint_activations)?,
    })
}

/// Builds the model `o` names (the gpt for the vocabulary of the text in `o.data_dir`),
/// with the weights in `load` when given.
pub fn model_with_weights(o: &TrainOptions, load: Option<&PathBuf>) -> Result<Arc<dyn Module>> {
    let model = build_model(o, o.text()?.as_ref())?;
    load_weights(model.module().as_ref(), load)?;
    Ok(model.module().clone())
}

pub(crate) fn load_weights(model: &dyn Module, load: Option<&PathBuf>) -> Result<()> {
    if let Some(path) = load {
        let dict = StateDict::load(path)?;
        model.load_state_dict(&dict, LoadOptions::default())?;
    }
    Ok(())
}

/// Test accuracy (a fraction) and mean loss of `model` on `data`, under inference mode (for
/// the gpt on its validation windows: next-token accuracy and the mean cross-entropy over
/// every prediction).
pub fn evaluate(
    model: &dyn Module,
    data: Arc<dyn Dataset>,
    o: &TrainOptions,
) -> Result<(f64, f64)> {
    let mut batches = Data::from_dataset(data, o, false)?;
    let values = evaluate_on(model, &mut batches)?;
    values.ok_or_else(|| TrainError::Options("evaluation on meta has no values".into()))
}

/// Accuracy and mean loss over `data`'s batches; `None` on meta (the same ops run, and
/// allocate, but there are no values to read).
fn evaluate_on(model: &dyn Module, data: &mut Data) -> Result<Option<(f64, f64)>> {
    let was_training = model.is_training();
    model.eval();
    let (mut correct, mut loss_sum, mut n, mut meta) = (0usize, 0f64, 0usize, false);
    let result = inference_mode(|| -> Result<()> {
        for batch in data.epoch()? {
            let (x, y) = batch?;
            let logits = model.call(&x)?;
            let (logits, y) = step::loss_rows(&logits, &y)?;
            let loss = cross_entropy(&logits, &y, Reduction::Sum)?;
            let hits = logits.argmax(Some(1), false)?.eq(&y)?;
            n += y.numel();
            if x.device() == Device::Meta {
                meta = true;
                continue;
            }
            loss_sum += f64::from(loss.item::<f32>()?);
            correct += hits.to_vec::<bool>()?.iter().filter(|h| **h).count();
        }
        Ok(())
    });
    if was_training {
        model.train();
    }
    result?;
    let n = n.max(1) as f64;
    Ok((!meta).then(|| (correct as f64 / n, loss_sum / n)))
}

/// The measured step on a fresh caching allocator for `o.device`, with the run's settings.
fn measured_step(
    o: &TrainOptions,
    stepper: &mut Stepper,
    model: &Model,
    x: &strata::core::Tensor,
    y: &strata::core::Tensor,
) -> Result<(StepOutcome, Measured)> {
    measure_on_fresh(o.device, |after| stepper.step(model, x, y, after))
}

/// Why `model` cannot be checkpointed selectively.
fn selective_refusal(model: ModelKind) -> String {
    format!(
        "--checkpoint-activations selective needs a policy that says which ops' outputs to \
         keep, and only the gpt has one: checkpoint the {} fully (--checkpoint-activations \
         full), or give its regions your own SelectivePolicy through \
         strata::core::autograd::checkpoint_selective in a program",
        model.name()
    )
}

/// Checks what no run can do before anything starts.
pub(crate) fn check(o: &TrainOptions) -> Result<()> {
    crate::crash::check().map_err(TrainError::Options)?;
    if o.batch_size == 0 || o.epochs == 0 {
        return Err(TrainError::Options(
            "--batch-size and --epochs must be at least 1".into(),
        ));
    }
    if o.model.is_language_model() {
        if o.steps_or_default() == 0 || o.eval_every == 0 {
            return Err(TrainError::Options(
                "--steps and --eval-every must be at least 1".into(),
            ));
        }
    } else if o.steps.is_some() {
        return Err(TrainError::Options(format!(
            "the {} trains by epochs over Fashion-MNIST: use --epochs (--steps is for the gpt)",
            o.model.name()
        )));
    } else if o.checkpoint_activations == Some(CheckpointMode::Selective) {
        return Err(TrainError::Options(selective_refusal(o.model)));
    }
    if let Device::Cuda(index) = o.device {
        // The library's own answer (no driver, no such device); with a GPU, the training
        // step's ops have no CUDA kernels yet.
        let why = match strata::core::cuda::check(index) {
            Err(strata::core::Error::Unsupported { message, .. }) => message,
            Err(e) => e.to_string(),
            Ok(()) => "tensors can live on the GPU, but the training step's ops (matmul, \
                       activations, the loss, the optimizer) have no CUDA kernels yet"
                .to_owned(),
        };
        return Err(TrainError::Options(format!(
            "--device {} is not available: {why}. Train with --device cpu, or plan the run's \
             memory with --device meta",
            o.device
        )));
    }
    Ok(())
}

/// The run's rounds of training between evaluations, by epoch: the classifiers have one
/// round per epoch (all `batches` of it); a model trained by steps has one epoch of its
/// steps, evaluated after every `eval_every` of them and after the last.
fn rounds(o: &TrainOptions, batches: usize) -> Vec<Vec<usize>> {
    if !o.model.is_language_model() {
        return vec![vec![batches]; o.epochs];
    }
    let steps = o.steps_or_default().min(batches);
    let every = o.eval_every.max(1);
    let mut rounds = vec![every; steps / every];
    if !steps.is_multiple_of(every) {
        rounds.push(steps % every);
    }
    vec![rounds]
}

/// How a round of training ended, for its line.
struct RoundEnd {
    /// The round, from 0, and how many there are.
    round: usize,
    rounds: usize,
    /// Steps taken so far.
    step: usize,
    /// The round's mean training loss.
    train_loss: f64,
    /// The evaluation's accuracy and loss (`None` on meta).
    values: Option<(f64, f64)>,
    /// The round's training time and samples.
    secs: f64,
    samples: usize,
}

/// The line a round ends with: the epoch's accuracy, or the steps' losses.
fn round_line(o: &TrainOptions, r: &RoundEnd) -> Result<String> {
    let (secs, train_loss) = (r.secs, r.train_loss);
    let rate = r.samples as f64 / secs.max(1e-9);
    let language = o.model.is_language_model();
    // "step 250/2000" for a model trained by steps, "epoch 2/5" for the classifiers.
    let at = if language {
        format!("step {}/{}", r.step, o.steps_or_default())
    } else {
        format!("epoch {}/{}", r.round + 1, r.rounds)
    };
    Ok(match r.values {
        Some((_, val)) if language => format!(
            "{at}: train loss {train_loss:.4}, val loss {val:.4}, {secs:.1} s, \
             {rate:.0} samples/s"
        ),
        Some((acc, _)) => format!(
            "{at}: train loss {train_loss:.4}, test accuracy {:.2}%, {secs:.1} s, \
             {rate:.0} samples/s",
            100.0 * acc
        ),
        None => format!(
            "{at} on meta: {secs:.1} s, peak allocated {}",
            strata::alloc::caching::format_size(memory::max_memory_allocated(o.device)?)
        ),
    })
}

/// How many rounds of `epochs` (see [`rounds`]) are finished after `step` steps.
fn finished_rounds(epochs: &[Vec<usize>], step: usize) -> usize {
    let (mut at, mut rounds) = (0usize, 0usize);
    for &len in epochs.iter().flatten() {
        if at + len > step {
            break;
        }
        at += len;
        rounds += 1;
    }
    rounds
}

/// Trains as `o` says, telling `progress` as it goes.
pub fn train(o: &TrainOptions, progress: &mut dyn Progress) -> Result<Report> {
    check(o)?;
    strata::core::manual_seed(o.seed);
    memory::set_memory_limit(o.memory_limit, o.device)?;
    // The run's peaks include making the model and the optimizer.
    memory::reset_peak_memory_stats(o.device)?;
    let recording = o.snapshot.is_some() || o.html.is_some();
    if recording {
        memory::record_memory_history(true, RecordContext::All, 1_000_000, o.device)?;
    }
    let text = o.text()?;
    let mut train_data = Data::new(o, Split::Train, text.as_ref())?;
    let mut test_data = Data::new(o, Split::Test, text.as_ref())?;
    let model = {
        let _on = DefaultDevice::set(o.device);
        build_model(o, text.as_ref())?
    };
    load_weights(model.module().as_ref(), o.load.as_ref())?;
    let mut stepper = Stepper::new(&model, o)?;
    let durability = resume::Durability::new(o, &train_data, &test_data)?;
    let mut checkpoint_notes = Vec::new();
    let resumed = match &durability {
        Some(d) => d.resume(o, &model, &mut stepper, &mut checkpoint_notes)?,
        None => None,
    };
    let epochs = rounds(o, train_data.len());
    let total_steps: usize = epochs.iter().flatten().sum();
    let start_step = resumed.as_ref().map_or(0, |r| r.step);
    if start_step > total_steps {
        return Err(TrainError::Options(format!(
            "the checkpoint is at step {start_step}, past this run's {total_steps} steps: \
             raise --epochs to train on from it"
        )));
    }
    let resumed_from = resumed.as_ref().map(|r| r.from.display().to_string());
    let mut f = resumed.map(|r| r.figures).unwrap_or_default();
    // The test set's passes so far, as in the uninterrupted run.
    test_data.set_epoch(finished_rounds(&epochs, start_step) as u64);
    let mut leaks = LeakWatch::new(o.device);
    let mut graphs = GraphWatch::new();
    let meta = o.device == Device::Meta;
    let profiling = o.profile.table || o.profile.trace.is_some();
    // Steps 0 and 1 (the measured one) idle, step 2 warms up, steps 3 and 4 are kept.
    let mut profiler = profiling
        .then(|| Profiler::start(ProfileOptions::default().schedule(Schedule::new(2, 1, 2))));
    let total_rounds: usize = epochs.iter().map(Vec::len).sum();
    let every = durability.as_ref().and_then(resume::Durability::every);
    let (mut step, mut round) = (0usize, 0usize);
    for (epoch, epoch_rounds) in epochs.iter().enumerate() {
        let epoch_steps: usize = epoch_rounds.iter().sum();
        if step + epoch_steps <= start_step {
            // Trained before the checkpoint.
            step += epoch_steps;
            round += epoch_rounds.len();
            continue;
        }
        train_data.set_epoch(epoch as u64);
        let mut batches = train_data.epoch_from(start_step.saturating_sub(step))?;
        for &round_len in epoch_rounds {
            if step + round_len <= start_step {
                step += round_len;
                round += 1;
                continue;
            }
            // Steps of this round taken before the checkpoint (a resumed round), whose
            // loss, samples and time the figures carry.
            let done = start_step.saturating_sub(step);
            if done == 0 {
                (f.round_loss_sum, f.round_samples, f.round_elapsed) = (0.0, 0, 0.0);
            }
            step += done;
            model.module().train();
            let start = Instant::now();
            let elapsed = |f: &figures::Figures| f.round_elapsed + start.elapsed().as_secs_f64();
            progress.epoch_started(round + 1, total_rounds, round_len);
            for k in done..round_len {
                let waited = Instant::now();
                let Some(batch) = batches.next() else { break };
                f.data_wait += waited.elapsed().as_secs_f64();
                let (x, y) = batch?;
                let b = x.shape()[0];
                let outcome = if step == 1 {
                    // The measured step: after the first optimizer step (its state exists),
                    // with the gradients cleared and the batch loaded, one step on a fresh
                    // allocator with the run's settings.
                    let (outcome, m) = measured_step(o, &mut stepper, &model, &x, &y)?;
                    f.measured = Some(m);
                    outcome
                } else {
                    stepper.step(&model, &x, &y, &mut || {})?
                };
                if outcome.parts > 1 {
                    f.split_steps += 1;
                }
                f.round_loss_sum += f64::from(outcome.loss.unwrap_or(0.0)) * b as f64;
                f.round_samples += b;
                step += 1;
                drop((x, y));
                if let Some(p) = profiler.as_mut() {
                    p.step();
                }
                progress.batch_done(
                    outcome.loss,
                    f.round_samples as f64 / elapsed(&f).max(1e-9),
                    memory::memory_allocated(o.device)?,
                    memory::max_memory_allocated(o.device)?,
                );
                for finding in leaks.step()?.into_iter().chain(graphs.step()) {
                    // The report lists each finding once, in full; reminders add nothing.
                    if !finding.reminder && !f.findings.contains(&finding.message) {
                        f.findings.push(finding.message);
                    }
                }
                // The round's last step is checkpointed after its evaluation, below.
                if let (Some(d), Some(n)) = (&durability, every) {
                    if step.is_multiple_of(n) && k + 1 < round_len {
                        let mut now = f.clone();
                        now.round_elapsed = elapsed(&f);
                        d.save(&model, &stepper, step, &now)?;
                    }
                }
            }
            let secs = elapsed(&f);
            let n = f.round_samples;
            f.samples += n;
            f.round_seconds.push(secs);
            let mean_loss = f.round_loss_sum / n.max(1) as f64;
            f.train_loss.push(mean_loss);
            let values = evaluate_on(model.module().as_ref(), &mut test_data)?;
            let end = RoundEnd {
                round,
                rounds: total_rounds,
                step,
                train_loss: mean_loss,
                values,
                secs,
                samples: n,
            };
            let line = round_line(o, &end)?;
            match (text.is_some(), values) {
                (true, values) => f.evaluations.push(
                    Evaluation {
                        step,
                        train_loss: (!meta).then_some(mean_loss),
                        val_loss: values.map(|(_, loss)| loss),
                    }
                    .into(),
                ),
                (false, Some((acc, loss))) => {
                    f.accuracy.push(acc);
                    f.test_loss = Some(loss);
                }
                (false, None) => {}
            }
            (f.round_loss_sum, f.round_samples, f.round_elapsed) = (0.0, 0, 0.0);
            progress.epoch_done(&line);
            round += 1;
            if let Some(d) = &durability {
                d.save(&model, &stepper, step, &f)?;
                crate::crash::point("epoch-end");
            }
        }
    }
    if let Some(path) = &o.save {
        model.module().state_dict().save(path)?;
    }
    if recording {
        let snap = memory::snapshot(o.device)?;
        memory::record_memory_history(false, RecordContext::All, 0, o.device)?;
        if let Some(path) = &o.snapshot {
            snap.save_pickle(path).map_err(|e| {
                TrainError::Options(format!(
                    "cannot write the snapshot to {}: {e}",
                    path.display()
                ))
            })?;
        }
        if let Some(path) = &o.html {
            let title = format!("strata train --model {}", o.model.name());
            crate::viz::write(&snap, &title, path, None, &Default::default())
                .map_err(TrainError::Options)?;
        }
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
    let m = f.measured.clone().unwrap_or_default();
    let stats = memory::memory_stats(o.device)?;
    let total: f64 = f.round_seconds.iter().sum();
    let classifier = text.is_none();
    Ok(Report {
        model: o.model.name().to_owned(),
        device: o.device.to_string(),
        test_accuracy: f.accuracy.last().copied(),
        test_loss: f.test_loss,
        test_accuracy_per_epoch: (!meta && classifier).then(|| f.accuracy.clone()),
        train_loss: (!meta).then(|| f.train_loss.clone()),
        val_loss: f
            .evaluations
            .last()
            .and_then(|e| Evaluation::from(*e).val_loss),
        evaluations: f.evaluations.iter().map(|e| Evaluation::from(*e)).collect(),
        epoch_seconds: f.round_seconds.clone(),
        data_wait_seconds: f.data_wait,
        samples_per_second: f.samples as f64 / total.max(1e-9),
        step_peak_allocated: m.allocated,
        step_peak_reserved: m.reserved,
        step_peak_requested: m.requested,
        categories_at_peak: m.categories,
        top_holders: m.holders,
        split_steps: f.split_steps,
        split_note: (f.split_steps > 0 && o.model == ModelKind::Cnn).then(|| {
            "split steps normalise each half with its own BatchNorm statistics, so they differ \
             slightly from a full-batch step"
                .to_owned()
        }),
        run_peak_allocated: stats.allocated_bytes.all.peak.max(0) as usize,
        run_peak_reserved: stats.reserved_bytes.all.peak.max(0) as usize,
        watch_findings: f.findings.clone(),
        resumed_from,
        checkpoint_notes,
        profile_table,
        world_size: None,
        ranks: None,
    })
}
