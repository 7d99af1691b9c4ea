//! `explain`: why a run ran out of memory (or, without an out-of-memory, what its peak was
//! made of), from a snapshot alone, strata's or PyTorch's: the moment's figures, its
//! fragmentation, who held the memory, and the fixes that would have helped, each verified by
//! replaying the whole trace under it.
//!
//! The moment is the first `oom` entry of the trace, or else the entry after which allocated
//! bytes peaked; the allocator's state there is rebuilt by replaying the trace up to it under
//! the run's own settings (after an out-of-memory, the cache has already been emptied for
//! the retry, as it was when the run gave up). A snapshot without a trace is explained from
//! its segments, and no fix can be verified.

mod fixes;
mod fragmentation;
mod holders;
mod verdict;

use serde::Serialize;

use super::replay::{recorded_config, PreparedTrace};
use crate::caching::TraceAction;
use crate::caching::{SegmentSnapshot, Snapshot};

pub use fixes::{Change, Fix};
pub use fragmentation::{Fragmentation, PoolUse};
pub use holders::{is_library_frame, site_of, Holder, BEFORE_TRACE, NO_STACK};

use fixes::{candidate_settings, run_all, Trial, MAX_HOLDERS_REMOVED};

/// What to explain, and how.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExplainOptions {
    /// The device whose trace to explain (index into `device_traces`).
    pub device: usize,
    /// The bytes the run could hold: the device's memory, or the per-process limit it ran
    /// under (`None`: the limit the snapshot records, else an estimate from the
    /// out-of-memory entry). PyTorch's snapshots record neither.
    pub capacity: Option<u64>,
    /// Group holders by their first frame even when it is library code (PyTorch's, Python's,
    /// installed packages, C++), instead of by the first frame in the user's own code.
    pub library_frames: bool,
}

/// The moment explained.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Moment {
    /// A request ran out of memory: the first `oom` entry of the trace.
    OutOfMemory {
        /// Its index in the trace.
        entry: usize,
        /// The bytes asked for (rounded, as the allocator asked the device).
        request: u64,
        /// The device's free bytes then, where the trace records them.
        device_free: Option<u64>,
        /// Where the request came from (its first frame in user code).
        site: String,
    },
    /// No request ran out of memory: the moment allocated bytes peaked.
    Peak {
        /// The trace entry after which they did (`None`: before the trace began).
        entry: Option<usize>,
    },
    /// The snapshot has no trace: its own segments, as they were when it was taken.
    Snapshot,
}

/// Where the capacity the fixes are replayed under comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "source", rename_all = "snake_case")]
pub enum Capacity {
    /// Given by the caller ([`ExplainOptions::capacity`], `--capacity`).
    Given {
        /// Bytes.
        bytes: u64,
    },
    /// The memory limit the snapshot records (strata's snapshots do).
    Recorded {
        /// Bytes.
        bytes: u64,
    },
    /// The device's free bytes at the out-of-memory plus the bytes reserved then: what the
    /// allocator could have held, had nothing else changed.
    Estimated {
        /// Bytes.
        bytes: u64,
    },
    /// Not known: the fixes are replayed on an unbounded device.
    Unknown,
}

impl Capacity {
    /// The bytes, when known or estimated.
    pub fn bytes(&self) -> Option<u64> {
        match *self {
            Capacity::Given { bytes }
            | Capacity::Recorded { bytes }
            | Capacity::Estimated { bytes } => Some(bytes),
            Capacity::Unknown => None,
        }
    }

    /// How it was learnt, for a reader.
    pub fn source(&self) -> &'static str {
        match self {
            Capacity::Given { .. } => "given",
            Capacity::Recorded { .. } => "the limit the snapshot records",
            Capacity::Estimated { .. } => {
                "an estimate: the device's free bytes at the out-of-memory plus those reserved"
            }
            Capacity::Unknown => "unknown",
        }
    }
}

