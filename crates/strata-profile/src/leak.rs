//! Leaks across iterations: the sites whose live memory grows in every step.

use std::collections::BTreeMap;

use strata_core::{memory, Device, ProgramLines};

use crate::finding::{Finding, FindingKind};
use crate::format::{bytes, place};
use crate::growth::Growth;
use crate::repeat::{Repeats, Say};
use crate::Result;

/// When the leak watch speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeakOptions {
    /// Steps ignored at the start, while caches, optimizer state and prefetch queues fill
    /// (3 by default).
    pub warmup: usize,
    /// A site is reported when its live bytes grew in each of this many consecutive steps
    /// (5 by default: a queue of up to 5 batches filling up is not a leak).
    pub window: usize,
}

impl Default for LeakOptions {
    fn default() -> Self {
        LeakOptions {
            warmup: 3,
            window: 5,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Usage {
    bytes: usize,
    count: usize,
}

/// Call [`LeakWatch::step`] after each iteration: after the warm-up it reports the
/// allocation sites (source line, op and scope) whose live bytes grew in every one of the
/// last `window` steps, with the growth per step and the tensors alive there.
///
/// A site is reported in full once, when it is first found; while it keeps growing, `step`
/// gives a one-line reminder ("still growing: +X per step since step N") 10, 20, 40, ...
/// steps later, and nothing in between. [`LeakWatch::report`] gives the full findings of
/// the last step on demand.
///
/// ```
/// use strata_profile::{LeakOptions, LeakWatch};
/// use strata_core::{DType, Device, Tensor};
/// let mut watch = LeakWatch::with_options(Device::Meta, LeakOptions { warmup: 1, window: 3 });
/// let mut kept = Vec::new();
/// let mut found = Vec::new();
/// for _ in 0..6 {
///     kept.push(Tensor::on(Device::Meta).zeros(&[1024], DType::F32)?); // one kept per step
///     found.extend(watch.step()?);
/// }
/// assert_eq!(found.len(), 1);
/// assert!(found[0].message.contains("+4.0 KiB per step"));
/// # Ok::<(), strata_core::Error>(())
/// ```
pub struct LeakWatch {
    device: Device,
    options: LeakOptions,
    steps: usize,
    growth: Growth<Usage>,
    repeats: Repeats,
    last: Vec<Finding>,
    /// Keeps ops attributed to the program's lines while the watch lives, so its findings
    /// name them.
    _lines: ProgramLines,
}

impl LeakWatch {
    /// A watch of `device` with the default options.
    pub fn new(device: Device) -> LeakWatch {
        LeakWatch::with_options(device, LeakOptions::default())
    }

    /// A watch of `device` with `options`.
    pub fn with_options(device: Device, options: LeakOptions) -> LeakWatch {
        LeakWatch {
            device,
            options,
            steps: 0,
            growth: Growth::new(options.window),
            repeats: Repeats::default(),
            last: Vec::new(),
            _lines: ProgramLines::record(),
        }
    }

    /// The full findings of the last step: every site growing now, reminders or not.
    pub fn report(&self) -> Vec<Finding> {
        self.last.clone()
    }

    /// Records the end of an iteration; gives the sites newly found growing in every one of
    /// the last `window` steps, and reminders for those found before (empty during the
    /// warm-up, when nothing grew, and between reminders).
    pub fn step(&mut self) -> Result<Vec<Finding>> {
        self.steps += 1;
        if self.steps <= self.options.warmup {
            return Ok(Vec::new());
        }
        let mut now: BTreeMap<String, Usage> = BTreeMap::new();
        for u in memory::live_allocations(self.device)? {
            let e = now.entry(place(&u.site)).or_default();
            e.bytes += u.bytes;
            e.count += u.count;
        }
        self.growth.push(now);
        let window = self.growth.window();
        let mut found: Vec<(usize, String, Finding)> = self
            .growth
            .grown(|u| u.bytes)
            .into_iter()
            .map(|(place, then, now)| {
                let per_step = (now.bytes - then.bytes) / window;
                let message = format!(
                    "{place}: +{} per step, {} live tensors ({} now); memory allocated here \
                     grew in each of the last {window} steps. Something keeps a tensor from \
                     every step: a list, a map, a closure that captures its own tensor",
                    bytes(per_step),
                    now.count,
                    bytes(now.bytes)
                );
                (per_step, place, Finding::new(FindingKind::Leak, message))
            })
            .collect();
        found.sort_by_key(|f| std::cmp::Reverse(f.0));
        let mut said = Vec::new();
        for (per_step, place, full) in &found {
            match self.repeats.say(place, self.steps) {
                Say::Full => said.push(full.clone()),
                Say::Reminder { since } => said.push(Finding::reminder(
                    FindingKind::Leak,
                    format!(
                        "{place}: still growing, +{} per step since step {since} \
                         (LeakWatch::report() repeats the finding)",
                        bytes(*per_step)
                    ),
                )),
                Say::Quiet => {}
            }
        }
        self.last = found.into_iter().map(|(.., f)| f).collect();
        Ok(said)
    }
}
