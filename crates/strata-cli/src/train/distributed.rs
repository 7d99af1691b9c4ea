//! `strata train --distributed`: data-parallel training of a classifier over the ranks
//! `mpirun` started. Each rank trains on its share of every epoch (a `DistributedSampler`),
//! with `--batch-size` samples per rank per step (PyTorch's convention); gradients are
//! averaged in buckets during backward (`DistributedDataParallel`, each gradient a view into
//! its bucket); with `--zero` the optimizer state is sharded over the ranks. Each rank
//! measures its own step; rank 0 gathers every rank's figures into the report. Checkpoints
//! are the one-process run's: rank 0 writes them, every rank resumes from them.
//!
//! `strata plan --nproc N` runs the same program on the meta device once per rank, with a
//! [`PlanningGroup`] in place of MPI: each rank's step and run peaks, buckets and shards
//! included, without a process started.

use std::sync::Arc;
use std::time::Instant;

use strata::core::autocast::autocast;
use strata::core::nn::functional::{cross_entropy, Reduction};
use strata::core::{memory, DType, Device, Tensor};
use strata::data::{DistributedSampler, Split, Subset};
use strata::nn::optim::{Optimizer, ParamGroup};
use strata::nn::Module;
#[cfg(feature = "mpi")]
use strata_dist::init_process_group;
use strata_dist::{
    DistributedDataParallel, PlanningGroup, ProcessGroup, ReduceOp, ZeroRedundancyOptimizer,
};

use super::data::{capped, dataset, Data, Sample};
use super::figures::Figures;
use super::measure::measure_on_fresh;
use super::report::{RankFigures, Report};
use super::resume::Durability;
use super::step::{loss_rows, optimizer_rule};
use super::{build_model, check, evaluate_on, Progress, Result, TrainError, TrainOptions};
use crate::crash;

/// The environment variable that sets each rank's compute threads.
#[cfg(feature = "mpi")]
const THREADS_VARIABLE: &str = "STRATA_NUM_THREADS";

/// The optimizer of a distributed run: whole on every rank, or sharded (`--zero`).
enum Stepper {
    Whole(Optimizer),
    Sharded(ZeroRedundancyOptimizer),
}

impl Stepper {
    fn step(&mut self) -> Result<()> {
        match self {
            Stepper::Whole(o) => o.step()?,
            Stepper::Sharded(z) => z.step()?,
        }
        Ok(())
    }

    fn zero_grad(&mut self) -> Result<()> {
        match self {
            Stepper::Whole(o) => o.zero_grad(true)?,
            Stepper::Sharded(z) => z.zero_grad(true)?,
        }
        Ok(())
    }

    /// Puts back a whole optimizer's state dict (each rank takes its share when sharded).
    fn restore(&mut self, optimizer: &strata::nn::state::StateDict) -> Result<()> {
        match self {
            Stepper::Whole(o) => o.load_state_dict(optimizer)?,
            Stepper::Sharded(z) => z.load_state_dict(optimizer)?,
        }
        Ok(())
    }

    /// The whole optimizer's state dict: on every rank when whole, gathered on rank 0 when
    /// sharded (every rank must call it then), `None` on the other ranks.
    fn whole_state(&self) -> Result<Option<strata::nn::state::StateDict>> {
        Ok(match self {
            Stepper::Whole(o) => Some(o.state_dict()),
            Stepper::Sharded(z) => z.consolidated_state_dict()?,
        })
    }

    fn state_bytes(&self) -> usize {
        match self {
            Stepper::Whole(o) => o.state_bytes(),
            Stepper::Sharded(z) => z.state_bytes(),
        }
    }
}

/// Writes the checkpoint after `step` steps: every rank takes part in gathering a sharded
/// optimizer's state, rank 0 writes (every rank holds the same model, and the ranks of one
/// job share the checkpoint folder: one machine, or a shared file system).
fn save_checkpoint(
    d: &Durability,
    model: &super::models::Model,
    stepper: &Stepper,
    rank: usize,
    step: usize,
    figures: &Figures,
) -> Result<()> {
    let optimizer = stepper.whole_state()?;
    if let (0, Some(optimizer)) = (rank, optimizer) {
        d.save_state(model, optimizer, None, step, figures)?;
    }
    Ok(())
}

