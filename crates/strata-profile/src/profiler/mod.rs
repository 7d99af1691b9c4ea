//! The profiler: every op with its CPU time, operand shapes, and the memory its thread
//! allocated and freed while it ran; user ranges; a schedule over a training loop's steps;
//! PyTorch's `key_averages()` table; and the Chrome trace format.

mod record;
mod schedule;
mod table;
mod trace;

use std::sync::atomic::Ordering;
use std::sync::Arc;

pub use record::{MemorySample, OpEvent, OutsideOps};
pub use schedule::{Schedule, StepAction};
pub use table::{GroupBy, KeyAverages, Row, SortKey};
pub use trace::{validate_chrome_trace, TraceSummary};

use crate::hub::{register, Registration};
use crate::{record_function, RecordFunction};
use record::Recorder;

/// What to record (PyTorch's `torch.profiler.profile` arguments).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProfileOptions {
    /// Keep each op's operand shapes and dtypes (needed to group by shape). On by default.
    pub record_shapes: bool,
    /// Count the memory each op allocates and frees. On by default.
    pub profile_memory: bool,
    /// Record only the steps a schedule selects ([`Profiler::step`] advances it); `None`
    /// records everything from start to finish.
    pub schedule: Option<Schedule>,
}

impl Default for ProfileOptions {
    fn default() -> Self {
        ProfileOptions {
            record_shapes: true,
            profile_memory: true,
            schedule: None,
        }
    }
}

impl ProfileOptions {
    /// These options with `schedule`.
    pub fn schedule(self, schedule: Schedule) -> Self {
        ProfileOptions {
            schedule: Some(schedule),
            ..self
        }
    }

    /// These options with shapes recorded or not.
    pub fn record_shapes(self, on: bool) -> Self {
        ProfileOptions {
            record_shapes: on,
            ..self
        }
    }

    /// These options with memory counted or not.
    pub fn profile_memory(self, on: bool) -> Self {
        ProfileOptions {
            profile_memory: on,
            ..self
        }
    }
}

/// Profiles `f`: every op it runs, on every thread, until it returns.
///
/// ```
/// use strata_profile::{profile, ProfileOptions, SortKey};
/// use strata_core::{DType, Tensor};
/// let (y, prof) = profile(ProfileOptions::default(), || {
///     let x = Tensor::ones(&[256, 256], DType::F32)?;
///     x.matmul(&x)
/// });
/// y?;
/// let table = prof.key_averages().table(SortKey::SelfCpuMemoryUsage, 10);
/// assert!(table.contains("matmul"));
/// # Ok::<(), strata_core::Error>(())
/// ```
pub fn profile<R>(options: ProfileOptions, f: impl FnOnce() -> R) -> (R, Profile) {
    let profiler = Profiler::start(ProfileOptions {
        schedule: None,
        ..options
    });
    let out = f();
    (out, profiler.finish())
}

/// A running profiler, for loops: [`Profiler::step`] after each iteration advances the
/// schedule; [`Profiler::finish`] stops and gives the [`Profile`].
///
/// ```
/// use strata_profile::{Profiler, ProfileOptions, Schedule};
/// use strata_core::{DType, Tensor};
/// let mut prof = Profiler::start(ProfileOptions::default().schedule(Schedule::new(1, 1, 2)));
/// for _ in 0..6 {
///     let x = Tensor::ones(&[32], DType::F32)?;
///     x.exp()?;
///     prof.step();
/// }
/// let p = prof.finish();
/// assert_eq!(p.events().iter().filter(|e| e.name == "exp").count(), 2);
/// # Ok::<(), strata_core::Error>(())
/// ```
pub struct Profiler {
    recorder: Arc<Recorder>,
    schedule: Option<Schedule>,
    step: u64,
    step_range: Option<RecordFunction>,
    _registration: Registration,
}

impl Profiler {
    /// Starts profiling (with a schedule, step 0 begins now).
    pub fn start(options: ProfileOptions) -> Profiler {
        let first = options.schedule.map(|s| s.action(0));
        let recording = !matches!(first, Some(StepAction::Idle));
        let recorder = Arc::new(Recorder::new(
            options.record_shapes,
            options.profile_memory,
            recording,
        ));
        let registration = register(recorder.clone());
        let mut p = Profiler {
            recorder,
            schedule: options.schedule,
            step: 0,
            step_range: None,
            _registration: registration,
        };
        p.open_step();
        p
    }

    /// The step the loop is in (counted from 0).
    pub fn step_num(&self) -> u64 {
        self.step
    }

    fn action(&self, step: u64) -> StepAction {
        self.schedule.map_or(StepAction::Record, |s| s.action(step))
    }

    fn open_step(&mut self) {
        if self.schedule.is_some() && self.action(self.step) != StepAction::Idle {
            self.step_range = Some(record_function("ProfilerStep*"));
        }
    }

    /// Ends the current step and begins the next, as PyTorch's `prof.step()`.
    pub fn step(&mut self) {
        self.step_range = None;
        let before = self.action(self.step);
        self.step += 1;
        let now = self.action(self.step);
        if before == StepAction::Warmup && now != StepAction::Warmup {
            // The warm-up is over: forget what it recorded.
            self.recorder.discard();
        }
        self.recorder
            .recording
            .store(now != StepAction::Idle, Ordering::Release);
        self.open_step();
    }

    /// Stops profiling and gives what was recorded.
    pub fn finish(mut self) -> Profile {
        self.step_range = None;
        if self.action(self.step) == StepAction::Warmup {
            self.recorder.discard();
        }
        self.recorder.recording.store(false, Ordering::Release);
        let (mut events, samples, outside) = self.recorder.take();
        events.sort_by(|a, b| {
            (a.thread, a.start_us, a.depth)
                .partial_cmp(&(b.thread, b.start_us, b.depth))
                .unwrap_or(std::cmp::Ordering::Equal)
        });
        Profile {
            events,
            samples,
            outside,
        }
    }
}

/// What a profiler recorded.
#[derive(Debug, Clone)]
pub struct Profile {
    events: Vec<OpEvent>,
    samples: Vec<MemorySample>,
    outside: OutsideOps,
}

impl Profile {
    /// Every op and range, by thread, then start.
    pub fn events(&self) -> &[OpEvent] {
        &self.events
    }

    /// Memory over time (one sample per allocation or free), for counter tracks.
    pub fn memory_samples(&self) -> &[MemorySample] {
        &self.samples
    }

    /// Memory allocated and freed outside every op (tensors the program dropped).
    pub fn outside_ops(&self) -> OutsideOps {
        self.outside
    }

    /// The events grouped by name, as PyTorch's `key_averages()`.
    pub fn key_averages(&self) -> KeyAverages {
        self.key_averages_by(GroupBy::default())
    }

    /// The events grouped by name and, as asked, by input shapes or scope
    /// (`key_averages(group_by_input_shape=True)`).
    pub fn key_averages_by(&self, group: GroupBy) -> KeyAverages {
        KeyAverages::new(&self.events, self.outside, group)
    }

    /// The profile in the Chrome trace-event format (JSON), with memory as counter tracks.
    pub fn chrome_trace(&self) -> String {
        trace::to_chrome_trace(&self.events, &self.samples)
    }

    /// Writes [`Profile::chrome_trace`] to `path` (PyTorch's `export_chrome_trace`).
    pub fn export_chrome_trace(&self, path: impl AsRef<std::path::Path>) -> std::io::Result<()> {
        std::fs::write(path, self.chrome_trace())
    }
}
