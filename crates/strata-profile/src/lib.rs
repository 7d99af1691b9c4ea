//! strata's memory diagnostics. Everything here reads what the layers below publish:
//! allocation events with their site, scope and category, op events with operand shapes,
//! the live autograd graph by creating site, and the allocator's statistics and snapshots.
//!
//! - [`profile`] / [`Profiler`]: every op with CPU time, operand shapes, the memory its thread
//!   allocated and freed, and its peak; user ranges ([`record_function`]); a [`Schedule`] over
//!   a loop's steps; PyTorch's `key_averages()` table; Chrome traces with memory counters.
//! - [`MemoryTracker`]: labelled phases with start, end and peak, per category.
//!   [`MemoryMonitor`]: memory sampled on a background thread.
//! - [`LeakWatch`]: the sites and scopes whose live bytes grow every step.
//! - [`GraphWatch`]: autograd graphs kept alive from step to step (losses kept with their
//!   graphs, state carried without `detach`), graphs built in evaluation;
//!   [`GradWatch`]: gradients summed over several backward passes without `zero_grad`.
//! - [`ViewWatch`]: small views keeping large storages alive; [`CopyWatch`]: copies the
//!   program did not ask for by name (a `reshape` that copied, casts, autocast casts);
//!   [`EmptyCacheWatch`]: `empty_cache` in a loop; [`check_devices`]: a module's tensors and
//!   inputs on one device; [`fragmentation`]: reserved against allocated, with settings to try.
//!
//! - [`plan`](mod@plan): a training step's exact peak before running it, on meta replicas of
//!   the model and the optimizer.
//!
//! Every watch returns [`Finding`]s, whose text says what is wrong, where, and what to do.

mod cache;
mod copies;
mod devices;
mod error;
mod finding;
mod format;
mod fragmentation;
mod grad;
mod graph;
mod growth;
mod hub;
mod leak;
mod monitor;
pub mod plan;
mod profiler;
mod repeat;
mod tracker;
mod views;

pub use cache::EmptyCacheWatch;
pub use copies::{CopyKind, CopyUsage, CopyWatch};
pub use devices::check_devices;
pub use error::{ProfileError, Result};
pub use finding::{Finding, FindingKind};
pub use fragmentation::{fragmentation, FragmentationReport};
pub use grad::GradWatch;
pub use graph::GraphWatch;
pub use hub::{record_function, RecordFunction};
pub use leak::{LeakOptions, LeakWatch};
pub use monitor::{MemoryMonitor, MonitorSample};
pub use profiler::{
    profile, validate_chrome_trace, GroupBy, KeyAverages, MemorySample, OpEvent, OutsideOps,
    Profile, ProfileOptions, Profiler, Row, Schedule, SortKey, StepAction, TraceSummary,
};
pub use tracker::{CategoryPhase, MemoryTracker, Phase, PhaseGuard};
pub use views::ViewWatch;