/// What a distributed run refuses before it starts, each with the way out.
fn refusals(o: &TrainOptions) -> Option<String> {
    let unsupported = [
        (
            o.model.is_language_model(),
            "the gpt (train the mlp, cnn or lstm)",
        ),
        (
            o.device != Device::Cpu,
            "a device other than the CPU (MPI moves CPU tensors)",
        ),
        (
            o.amp == Some(DType::F16),
            "--amp f16 (its loss scaler; use --amp bf16)",
        ),
        (o.optimizer_in_backward, "--optimizer-in-backward"),
        (
            o.checkpoint_activations.is_some(),
            "--checkpoint-activations",
        ),
        (o.on_oom != super::OnOom::Fail, "--on-oom split"),
        (
            o.snapshot.is_some() || o.html.is_some(),
            "--snapshot and --html",
        ),
        (
            o.profile.table || o.profile.trace.is_some(),
            "--profile and --trace",
        ),
        (o.load.is_some() || o.save.is_some(), "--load and --save"),
    ];
    let refused: Vec<&str> = unsupported
        .iter()
        .filter(|(on, _)| *on)
        .map(|(_, what)| *what)
        .collect();
    (!refused.is_empty()).then(|| {
        format!(
            "--distributed does not take {} yet; run without them, or train in one process",
            refused.join(", ")
        )
    })
}

/// Each rank's compute threads: `STRATA_NUM_THREADS` when set, else the machine's cores
/// divided among the ranks on it, at least one. Set before any kernel runs, so the pool is
/// made with it.
#[cfg(feature = "mpi")]
fn share_cores() -> usize {
    if let Some(n) = std::env::var(THREADS_VARIABLE)
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
    {
        return n;
    }
    let ranks_here = std::env::var("OMPI_COMM_WORLD_LOCAL_SIZE")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or(1);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads = (cores / ranks_here).max(1);
    std::env::set_var(THREADS_VARIABLE, threads.to_string());
    threads
}

/// One step on this rank's batch: forward through the wrapper, the loss, backward (which
/// averages the gradients over the ranks), the optimizer step, the gradients dropped.
fn step(
    ddp: &DistributedDataParallel,
    stepper: &mut Stepper,
    amp: Option<DType>,
    x: &Tensor,
    y: &Tensor,
    after_forward: &mut dyn FnMut(),
) -> Result<Option<f32>> {
    let loss = {
        let _region = amp.map(autocast).transpose()?;
        let logits = ddp.call(x)?;
        after_forward();
        let (logits, y) = loss_rows(&logits, y)?;
        cross_entropy(&logits, &y, Reduction::Mean)?
    };
    loss.backward()?;
    crash::point("after-backward");
    stepper.step()?;
    crash::point("after-step");
    stepper.zero_grad()?;
    if loss.device() == Device::Meta {
        return Ok(None);
    }
    Ok(Some(loss.item::<f32>()?))
}

/// Test accuracy and mean loss over the whole test set of `len` images: each rank evaluates
/// every world-th image from its rank on, and the sums are added over the ranks. A plan
/// (`test` is `None`) runs the same batches on meta.
fn evaluate(
    group: &dyn ProcessGroup,
    model: &dyn Module,
    len: usize,
    test: Option<&Arc<dyn strata::data::Dataset>>,
    o: &TrainOptions,
) -> Result<(f64, f64)> {
    let (rank, world) = (group.rank(), group.world_size());
    let mine: Vec<usize> = (rank..len).step_by(world).collect();
    let n = mine.len();
    let mut data = match test {
        Some(test) => Data::from_dataset(Arc::new(Subset::new(test.clone(), mine)?), o, false)?,
        None => Data::meta(o, n, Sample::Image),
    };
    let (acc, loss) = evaluate_on(model, &mut data)?.unwrap_or((0.0, 0.0));
    let sums = Tensor::from_vec(vec![acc * n as f64, loss * n as f64, n as f64], &[3])?;
    group.all_reduce(&sums, ReduceOp::Sum)?;
    let s = sums.to_vec::<f64>()?;
    let total = s[2].max(1.0);
    Ok((s[0] / total, s[1] / total))
}

