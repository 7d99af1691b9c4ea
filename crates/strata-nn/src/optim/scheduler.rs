//! Learning-rate schedules (`torch.optim.lr_scheduler`): each group's learning rate as a
//! function of the epoch and the rate the group started from (its `initial_lr`).
//!
//! ```
//! use strata_core::{DType, Tensor};
//! use strata_nn::optim::{Optimizer, Schedule, Scheduler, Sgd};
//! let w = Tensor::ones(&[1], DType::F32)?.requires_grad_(true)?;
//! let mut opt = Optimizer::sgd([w], Sgd { lr: 1.0, ..Sgd::default() })?;
//! let mut sched = Scheduler::new(&mut opt, Schedule::Step { step_size: 2, gamma: 0.5 })?;
//! let mut lrs = vec![opt.lr(0)?];
//! for _ in 0..4 {
//!     sched.step(&mut opt)?;
//!     lrs.push(opt.lr(0)?);
//! }
//! assert_eq!(lrs, vec![1.0, 1.0, 0.5, 0.5, 0.25]);
//! # Ok::<(), strata_core::Error>(())
//! ```

use strata_core::{Error, Result};

use super::Optimizer;

/// A learning-rate schedule: the factor or value of each epoch.
#[derive(Debug, Clone, PartialEq)]
pub enum Schedule {
    /// `StepLR`: multiplied by `gamma` every `step_size` epochs.
    Step {
        /// Epochs between decays.
        step_size: u64,
        /// The decay factor (PyTorch's default 0.1).
        gamma: f64,
    },
    /// `MultiStepLR`: multiplied by `gamma` at each milestone epoch.
    MultiStep {
        /// The epochs at which the rate decays, increasing.
        milestones: Vec<u64>,
        /// The decay factor (PyTorch's default 0.1).
        gamma: f64,
    },
    /// `CosineAnnealingLR`: `eta_min + (lr0 − eta_min)·(1 + cos(π·epoch/t_max))/2`, past
    /// `t_max` too.
    Cosine {
        /// The half period, in epochs.
        t_max: u64,
        /// The lowest rate (PyTorch's default 0).
        eta_min: f64,
    },
    /// `LinearLR` (warm-up): the factor goes linearly from `start_factor` to `end_factor`
    /// over `total_iters` epochs, then stays.
    Linear {
        /// The first epoch's factor (PyTorch's default 1/3).
        start_factor: f64,
        /// The factor from `total_iters` on (PyTorch's default 1).
        end_factor: f64,
        /// Epochs of the ramp (PyTorch's default 5).
        total_iters: u64,
    },
    /// `SequentialLR`: `schedules[i]` from `milestones[i - 1]` on, each counting its epochs
    /// from its own start.
    Sequential {
        /// One more schedule than milestones.
        schedules: Vec<Schedule>,
        /// Epochs at which the next schedule takes over, increasing.
        milestones: Vec<u64>,
    },
}

impl Schedule {
    /// `LinearLR` with PyTorch's defaults (1/3 to 1 over 5 epochs).
    pub fn linear_warmup() -> Schedule {
        Schedule::Linear {
            start_factor: 1.0 / 3.0,
            end_factor: 1.0,
            total_iters: 5,
        }
    }

    /// The learning rate at `epoch` for a group that started at `base`.
    pub fn lr_at(&self, epoch: u64, base: f64) -> f64 {
        match self {
            Schedule::Step { step_size, gamma } => {
                base * gamma.powi(exponent(epoch / (*step_size).max(1)))
            }
            Schedule::MultiStep { milestones, gamma } => {
                let passed = milestones.iter().filter(|&&m| m <= epoch).count();
                base * gamma.powi(exponent(passed as u64))
            }
            Schedule::Cosine { t_max, eta_min } => {
                let t = (*t_max).max(1) as f64;
                eta_min
                    + (base - eta_min) * (1.0 + (std::f64::consts::PI * epoch as f64 / t).cos())
                        / 2.0
            }
            Schedule::Linear {
                start_factor,
                end_factor,
                total_iters,
            } => {
                let done = if *total_iters == 0 {
                    1.0
                } else {
                    epoch.min(*total_iters) as f64 / *total_iters as f64
                };
                base * (start_factor + (end_factor - start_factor) * done)
            }
            Schedule::Sequential {
                schedules,
                milestones,
            } => {
                let i = milestones.iter().filter(|&&m| m <= epoch).count();
                let start = if i == 0 { 0 } else { milestones[i - 1] };
                schedules
                    .get(i)
                    .map_or(base, |s| s.lr_at(epoch - start, base))
            }
        }
    }

