//! `strata plan`: the step `strata train` measures, planned on the meta device before any
//! data is read; and `--fit`: the largest batch size whose whole run (model and optimizer,
//! the loader's prefetched batches, two epochs with the partial last batch, evaluation)
//! holds under a memory limit, found by simulating runs on meta.

use serde::Serialize;
use strata::core::{memory, DType, Device, Error};
use strata::profile::plan::{plan_step, InputSpec, LiveGroup, PlanOptions, PlanReport};

use super::models::Model;
use super::step::{OnOom, Stepper};
use super::text::BLOCK;
use super::{build_model, train, Result, TrainError, TrainOptions};

/// The inputs of one batch of `b` samples: `[b, 1, 28, 28]` floats and `b` labels, or the
/// gpt's `[b, 64]` tokens and their next tokens.
fn batch_inputs(b: usize, language: bool) -> [InputSpec; 2] {
    if language {
        return [
            InputSpec::new(&[b, BLOCK], DType::I64),
            InputSpec::new(&[b, BLOCK], DType::I64),
        ];
    }
    [
        InputSpec::new(&[b, 1, 28, 28], DType::F32),
        InputSpec::new(&[b], DType::I64),
    ]
}

/// Plans the step that `train(o)` measures (the second step, on a fresh allocator), with
/// the same model, checkpointing, autocast, optimizer and out-of-memory policy. With
/// `o.memory_limit`, the report says whether the run fits under it, and by how much.
pub fn plan(o: &TrainOptions) -> Result<PlanReport> {
    super::check(o)?;
    let options = PlanOptions {
        capacity: o.memory_limit,
        ..PlanOptions::default()
    };
    let text = o.text()?;
    plan_step(
        &batch_inputs(o.batch_size, text.is_some()),
        &options,
        || -> Result<(Model, Stepper)> {
            let model = build_model(o, text.as_ref())?;
            let stepper = Stepper::new(&model, o)?;
            Ok((model, stepper))
        },
        |(model, stepper), batch| {
            stepper.step(model, &batch[0], &batch[1], &mut || {})?;
            Ok(())
        },
    )
}

/// A plan as `--report-json` writes it.
#[derive(Debug, Clone, Serialize)]
pub struct PlanJson {
    /// The model planned.
    pub model: String,
    /// The batch size planned.
    pub batch_size: usize,
    /// Predicted `step_peak_allocated` of `strata train --report-json`.
    pub predicted_peak_allocated: usize,
    /// Predicted `step_peak_reserved`.
    pub predicted_peak_reserved: usize,
    /// Predicted `step_peak_requested`.
    pub predicted_peak_requested: usize,
    /// Bytes the model, optimizer and batch hold through the step.
    pub held_allocated: usize,
    /// Bytes by category at the step's peak (with what is held).
    pub categories_at_peak: std::collections::BTreeMap<String, usize>,
    /// Sites live at the peak: `(site, requested bytes, blocks)`.
    pub sites_at_peak: Vec<(String, usize, usize)>,
    /// Scopes live at the peak: `(scope, requested bytes, blocks)`.
    pub scopes_at_peak: Vec<(String, usize, usize)>,
    /// `--fit`'s answer, when asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fit: Option<Fit>,
    /// Whether the step fits `--memory-limit`, when one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<LimitJson>,
}

/// Whether a planned step fits the memory limit, as `--report-json` writes it.
#[derive(Debug, Clone, Serialize)]
pub struct LimitJson {
    /// The limit.
    pub limit: usize,
    /// Whether the reserved bytes the run needs fit under it.
    pub fits: bool,
    /// Bytes allocated at the run's highest point (held plus the step's peak).
    pub needs_allocated: usize,
    /// Bytes reserved at the run's highest point.
    pub needs_reserved: usize,
}

fn rows(groups: &[LiveGroup]) -> Vec<(String, usize, usize)> {
    groups
        .iter()
        .map(|g| (g.key.clone(), g.requested_bytes, g.count))
        .collect()
}

impl PlanJson {
    /// The JSON form of `report` for `o`.
    pub fn new(o: &TrainOptions, report: &PlanReport, fit: Option<Fit>) -> Self {
        PlanJson {
            model: o.model.name().to_owned(),
            batch_size: o.batch_size,
            predicted_peak_allocated: report.peak_allocated,
            predicted_peak_reserved: report.peak_reserved,
            predicted_peak_requested: report.peak_requested,
            held_allocated: report.held_allocated,
            categories_at_peak: report.categories_at_peak.clone(),
            sites_at_peak: rows(&report.sites_at_peak),
            scopes_at_peak: rows(&report.scopes_at_peak),
            fit,
            limit: report.limit.map(|c| LimitJson {
                limit: c.limit,
                fits: c.fits(),
                needs_allocated: c.needs_allocated,
                needs_reserved: c.needs_reserved,
            }),
        }
    }
}