/// Trains as `o` says on every rank of the job (`zero`: optimizer state sharded), telling
/// `progress` as it goes (`progress_on` makes it for this rank). Every rank returns its rank
/// and the same report, with every rank's figures.
///
/// A rank that fails after the job has started prints why and ends every rank of the job
/// (the others would otherwise wait for it in their next collective); the error is returned
/// only for failures before that.
#[cfg(feature = "mpi")]
pub fn train_distributed(
    o: &TrainOptions,
    zero: bool,
    progress_on: &mut dyn FnMut(usize) -> Box<dyn Progress>,
) -> Result<(usize, Report)> {
    check_distributed(o)?;
    let threads = share_cores();
    let group = init_process_group()?;
    let rank = group.rank();
    let shared: Arc<dyn ProcessGroup> = group.clone();
    match run(o, zero, threads, shared, progress_on(rank).as_mut()) {
        Ok(report) => Ok((rank, report)),
        Err(e) => {
            eprintln!("strata train: rank {rank}: {e}; ending every rank of the job");
            group.abort(1)
        }
    }
}

/// Plans each rank of a distributed run of `o` on `nproc` ranks (`zero`: optimizer state
/// sharded): the run on the meta device once per rank, with a planning group for that rank.
/// Returns the figures `strata train --distributed` measures for each rank (no
/// communication times: nothing is sent).
pub fn plan_distributed(o: &TrainOptions, zero: bool, nproc: usize) -> Result<Vec<RankFigures>> {
    let planned = TrainOptions {
        device: Device::Meta,
        ..o.clone()
    };
    check_distributed(&TrainOptions {
        device: Device::Cpu,
        ..planned.clone()
    })?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut ranks = Vec::with_capacity(nproc);
    for rank in 0..nproc {
        let group = Arc::new(PlanningGroup::new(rank, nproc)?);
        memory::empty_cache(Device::Meta)?;
        let report = run(
            &planned,
            zero,
            (cores / nproc).max(1),
            group,
            &mut |_: &str| {},
        )?;
        ranks.extend(report.ranks.into_iter().flatten());
    }
    Ok(ranks)
}

/// Checks what a distributed run cannot do before any rank starts.
pub fn check_distributed(o: &TrainOptions) -> Result<()> {
    check(o)?;
    match refusals(o) {
        Some(why) => Err(TrainError::Options(why)),
        None => Ok(()),
    }
}