    /// Checks the schedule as PyTorch's constructors do.
    fn check(&self) -> Result<()> {
        let bad = |m: String| Err(Error::argument("lr_scheduler", m, None));
        match self {
            Schedule::Step { step_size: 0, .. } => bad("step_size must be at least 1".into()),
            Schedule::MultiStep { milestones, .. } if !increasing(milestones) => {
                bad(format!("milestones must increase, got {milestones:?}"))
            }
            Schedule::Cosine { t_max: 0, .. } => bad("T_max must be at least 1".into()),
            Schedule::Linear {
                start_factor,
                end_factor,
                ..
            } if !(*start_factor > 0.0
                && *start_factor <= 1.0
                && (0.0..=1.0).contains(end_factor)) =>
            {
                bad(format!(
                    "start_factor must be in (0, 1] and end_factor in [0, 1], got \
                     {start_factor} and {end_factor}"
                ))
            }
            Schedule::Sequential {
                schedules,
                milestones,
            } => {
                if schedules.len() != milestones.len() + 1 {
                    return bad(format!(
                        "SequentialLR needs one more schedule than milestones, got {} \
                         schedules and {} milestones",
                        schedules.len(),
                        milestones.len()
                    ));
                }
                if !increasing(milestones) {
                    return bad(format!("milestones must increase, got {milestones:?}"));
                }
                schedules.iter().try_for_each(Schedule::check)
            }
            _ => Ok(()),
        }
    }
}

fn increasing(v: &[u64]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

fn exponent(n: u64) -> i32 {
    n.min(i32::MAX as u64) as i32
}

/// Drives an optimizer's learning rates through a [`Schedule`], one epoch per
/// [`Scheduler::step`]. Created at epoch 0, which sets the rates for epoch 0 (a warm-up's
/// first factor applies at once, as in PyTorch).
#[derive(Debug, Clone)]
pub struct Scheduler {
    schedule: Schedule,
    base: Vec<f64>,
    epoch: u64,
}

impl Scheduler {
    /// Starts `schedule` on `opt` at epoch 0, from each group's `initial_lr` (its current
    /// rate, the first time a scheduler drives it).
    pub fn new(opt: &mut Optimizer, schedule: Schedule) -> Result<Self> {
        schedule.check()?;
        let s = Scheduler {
            schedule,
            base: opt.initial_lrs(),
            epoch: 0,
        };
        s.apply(opt)?;
        Ok(s)
    }

    /// Moves to the next epoch and sets its rates.
    pub fn step(&mut self, opt: &mut Optimizer) -> Result<()> {
        if opt.group_count() != self.base.len() {
            return Err(Error::argument(
                "lr_scheduler.step",
                format!(
                    "the scheduler was made for {} parameter groups, this optimizer has {}",
                    self.base.len(),
                    opt.group_count()
                ),
                Some("step the scheduler with the optimizer it was made for"),
            ));
        }
        self.epoch += 1;
        self.apply(opt)
    }

    /// The current epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The rates of the current epoch, one per group (PyTorch's `get_last_lr`).
    pub fn last_lr(&self) -> Vec<f64> {
        self.base
            .iter()
            .map(|&b| self.schedule.lr_at(self.epoch, b))
            .collect()
    }

    fn apply(&self, opt: &mut Optimizer) -> Result<()> {
        for (g, lr) in self.last_lr().into_iter().enumerate() {
            opt.set_lr(g, lr)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_follow_pytorch_closed_forms() {
        let multi = Schedule::MultiStep {
            milestones: vec![2, 4],
            gamma: 0.1,
        };
        let got: Vec<f64> = (0..6).map(|e| multi.lr_at(e, 1.0)).collect();
        let want = [1.0, 1.0, 0.1, 0.1, 0.01, 0.01];
        assert!(got.iter().zip(want).all(|(a, b)| (a - b).abs() < 1e-12));
        let cos = Schedule::Cosine {
            t_max: 10,
            eta_min: 0.0,
        };
        assert!((cos.lr_at(5, 1.0) - 0.5).abs() < 1e-12);
        assert!(cos.lr_at(10, 1.0).abs() < 1e-12);
        assert!((cos.lr_at(20, 1.0) - 1.0).abs() < 1e-12);
        let warm = Schedule::linear_warmup();
        assert!((warm.lr_at(0, 0.3) - 0.1).abs() < 1e-12);
        assert!((warm.lr_at(5, 0.3) - 0.3).abs() < 1e-12);
        let seq = Schedule::Sequential {
            schedules: vec![warm, cos],
            milestones: vec![5],
        };
        // The cosine starts again from its own epoch 0 at the milestone.
        assert!((seq.lr_at(5, 1.0) - 1.0).abs() < 1e-12);
        assert!((seq.lr_at(10, 1.0) - 0.5).abs() < 1e-12);
    }

    #[test]
    fn bad_schedules_are_refused() {
        let seq = Schedule::Sequential {
            schedules: vec![Schedule::linear_warmup()],
            milestones: vec![3],
        };
        assert!(seq.check().is_err());
        assert!(Schedule::Step {
            step_size: 0,
            gamma: 0.1
        }
        .check()
        .is_err());
    }
}