/// What `--fit` found.
#[derive(Debug, Clone, Serialize)]
pub struct Fit {
    /// The memory limit.
    pub memory_limit: usize,
    /// The largest batch size whose simulated run holds.
    pub batch_size: usize,
    /// That run's peak allocated bytes (the whole run, on meta).
    pub run_peak_allocated: usize,
    /// That run's peak reserved bytes.
    pub run_peak_reserved: usize,
    /// Every batch size tried, and whether its run held.
    pub trials: Vec<(usize, bool)>,
}

/// Whether a run of `o` at batch size `b` holds on meta under `limit`: `Some` with its
/// report when it does, `None` when it runs out of memory.
fn simulate(o: &TrainOptions, b: usize, limit: usize) -> Result<Option<super::Report>> {
    // The classifiers' run: two epochs; the gpt's: two steps, then its evaluation.
    let trial = TrainOptions {
        device: Device::Meta,
        batch_size: b,
        epochs: 2,
        steps: o.model.is_language_model().then_some(2),
        eval_every: 2,
        memory_limit: Some(limit),
        on_oom: OnOom::Fail,
        save: None,
        load: None,
        snapshot: None,
        profile: Default::default(),
        ..o.clone()
    };
    memory::empty_cache(Device::Meta)?;
    let outcome = train(&trial, &mut |_: &str| {});
    memory::set_memory_limit(None, Device::Meta)?;
    match outcome {
        Ok(r) => Ok(Some(r)),
        Err(TrainError::Core(Error::OutOfMemory { .. })) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The largest batch of windows `--fit` tries for a language model, whose random windows
/// have no natural end.
const LANGUAGE_FIT_BOUND: usize = 1 << 16;

/// The largest batch size (up to the training set's size; for the gpt, 65,536 windows of its
/// two steps and evaluation) for which a simulated run of `o`
/// holds under `limit`: creation of the model and optimizer, the loader's bound of batches
/// made ahead, two full epochs and evaluation at that batch size, all on one meta
/// allocator capped at `limit`. Searches by doubling from 64, then bisecting.
pub fn fit(o: &TrainOptions, limit: usize) -> Result<Fit> {
    let images = if o.model.is_language_model() {
        LANGUAGE_FIT_BOUND
    } else {
        o.train_samples
            .map_or(super::TRAIN_IMAGES, |n| n.min(super::TRAIN_IMAGES))
            .max(1)
    };
    let mut trials = Vec::new();
    let mut best: Option<(usize, super::Report)> = None;
    let mut try_size = |b: usize, best: &mut Option<(usize, super::Report)>| -> Result<bool> {
        let r = simulate(o, b, limit)?;
        trials.push((b, r.is_some()));
        let held = r.is_some();
        if let Some(r) = r {
            if best.as_ref().is_none_or(|(k, _)| b > *k) {
                *best = Some((b, r));
            }
        }
        Ok(held)
    };
    // Bracket: `lo` holds (or is 0), `hi` does not (or is past the training set).
    let (mut lo, mut hi) = (0usize, images + 1);
    let mut b = 64.min(images);
    loop {
        if try_size(b, &mut best)? {
            lo = b;
            if b == images || b * 2 >= hi {
                break;
            }
            b = (b * 2).min(images);
        } else {
            hi = b;
            if b == 1 {
                break;
            }
            if lo > 0 {
                break;
            }
            b = (b / 2).max(1);
        }
        if lo + 1 >= hi {
            break;
        }
    }
    while lo + 1 < hi {
        let mid = lo + (hi - lo) / 2;
        if try_size(mid, &mut best)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    match best {
        Some((batch_size, r)) => Ok(Fit {
            memory_limit: limit,
            batch_size,
            run_peak_allocated: r.run_peak_allocated,
            run_peak_reserved: r.run_peak_reserved,
            trials,
        }),
        None => Err(TrainError::Options(format!(
            "not even a batch of 1 fits in {}: the model and its optimizer need more; raise \
             --memory-limit",
            strata::alloc::caching::format_size(limit)
        ))),
    }
}