/// The run on this rank.
fn run(
    o: &TrainOptions,
    zero: bool,
    threads: usize,
    group: Arc<dyn ProcessGroup>,
    progress: &mut dyn Progress,
) -> Result<Report> {
    let (rank, world) = (group.rank(), group.world_size());
    strata::core::manual_seed(o.seed);
    memory::set_memory_limit(o.memory_limit, o.device)?;
    memory::reset_peak_memory_stats(o.device)?;

    let meta = o.device == Device::Meta;
    let (train_set, test_set) = if meta {
        (None, None)
    } else {
        (
            Some(dataset(o, Split::Train, o.train_samples)?),
            Some(dataset(o, Split::Test, o.test_samples)?),
        )
    };
    let train_len = train_set
        .as_ref()
        .map_or(capped(o.train_samples, super::TRAIN_IMAGES), |t| t.len());
    let test_len = test_set
        .as_ref()
        .map_or(capped(o.test_samples, super::TEST_IMAGES), |t| t.len());
    let sampler = DistributedSampler::new(train_len, world, rank, true, o.seed, false)?;
    let mut train_data = match &train_set {
        Some(train) => Data::with_sampler(train.clone(), Arc::new(sampler), o)?,
        None => Data::meta(o, strata::data::Sampler::len(&sampler), Sample::Image),
    };

    let model = {
        let _on = strata::core::device::DefaultDevice::set(o.device);
        build_model(o, None)?
    };
    let ddp = DistributedDataParallel::new(model.module().clone(), group.clone())?;
    let rule = optimizer_rule(o, false);
    let mut stepper = if zero {
        Stepper::Sharded(ZeroRedundancyOptimizer::new(
            ddp.parameters(),
            group.clone(),
            |p| Optimizer::with_groups(vec![ParamGroup::new(p)], rule),
        )?)
    } else {
        Stepper::Whole(Optimizer::with_groups(
            vec![ParamGroup::new(ddp.parameters())],
            rule,
        )?)
    };

    let durability = match (&train_set, &test_set) {
        (Some(train), Some(test)) => Durability::for_datasets(o, train.as_ref(), test.as_ref())?
            .map(|d| {
                d.require("--nproc", world.to_string())
                    .require("--zero", zero.to_string())
            }),
        _ => None,
    };
    let mut checkpoint_notes = Vec::new();
    let resumed = match &durability {
        Some(d) => match d.resume_model(o, &model, &mut checkpoint_notes)? {
            Some((resumed, c)) => {
                stepper.restore(&c.optimizer)?;
                Some(resumed)
            }
            None => None,
        },
        None => None,
    };
    let per_epoch = train_data.len();
    let start_step = resumed.as_ref().map_or(0, |r| r.step);
    if start_step > per_epoch * o.epochs {
        return Err(TrainError::Options(format!(
            "the checkpoint is at step {start_step}, past this run's {} steps: raise --epochs \
             to train on from it",
            per_epoch * o.epochs
        )));
    }
    let resumed_from = resumed.as_ref().map(|r| r.from.display().to_string());
    let mut f = resumed.map(|r| r.figures).unwrap_or_default();
    let every = durability.as_ref().and_then(Durability::every);
    let mut step_no = 0usize;
    let mut comm_before = ddp.communication();
    for epoch in 0..o.epochs {
        if step_no + per_epoch <= start_step {
            // Trained before the checkpoint.
            step_no += per_epoch;
            continue;
        }
        train_data.set_epoch(epoch as u64);
        // Steps of this epoch taken before the checkpoint, whose figures it carries.
        let done = start_step.saturating_sub(step_no);
        if done == 0 {
            (f.round_loss_sum, f.round_samples, f.round_elapsed) = (0.0, 0, 0.0);
        }
        step_no += done;
        ddp.train();
        progress.epoch_started(epoch + 1, o.epochs, per_epoch);
        let start = Instant::now();
        let elapsed = |f: &Figures| f.round_elapsed + start.elapsed().as_secs_f64();
        let mut batches = train_data.epoch_from(done)?;
        for k in done..per_epoch {
            let waited = Instant::now();
            let Some(batch) = batches.next() else { break };
            f.data_wait += waited.elapsed().as_secs_f64();
            let (x, y) = batch?;
            let b = x.shape()[0];
            let loss = if step_no == 1 {
                comm_before = ddp.communication();
                let (loss, m) = measure_on_fresh(o.device, |after| {
                    step(&ddp, &mut stepper, o.amp, &x, &y, after)
                })?;
                f.measured = Some(m);
                loss
            } else {
                step(&ddp, &mut stepper, o.amp, &x, &y, &mut || {})?
            };
            step_no += 1;
            f.round_loss_sum += f64::from(loss.unwrap_or(0.0)) * b as f64;
            f.round_samples += b;
            progress.batch_done(
                loss,
                f.round_samples as f64 / elapsed(&f).max(1e-9),
                memory::memory_allocated(o.device)?,
                memory::max_memory_allocated(o.device)?,
            );
            // The epoch's last step is checkpointed after its evaluation, below.
            if let (Some(d), Some(n)) = (&durability, every) {
                if step_no.is_multiple_of(n) && k + 1 < per_epoch {
                    let mut now = f.clone();
                    now.round_elapsed = elapsed(&f);
                    save_checkpoint(d, &model, &stepper, rank, step_no, &now)?;
                }
            }
        }
        drop(batches);
        let secs = elapsed(&f);
        let n = f.round_samples;
        f.samples += n;
        f.round_seconds.push(secs);
        let mean = f.round_loss_sum / n.max(1) as f64;
        f.train_loss.push(mean);
        let (acc, loss) = evaluate(
            group.as_ref(),
            model.module().as_ref(),
            test_len,
            test_set.as_ref(),
            o,
        )?;
        if !meta {
            f.accuracy.push(acc);
            f.test_loss = Some(loss);
        }
        (f.round_loss_sum, f.round_samples, f.round_elapsed) = (0.0, 0, 0.0);
        progress.epoch_done(&format!(
            "epoch {}/{}: train loss {mean:.4} (rank {rank}), test accuracy {:.2}%, {secs:.1} s",
            epoch + 1,
            o.epochs,
            100.0 * acc
        ));
        if let Some(d) = &durability {
            save_checkpoint(d, &model, &stepper, rank, step_no, &f)?;
            crash::point("epoch-end");
        }
    }

    let m = f.measured.clone().unwrap_or_default();
    let stats = memory::memory_stats(o.device)?;
    let comm = ddp.communication().since(&comm_before);
    let param_bytes: usize = ddp.parameters().iter().map(Tensor::nbytes).sum();
    let mine = [
        threads as f64,
        m.allocated as f64,
        m.reserved as f64,
        stats.allocated_bytes.all.peak.max(0) as f64,
        (param_bytes + ddp.bucket_bytes() + stepper.state_bytes()) as f64,
        comm.allreduce_seconds / comm.backwards.max(1) as f64,
        comm.hidden_share(),
    ];
    let figures = |r: usize, v: &[f64]| RankFigures {
        rank: r,
        threads: v[0] as usize,
        step_peak_allocated: v[1] as usize,
        step_peak_reserved: v[2] as usize,
        run_peak_allocated: v[3] as usize,
        persistent_bytes: v[4] as usize,
        allreduce_seconds_per_step: (!meta).then_some(v[5]),
        allreduce_hidden_share: (!meta).then_some(v[6]),
    };
    let ranks = if meta {
        // A plan runs one rank at a time: this one's figures only.
        vec![figures(rank, &mine)]
    } else {
        let everyone = Tensor::zeros(&[world * mine.len()], DType::F64)?;
        let own = Tensor::from_vec(mine.to_vec(), &[mine.len()])?;
        group.all_gather_into_tensor(&everyone, &own)?;
        let all = everyone.to_vec::<f64>()?;
        all.chunks(mine.len())
            .enumerate()
            .map(|(r, v)| figures(r, v))
            .collect()
    };
    let total: f64 = f.round_seconds.iter().sum();
    let report = Report {
        model: o.model.name().to_owned(),
        device: o.device.to_string(),
        test_accuracy: f.accuracy.last().copied(),
        test_loss: f.test_loss,
        test_accuracy_per_epoch: (!meta).then(|| f.accuracy.clone()),
        train_loss: (!meta).then(|| f.train_loss.clone()),
        val_loss: None,
        evaluations: Vec::new(),
        epoch_seconds: f.round_seconds.clone(),
        data_wait_seconds: f.data_wait,
        samples_per_second: (f.samples * world) as f64 / total.max(1e-9),
        step_peak_allocated: m.allocated,
        step_peak_reserved: m.reserved,
        step_peak_requested: m.requested,
        categories_at_peak: m.categories,
        top_holders: m.holders,
        split_steps: 0,
        split_note: None,
        run_peak_allocated: stats.allocated_bytes.all.peak.max(0) as usize,
        run_peak_reserved: stats.reserved_bytes.all.peak.max(0) as usize,
        watch_findings: Vec::new(),
        resumed_from,
        checkpoint_notes,
        profile_table: None,
        world_size: Some(world),
        ranks: Some(ranks),
    };
    Ok(report)
}
