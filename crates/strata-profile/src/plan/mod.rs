//! Memory planning: a training step's peak before running it. The step runs on the meta
//! device, where every op allocates exactly what it would on the CPU and computes nothing,
//! over allocators of its own: a dedicated one for the model, the optimizer and the batch
//! (configured like the target: its capacity, `STRATA_ALLOC_CONF`), and a fresh one for the
//! planned step alone, as `strata train` measures a step. The figures are the allocator's
//! own, so they are exact, not estimated.
//!
//! - [`plan_step`]: the engine, for any step: `setup` builds the state on meta, `step` runs
//!   one step on a batch.
//! - [`plan`]: for a model and an optimizer: builds a meta replica of both (same structure,
//!   names and options; the real ones are not touched) and plans forward, loss, backward
//!   and the optimizer step.

mod history;
mod model;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use strata_alloc::offline::{replay_with, ReplayOptions};
use strata_alloc::{
    AllocatorConfig, Category, DeviceAllocator, RecordContext, VirtualBacking,
    VirtualCachingAllocator,
};
use strata_core::device::DefaultDevice;
use strata_core::routing::META_CAPACITY;
use strata_core::{with_device_allocator, DType, Device, Error, Tensor};

pub use history::{LiveGroup, TimelinePoint};
pub use model::{plan, StepOptions};

/// One input of the planned step: a batch tensor's shape and dtype.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputSpec {
    /// The shape, batch dimension first.
    pub shape: Vec<usize>,
    /// The dtype.
    pub dtype: DType,
}

impl InputSpec {
    /// An input of `shape` and `dtype`.
    pub fn new(shape: &[usize], dtype: DType) -> Self {
        InputSpec {
            shape: shape.to_vec(),
            dtype,
        }
    }
}

/// How the planning allocators are configured.
#[derive(Debug, Clone, Default)]
pub struct PlanOptions {
    /// The device's capacity to check the plan against (`None`: no check). The plan itself
    /// runs unbounded, so a step that does not fit is still planned in full, and the report
    /// says by how much it misses ([`PlanReport::limit`]). The check runs one more step.
    pub capacity: Option<usize>,
    /// Allocator settings in `STRATA_ALLOC_CONF`'s syntax (`None`: that variable's).
    pub alloc_conf: Option<String>,
    /// Steps run before the planned one (default 1 when 0 is given: the optimizer's state
    /// exists after the first).
    pub warmup_steps: usize,
}

/// What a planned step takes.
#[derive(Debug, Clone, PartialEq)]
pub struct PlanReport {
    /// Peak bytes of blocks handed out during the step (`allocated_bytes.all.peak` of its
    /// own allocator).
    pub peak_allocated: usize,
    /// Peak bytes the step's allocator reserved.
    pub peak_reserved: usize,
    /// Peak of the bytes the step's ops asked for (unrounded).
    pub peak_requested: usize,
    /// Bytes the model, the optimizer and the batch hold through the step (allocated on
    /// the dedicated allocator).
    pub held_allocated: usize,
    /// Bytes by category at the moment of the step's peak: its blocks as marked then, plus
    /// what the dedicated allocator held.
    pub categories_at_peak: BTreeMap<String, usize>,
    /// The step's allocations and frees in order, with the live requested bytes after each.
    pub timeline: Vec<TimelinePoint>,
    /// Live blocks at the requested peak, by allocation site, largest first.
    pub sites_at_peak: Vec<LiveGroup>,
    /// Live blocks at the requested peak, by scope path, largest first.
    pub scopes_at_peak: Vec<LiveGroup>,
    /// The answer to "does it fit?", when a capacity was given.
    pub limit: Option<LimitCheck>,
    /// Wall time of `setup` (building the replicas).
    pub setup_time: Duration,
    /// Wall time of the planning itself: the warm-up and planned steps on meta and reading
    /// the history back.
    pub plan_time: Duration,
}

