//! Labelled phases (forward, backward, optimizer step, ...) with the memory at their start
//! and end and their peak, in all and per category.

use std::fmt::Write;
use std::sync::Mutex;

use strata_alloc::Category;
use strata_core::{memory, Device};

use crate::format::bytes;
use crate::Result;

/// One category's memory over a phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CategoryPhase {
    /// The category.
    pub category: Category,
    /// Bytes at the phase's start.
    pub start: usize,
    /// Bytes at its end.
    pub end: usize,
    /// The most bytes at any moment of the phase.
    pub peak: usize,
}

/// The memory of one finished phase.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Phase {
    /// The phase's label.
    pub label: String,
    /// Allocated bytes at the start.
    pub start: usize,
    /// Allocated bytes at the end.
    pub end: usize,
    /// The most bytes allocated at any moment of the phase.
    pub peak: usize,
    /// Reserved bytes at the end.
    pub reserved: usize,
    /// The same per category.
    pub categories: Vec<CategoryPhase>,
}

struct Open {
    label: String,
    start: usize,
    peak: usize,
    categories: Vec<CategoryPhase>,
}

/// Memory by phase, the helper the guides write by hand around `memory_allocated` and
/// `reset_peak_memory_stats`, built in. A phase resets the device's peak statistics when it
/// starts (as that helper does); phases may nest, and an outer phase's peak still covers its
/// inner phases.
///
/// ```
/// use strata_profile::MemoryTracker;
/// use strata_core::{DType, Device, Tensor};
/// let tracker = MemoryTracker::new(Device::Meta);
/// let y = tracker.measure("forward", || {
///     let x = Tensor::on(Device::Meta).zeros(&[1024, 1024], DType::F32)?;
///     x.exp()?.sum(None, false)
/// })??;
/// let phase = &tracker.phases()[0];
/// assert_eq!(phase.label, "forward");
/// assert!(phase.peak >= 2 * 4 * 1024 * 1024); // x and exp(x) at once
/// assert!(phase.end - phase.start < 4096);       // only the sum outlives the phase
/// # drop(y);
/// # Ok::<(), strata_core::Error>(())
/// ```
pub struct MemoryTracker {
    device: Device,
    open: Mutex<Vec<Open>>,
    done: Mutex<Vec<Phase>>,
}

/// An open phase; it ends when dropped.
#[must_use = "the phase ends when this guard drops"]
pub struct PhaseGuard<'a> {
    tracker: &'a MemoryTracker,
}

impl Drop for PhaseGuard<'_> {
    fn drop(&mut self) {
        // Reading the statistics of a device that answered at the start cannot fail.
        let _ = self.tracker.end();
    }
}

fn peaks(device: Device) -> Result<(usize, [usize; 7], [usize; 7])> {
    let s = memory::memory_stats(device)?;
    let mut cur = [0usize; 7];
    let mut peak = [0usize; 7];
    for (i, c) in Category::ALL.iter().enumerate() {
        let st = s.category_bytes.get(*c);
        cur[i] = st.current.max(0) as usize;
        peak[i] = st.peak.max(0) as usize;
    }
    Ok((s.allocated_bytes.all.peak.max(0) as usize, cur, peak))
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl MemoryTracker {
    /// A tracker of `device`'s memory.
    pub fn new(device: Device) -> MemoryTracker {
        MemoryTracker {
            device,
            open: Mutex::new(Vec::new()),
            done: Mutex::new(Vec::new()),
        }
    }

    /// Folds the peaks since the last reset into every open phase.
    fn fold(&self, open: &mut [Open]) -> Result<()> {
        let (peak, _, cat_peaks) = peaks(self.device)?;
        for o in open {
            o.peak = o.peak.max(peak);
            for (c, p) in o.categories.iter_mut().zip(cat_peaks) {
                c.peak = c.peak.max(p);
            }
        }
        Ok(())
    }

    /// Starts phase `label`; it ends when the guard drops.
    pub fn phase(&self, label: &str) -> Result<PhaseGuard<'_>> {
        let mut open = lock(&self.open);
        self.fold(&mut open)?;
        memory::reset_peak_memory_stats(self.device)?;
        let start = memory::memory_allocated(self.device)?;
        let (_, cur, _) = peaks(self.device)?;
        open.push(Open {
            label: label.to_owned(),
            start,
            peak: start,
            categories: Category::ALL
                .iter()
                .zip(cur)
                .map(|(&category, b)| CategoryPhase {
                    category,
                    start: b,
                    end: b,
                    peak: b,
                })
                .collect(),
        });
        Ok(PhaseGuard { tracker: self })
    }

    /// Runs `f` as phase `label`.
    pub fn measure<R>(&self, label: &str, f: impl FnOnce() -> R) -> Result<R> {
        let _phase = self.phase(label)?;
        Ok(f())
    }

    fn end(&self) -> Result<()> {
        let mut open = lock(&self.open);
        self.fold(&mut open)?;
        let Some(mut o) = open.pop() else {
            return Ok(());
        };
        let end = memory::memory_allocated(self.device)?;
        let reserved = memory::memory_reserved(self.device)?;
        let (_, cur, _) = peaks(self.device)?;
        for (c, b) in o.categories.iter_mut().zip(cur) {
            c.end = b;
        }
        o.peak = o.peak.max(end);
        lock(&self.done).push(Phase {
            label: o.label,
            start: o.start,
            end,
            peak: o.peak,
            reserved,
            categories: o.categories,
        });
        Ok(())
    }

    /// The finished phases, in the order they ended.
    pub fn phases(&self) -> Vec<Phase> {
        lock(&self.done).clone()
    }

    /// The phases as a table: start, end, change and peak, then the categories that moved.
    pub fn report(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "{:<20} {:>11} {:>11} {:>11} {:>11}",
            "phase", "start", "end", "change", "peak"
        );
        for p in lock(&self.done).iter() {
            let change = p.end as i64 - p.start as i64;
            let sign = if change < 0 { "-" } else { "+" };
            let _ = writeln!(
                out,
                "{:<20} {:>11} {:>11} {:>11} {:>11}",
                p.label,
                bytes(p.start),
                bytes(p.end),
                format!("{sign}{}", bytes(change.unsigned_abs() as usize)),
                bytes(p.peak)
            );
            for c in &p.categories {
                if c.start != c.end || c.peak != c.start {
                    let _ = writeln!(
                        out,
                        "  {:<18} {:>11} {:>11} {:>11} {:>11}",
                        c.category.as_str(),
                        bytes(c.start),
                        bytes(c.end),
                        "",
                        bytes(c.peak)
                    );
                }
            }
        }
        out
    }
}