/// Why a run ran out of memory, or what its peak was made of, and what would have helped.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Explanation {
    /// The device explained.
    pub device: usize,
    /// Entries in its trace (0: no trace).
    pub entries: usize,
    /// The moment.
    pub moment: Moment,
    /// The capacity the replays ran under.
    pub capacity: Capacity,
    /// The allocator's memory at the moment.
    pub fragmentation: Fragmentation,
    /// The live blocks at the moment, grouped by site, largest first.
    pub holders: Vec<Holder>,
    /// Whether holders are grouped by their first frame even in library code.
    pub library_frames: bool,
    /// Every replay run: the recorded settings first, then each setting the run did not
    /// already use, then (at an out-of-memory) the run without its largest holders.
    pub fixes: Vec<Fix>,
    /// The answer in one paragraph: what ran out, whether it is fragmentation, and what
    /// fixes it, verified by replay.
    pub verdict: String,
}

impl Explanation {
    /// The replay under the recorded settings, when there was a trace.
    pub fn baseline(&self) -> Option<&Fix> {
        self.fixes.iter().find(|f| f.change == Change::Recorded)
    }

    /// The settings whose replay shows they help, in the order tried.
    pub fn suggested_settings(&self) -> Vec<&str> {
        self.fixes
            .iter()
            .filter(|f| f.helps)
            .filter_map(|f| match &f.change {
                Change::Setting { setting } => Some(setting.as_str()),
                _ => None,
            })
            .collect()
    }

    /// The fewest largest holders whose absence avoids the out-of-memory, when taking some
    /// away does and no setting does.
    pub fn fewest_holders_removed(&self) -> Option<&Fix> {
        self.fixes
            .iter()
            .find(|f| f.helps && matches!(f.change, Change::WithoutHolders { .. }))
    }
}

/// Explains device `options.device`'s memory in `snapshot`; see the [module](self).
///
/// ```
/// use strata_alloc::offline::{explain, ExplainOptions, Moment};
/// use strata_alloc::{CachingAllocator, DeviceAllocator, RecordContext, Site, VirtualBacking};
/// let a = CachingAllocator::new(VirtualBacking::new(1 << 30));
/// a.set_memory_limit(Some(100 << 20));
/// a.record_memory_history(true, RecordContext::All, 10_000);
/// let site = Site::unknown("example");
/// let held: Vec<_> = (0..4).map(|_| a.allocate(20 << 20, &site).unwrap()).collect();
/// assert!(a.allocate(40 << 20, &site).is_err());
/// let e = explain(&a.snapshot(), &ExplainOptions::default());
/// assert!(matches!(e.moment, Moment::OutOfMemory { request, .. } if request == 40 << 20));
/// assert!(e.suggested_settings().is_empty()); // 80 MiB is live: no setting fits 40 more
/// assert!(e.fewest_holders_removed().is_some());
/// # for b in held { unsafe { a.deallocate(b) } }
/// ```
pub fn explain(snapshot: &Snapshot, options: &ExplainOptions) -> Explanation {
    let Ok(prepared) = PreparedTrace::new(snapshot, options.device) else {
        return from_segments(snapshot, options);
    };
    let trace = prepared.trace;
    let recorded = recorded_config(&snapshot.allocator_settings);
    let known = known_capacity(snapshot, options);
    let oom = trace.iter().position(|e| e.action == TraceAction::Oom);
    // Where the moment ends (exclusive), and the moment.
    let (end, moment) = match oom {
        Some(k) => {
            let e = &trace[k];
            let moment = Moment::OutOfMemory {
                entry: k,
                request: e.size,
                device_free: e.device_free,
                site: site_of(&e.frames, options.library_frames),
            };
            (k + 1, moment)
        }
        None => {
            let peak = prepared
                .run(
                    recorded.clone(),
                    known.bytes(),
                    Default::default(),
                    &Default::default(),
                )
                .peak_entry;
            (peak.map_or(0, |k| k + 1), Moment::Peak { entry: peak })
        }
    };
    // Under a known limit the replay of the `oom` entry itself fails after emptying the cache
    // for its retry, as the run did; on an unbounded device it would succeed, so the state is
    // taken before it, after the releases the run's retry recorded.
    let state_end = match moment {
        Moment::OutOfMemory { entry, .. } if known.bytes().is_none() => entry,
        _ => end,
    };
    let state = prepared.state_before(recorded.clone(), known.bytes(), state_end);
    let fragmentation = Fragmentation::of(&state.segments);
    let capacity = match (known, &moment) {
        (
            Capacity::Unknown,
            Moment::OutOfMemory {
                device_free: Some(free),
                ..
            },
        ) => Capacity::Estimated {
            bytes: free + fragmentation.reserved,
        },
        _ => known,
    };
    let holders = holders::from_trace(
        trace,
        end,
        &prepared.missing,
        &snapshot.segments,
        options.library_frames,
    );
    let limit_known = matches!(known, Capacity::Given { .. } | Capacity::Recorded { .. });
    let mut trials = vec![Trial::setting(Change::Recorded, recorded.clone())];
    for (setting, config) in candidate_settings(&recorded, limit_known) {
        trials.push(Trial::setting(Change::Setting { setting }, config));
    }
    if matches!(moment, Moment::OutOfMemory { .. }) {
        for n in 1..=MAX_HOLDERS_REMOVED.min(holders.len()) {
            trials.push(Trial::without_holders(&holders, n, recorded.clone()));
        }
    }
    let mut fixes = run_all(&prepared, capacity.bytes(), trials);
    judge(&mut fixes, &moment);
    let mut e = Explanation {
        device: options.device,
        entries: trace.len(),
        moment,
        capacity,
        fragmentation,
        holders,
        library_frames: options.library_frames,
        fixes,
        verdict: String::new(),
    };
    e.verdict = verdict::verdict(&e);
    e
}