/// Whether a planned step fits a device of a given capacity, and what it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitCheck {
    /// The capacity checked against.
    pub limit: usize,
    /// Peak bytes allocated by the setup and the first steps (the warm-up, the planned step
    /// and one more) on one allocator, as they would run under the limit.
    pub needs_allocated: usize,
    /// Peak bytes reserved, counted the same way, without a limit.
    pub needs_reserved: usize,
    /// The smallest limit the same allocations hold under (found by replaying them): below
    /// `needs_reserved`, since under a limit the allocator frees its cache before failing.
    /// `None` when the replay could not run; then `needs_reserved` is the measure.
    pub smallest_limit: Option<usize>,
}

impl LimitCheck {
    /// The least limit the run holds under.
    pub fn needed(&self) -> usize {
        self.smallest_limit.unwrap_or(self.needs_reserved)
    }

    /// Whether the run holds under the limit.
    pub fn fits(&self) -> bool {
        self.needed() <= self.limit
    }

    /// One line: "fits: ..." or "does not fit: ...", with the numbers.
    pub fn verdict(&self) -> String {
        let size = strata_alloc::caching::format_size;
        let needs = format!(
            "the step needs {} allocated and {} reserved without a limit, and holds under a \
             limit of {} or more",
            size(self.needs_allocated),
            size(self.needs_reserved),
            size(self.needed())
        );
        if self.fits() {
            format!(
                "fits: {needs}; the limit is {} ({} spare)",
                size(self.limit),
                size(self.limit - self.needed())
            )
        } else {
            format!(
                "does not fit: {needs}; the limit is {} ({} short)",
                size(self.limit),
                size(self.needed() - self.limit)
            )
        }
    }
}

/// The smallest device the recorded run holds in: its trace replayed under capacities
/// between what it allocated and what it reserved without a limit (under a limit, the
/// allocator frees its cached segments and retries before failing, so it can hold in
/// less than it reserved). `None` when the trace cannot be replayed.
fn smallest_limit(snapshot: &strata_alloc::Snapshot, low: usize, high: usize) -> Option<usize> {
    let settings = snapshot.allocator_settings.conf.clone();
    let holds = |capacity: usize| -> Option<bool> {
        let options = ReplayOptions {
            capacity: Some(capacity as u64),
            ..ReplayOptions::new(0, &settings)
        };
        replay_with(snapshot, &options)
            .ok()
            .map(|r| r.what_if.ooms.is_empty())
    };
    if !holds(high)? {
        return None;
    }
    // Bisect on 512-byte steps: `lo` fails (or is below what is allocated), `hi` holds.
    let (mut lo, mut hi) = (low.saturating_sub(1) / 512, high.div_ceil(512));
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if holds(mid * 512)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some((hi * 512).min(high))
}

fn config(options: &PlanOptions) -> strata_core::Result<AllocatorConfig> {
    let parsed = match &options.alloc_conf {
        Some(text) => AllocatorConfig::parse(text),
        None => AllocatorConfig::from_env(),
    };
    parsed.map_err(|e| {
        Error::argument(
            "plan",
            format!("allocator settings: {e}"),
            Some("fix the settings (for example `expandable_segments:True`)"),
        )
    })
}

fn meta_allocator(capacity: usize, config: AllocatorConfig) -> Arc<VirtualCachingAllocator> {
    Arc::new(VirtualCachingAllocator::with_config(
        VirtualBacking::new(capacity).named("meta"),
        config,
    ))
}

