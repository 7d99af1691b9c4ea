//! Which steps of a training loop a profiler records, as PyTorch's `torch.profiler.schedule`.

/// What the profiler does during one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepAction {
    /// Not recording.
    Idle,
    /// Recording, to be thrown away: the first profiled steps run slower (caches, the
    /// allocator filling up) and would skew the table.
    Warmup,
    /// Recording, kept.
    Record,
}

/// A window of steps to profile: after `skip_first` steps, cycles of `wait` idle steps,
/// `warmup` steps recorded and discarded, and `active` steps kept, `repeat` times (0: for as
/// long as the loop runs). PyTorch's `schedule(wait, warmup, active, repeat, skip_first)`.
///
/// ```
/// use strata_profile::{Schedule, StepAction};
/// let s = Schedule::new(1, 1, 2);
/// let actions: Vec<_> = (0..5).map(|step| s.action(step)).collect();
/// assert_eq!(actions, [StepAction::Idle, StepAction::Warmup, StepAction::Record,
///                      StepAction::Record, StepAction::Idle]);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Schedule {
    /// Idle steps at the start of each cycle.
    pub wait: u64,
    /// Recorded-and-discarded steps after the wait.
    pub warmup: u64,
    /// Steps kept.
    pub active: u64,
    /// Cycles to run; 0 repeats for as long as the loop runs.
    pub repeat: u64,
    /// Steps skipped before the first cycle.
    pub skip_first: u64,
}

impl Schedule {
    /// One cycle of `wait`, `warmup` and `active` steps.
    pub fn new(wait: u64, warmup: u64, active: u64) -> Schedule {
        Schedule {
            wait,
            warmup,
            active,
            repeat: 1,
            skip_first: 0,
        }
    }

    /// Runs `repeat` cycles (0: without end).
    pub fn repeat(self, repeat: u64) -> Schedule {
        Schedule { repeat, ..self }
    }

    /// Skips `steps` steps before the first cycle.
    pub fn skip_first(self, steps: u64) -> Schedule {
        Schedule {
            skip_first: steps,
            ..self
        }
    }

    /// What the profiler does during step `step` (counted from 0).
    pub fn action(&self, step: u64) -> StepAction {
        let Some(step) = step.checked_sub(self.skip_first) else {
            return StepAction::Idle;
        };
        let cycle = self.wait + self.warmup + self.active;
        if cycle == 0 || self.active == 0 {
            return StepAction::Idle;
        }
        if self.repeat > 0 && step / cycle >= self.repeat {
            return StepAction::Idle;
        }
        match step % cycle {
            s if s < self.wait => StepAction::Idle,
            s if s < self.wait + self.warmup => StepAction::Warmup,
            _ => StepAction::Record,
        }
    }
}