/// Marks the fixes that help against the baseline (the first, under the recorded settings):
/// at an out-of-memory the baseline reproduces, those without one; at a peak, those that
/// lower the peak reserved by at least 1% without running out of memory. Where the baseline
/// does not reproduce the out-of-memory, nothing is verified and nothing helps.
fn judge(fixes: &mut [Fix], moment: &Moment) {
    let Some((baseline, rest)) = fixes.split_first_mut() else {
        return;
    };
    let at_oom = matches!(moment, Moment::OutOfMemory { .. });
    for f in rest {
        f.helps = match (at_oom, baseline.ooms > 0) {
            (true, true) => f.ooms == 0,
            (true, false) => false,
            (false, _) => {
                f.ooms == 0
                    && u128::from(f.peak_reserved) * 100 <= u128::from(baseline.peak_reserved) * 99
            }
        };
    }
}

/// The capacity given, else the limit the snapshot records (no estimate yet).
fn known_capacity(snapshot: &Snapshot, options: &ExplainOptions) -> Capacity {
    match (options.capacity, snapshot.allocator_settings.memory_limit) {
        (Some(bytes), _) => Capacity::Given { bytes },
        (None, Some(bytes)) => Capacity::Recorded { bytes },
        (None, None) => Capacity::Unknown,
    }
}

/// A snapshot without a trace: its segments as they are.
fn from_segments(snapshot: &Snapshot, options: &ExplainOptions) -> Explanation {
    let capacity = known_capacity(snapshot, options);
    let segments: Vec<SegmentSnapshot> = snapshot
        .segments
        .iter()
        .filter(|s| s.device == options.device as i64)
        .cloned()
        .collect();
    let mut e = Explanation {
        device: options.device,
        entries: 0,
        moment: Moment::Snapshot,
        capacity,
        fragmentation: Fragmentation::of(&segments),
        holders: holders::from_segments(&segments, options.library_frames),
        library_frames: options.library_frames,
        fixes: Vec::new(),
        verdict: String::new(),
    };
    e.verdict = verdict::verdict(&e);
    e
}