/// Plans one step: `setup` builds the state (a model, an optimizer) with meta as the
/// default device and a dedicated meta allocator; the inputs are made there; `step` runs
/// `warmup_steps` times, then once more on a fresh allocator whose figures are the plan.
/// Nothing touches the CPU's memory or the global random generator.
pub fn plan_step<S, E>(
    inputs: &[InputSpec],
    options: &PlanOptions,
    setup: impl FnOnce() -> std::result::Result<S, E>,
    mut step: impl FnMut(&mut S, &[Tensor]) -> std::result::Result<(), E>,
) -> std::result::Result<PlanReport, E>
where
    E: From<Error>,
{
    let config = config(options)?;
    let dedicated = meta_allocator(META_CAPACITY, config.clone());
    if options.capacity.is_some() {
        // Its history is replayed under limits to find the smallest one the run holds in.
        dedicated.record_memory_history(true, RecordContext::State, usize::MAX);
    }
    let routed: Arc<dyn DeviceAllocator> = dedicated.clone();
    with_device_allocator(Device::Meta, &routed, || {
        let _meta = DefaultDevice::set(Device::Meta);
        let started = Instant::now();
        let mut state = setup()?;
        let setup_time = started.elapsed();
        let started = Instant::now();
        let batch = inputs
            .iter()
            .map(|i| {
                let t = Tensor::on(Device::Meta).zeros(&i.shape, i.dtype)?;
                t.mark_category(Category::Input);
                Ok(t)
            })
            .collect::<std::result::Result<Vec<_>, E>>()?;
        for _ in 0..options.warmup_steps.max(1) {
            step(&mut state, &batch)?;
        }
        let held = dedicated.memory_stats();
        let fresh = meta_allocator(META_CAPACITY, config);
        fresh.record_memory_history(true, RecordContext::All, usize::MAX);
        let routed: Arc<dyn DeviceAllocator> = fresh.clone();
        with_device_allocator(Device::Meta, &routed, || step(&mut state, &batch))?;
        let stats = fresh.memory_stats();
        let categories_at_peak = stats.categories_at_peak_with(&held);
        let walk = history::walk(&fresh.history());
        // Against a limit: one more step on the dedicated allocator, so that its peaks are
        // those of the setup and the first steps on one allocator, as under a real limit.
        let limit = match options.capacity {
            Some(limit) => {
                step(&mut state, &batch)?;
                let run = dedicated.memory_stats();
                let needs_allocated = run.allocated_bytes.all.peak.max(0) as usize;
                let needs_reserved = run.reserved_bytes.all.peak.max(0) as usize;
                let smallest_limit =
                    smallest_limit(&dedicated.snapshot(), needs_allocated, needs_reserved);
                Some(LimitCheck {
                    limit,
                    needs_allocated,
                    needs_reserved,
                    smallest_limit,
                })
            }
            None => None,
        };
        Ok(PlanReport {
            peak_allocated: stats.allocated_bytes.all.peak.max(0) as usize,
            peak_reserved: stats.reserved_bytes.all.peak.max(0) as usize,
            peak_requested: stats.requested_bytes.all.peak.max(0) as usize,
            held_allocated: held.allocated_bytes.all.current.max(0) as usize,
            categories_at_peak,
            timeline: walk.timeline,
            sites_at_peak: walk.sites_at_peak,
            scopes_at_peak: walk.scopes_at_peak,
            limit,
            setup_time,
            plan_time: started.elapsed(),
        })
    })
}

impl PlanReport {
    /// The report as a table for a terminal.
    pub fn text(&self) -> String {
        use std::fmt::Write;
        let size = strata_alloc::caching::format_size;
        let mut out = String::new();
        if let Some(check) = &self.limit {
            let _ = writeln!(out, "{}", check.verdict());
        }
        let _ = writeln!(
            out,
            "planned step: peak allocated {}, reserved {}, requested {}",
            size(self.peak_allocated),
            size(self.peak_reserved),
            size(self.peak_requested)
        );
        let _ = writeln!(
            out,
            "held through the step (model, optimizer, batch): {}",
            size(self.held_allocated)
        );
        let _ = writeln!(out, "by category at the peak:");
        for (name, bytes) in &self.categories_at_peak {
            let _ = writeln!(out, "  {name:<16} {:>12}", size(*bytes));
        }
        for (title, groups) in [
            ("sites", &self.sites_at_peak),
            ("scopes", &self.scopes_at_peak),
        ] {
            let _ = writeln!(out, "{title} live at the peak (requested bytes):");
            for g in groups.iter().take(8) {
                let key = if g.key.is_empty() {
                    "(no scope)"
                } else {
                    &g.key
                };
                let _ = writeln!(
                    out,
                    "  {:>12} in {:>3} blocks  {key}",
                    size(g.requested_bytes),
                    g.count
                );
            }
        }
        let _ = writeln!(
            out,
            "timeline: {} allocations and frees; planned in {:.2} ms (replicas built in {:.2} ms)",
            self.timeline.len(),
            self.plan_time.as_secs_f64() * 1e3,
            self.setup_time.as_secs_f64() * 1e3
        );
        out
    }
}

#[cfg(test)]
mod tests;
