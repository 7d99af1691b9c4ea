//! One reader for a recorded trace: it pairs each allocation with its free and follows the
//! live and reserved bytes, so that every tool reading a trace (the plan's timeline, the
//! page's allocation lives, the replay's recorded peaks) counts them the same way.

use std::collections::HashMap;

use crate::caching::{TraceAction, TraceEntry, TraceEntrySnapshot};

/// What the walk needs of a trace entry: strata's live history ([`TraceEntry`]) and a
/// snapshot's ([`TraceEntrySnapshot`]) both provide it.
pub trait TraceRecord {
    /// What happened.
    fn action(&self) -> TraceAction;
    /// The block's or segment's address, where the entry has one (an `oom` entry has none).
    fn address(&self) -> Option<u64>;
    /// The entry's size in bytes.
    fn bytes(&self) -> u64;
}

impl TraceRecord for TraceEntry {
    fn action(&self) -> TraceAction {
        self.action
    }
    fn address(&self) -> Option<u64> {
        match self.action {
            TraceAction::Oom | TraceAction::Snapshot => None,
            _ => Some(self.addr as u64),
        }
    }
    fn bytes(&self) -> u64 {
        self.size as u64
    }
}

impl TraceRecord for TraceEntrySnapshot {
    fn action(&self) -> TraceAction {
        self.action
    }
    fn address(&self) -> Option<u64> {
        self.addr
    }
    fn bytes(&self) -> u64 {
        self.size
    }
}

/// Which entry ends a block's life: the caller's free (`free_requested`, when the tensor
/// died) or the allocator's (`free_completed`, when the block could be reused: later, for a
/// block used on another stream). PyTorch's allocated-bytes statistic drops at the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FreeAt {
    /// `free_requested`.
    Requested,
    /// `free_completed`.
    Completed,
}

/// What one entry changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A block became live.
    Alloc {
        /// Its address.
        addr: u64,
        /// Bytes requested.
        bytes: u64,
    },
    /// A block stopped being live.
    Free {
        /// Its address.
        addr: u64,
        /// Bytes it held: its allocation's, or this entry's when it was allocated before
        /// the trace began.
        bytes: u64,
        /// The entry that allocated it; `None` when that was before the trace.
        since: Option<usize>,
    },
    /// Memory was reserved from the device (positive) or returned to it (negative).
    Reserve {
        /// The change in bytes.
        delta: i128,
    },
    /// An allocation failed.
    Oom,
    /// Nothing the walk counts (the other free of a block, a snapshot marker).
    Other,
}

/// Walks a trace entry by entry: see the [module docs](self).
#[derive(Debug, Clone)]
pub struct TraceWalk {
    free_at: FreeAt,
    open: HashMap<u64, (usize, u64)>,
    live: i128,
    peak_live: i128,
    peak_live_at: Option<usize>,
    reserved: i128,
    peak_reserved: i128,
    ooms: usize,
}

impl TraceWalk {
    /// A walk that ends lives at `free_at`.
    pub fn new(free_at: FreeAt) -> TraceWalk {
        TraceWalk {
            free_at,
            open: HashMap::new(),
            live: 0,
            peak_live: 0,
            peak_live_at: None,
            reserved: 0,
            peak_reserved: 0,
            ooms: 0,
        }
    }

    /// Counts `bytes` as live from the start: blocks allocated before the trace began, whose
    /// frees the trace will show.
    pub fn with_live_before(mut self, bytes: u64) -> TraceWalk {
        self.live += i128::from(bytes);
        self.peak_live = self.peak_live.max(self.live);
        self
    }

    /// Continues from blocks already live (`address → (entry that allocated it, bytes)`), as
    /// [`into_open`](Self::into_open) returns them: a window's walk resumes the walk of the
    /// entries before it.
    pub fn with_open(mut self, open: HashMap<u64, (usize, u64)>) -> TraceWalk {
        let bytes: u64 = open.values().map(|(_, b)| *b).sum();
        self.open.extend(open);
        self.with_live_before(bytes)
    }

    /// Takes entry `index` of the trace.
    pub fn step(&mut self, index: usize, entry: &impl TraceRecord) -> Step {
        let bytes = entry.bytes();
        match (entry.action(), entry.address()) {
            (TraceAction::Alloc, Some(addr)) => {
                self.open.insert(addr, (index, bytes));
                self.live += i128::from(bytes);
                if self.live > self.peak_live {
                    self.peak_live = self.live;
                    self.peak_live_at = Some(index);
                }
                Step::Alloc { addr, bytes }
            }
            (TraceAction::FreeRequested, Some(addr)) if self.free_at == FreeAt::Requested => {
                self.free(addr, bytes)
            }
            (TraceAction::FreeCompleted, Some(addr)) if self.free_at == FreeAt::Completed => {
                self.free(addr, bytes)
            }
            (TraceAction::SegmentAlloc | TraceAction::SegmentMap, _) => {
                self.reserved += i128::from(bytes);
                self.peak_reserved = self.peak_reserved.max(self.reserved);
                Step::Reserve {
                    delta: i128::from(bytes),
                }
            }
            (TraceAction::SegmentFree | TraceAction::SegmentUnmap, _) => {
                self.reserved -= i128::from(bytes);
                Step::Reserve {
                    delta: -i128::from(bytes),
                }
            }
            (TraceAction::Oom, _) => {
                self.ooms += 1;
                Step::Oom
            }
            _ => Step::Other,
        }
    }

    fn free(&mut self, addr: u64, bytes: u64) -> Step {
        let (since, bytes) = match self.open.remove(&addr) {
            Some((s, b)) => (Some(s), b),
            None => (None, bytes),
        };
        self.live -= i128::from(bytes);
        Step::Free { addr, bytes, since }
    }

    /// Bytes live now.
    pub fn live(&self) -> i128 {
        self.live
    }

    /// The most bytes live so far (counting those live before the trace).
    pub fn peak_live(&self) -> i128 {
        self.peak_live
    }

    /// The entry at which live bytes first reached [`peak_live`](Self::peak_live); `None`
    /// while no allocation has raised them.
    pub fn peak_live_at(&self) -> Option<usize> {
        self.peak_live_at
    }

    /// Bytes reserved now, relative to the start of the trace.
    pub fn reserved(&self) -> i128 {
        self.reserved
    }

    /// The most bytes reserved so far, relative to the start of the trace.
    pub fn peak_reserved(&self) -> i128 {
        self.peak_reserved
    }

    /// `oom` entries so far.
    pub fn ooms(&self) -> usize {
        self.ooms
    }

    /// The blocks live now: `address → (entry that allocated it, bytes)`.
    pub fn open(&self) -> &HashMap<u64, (usize, u64)> {
        &self.open
    }

    /// [`open`](Self::open), taken.
    pub fn into_open(self) -> HashMap<u64, (usize, u64)> {
        self.open
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(action: TraceAction, addr: u64, size: u64) -> TraceEntrySnapshot {
        TraceEntrySnapshot {
            action,
            addr: Some(addr),
            device_free: None,
            size,
            stream: 0,
            time_us: 0,
            frames: Vec::new().into(),
            category: None,
        }
    }

    #[test]
    fn pairs_frees_with_allocations_and_follows_both_levels() {
        use TraceAction::*;
        let trace = [
            entry(SegmentAlloc, 0, 2048),
            entry(Alloc, 0, 512),
            entry(Alloc, 512, 1024),
            entry(FreeRequested, 0, 512),
            entry(FreeCompleted, 0, 512),
            entry(FreeRequested, 4096, 300), // allocated before the trace
            entry(SegmentFree, 0, 2048),
        ];
        let mut w = TraceWalk::new(FreeAt::Requested).with_live_before(300);
        let steps: Vec<Step> = trace
            .iter()
            .enumerate()
            .map(|(i, e)| w.step(i, e))
            .collect();
        assert_eq!(
            steps[3],
            Step::Free {
                addr: 0,
                bytes: 512,
                since: Some(1)
            }
        );
        assert_eq!(steps[4], Step::Other);
        assert_eq!(
            steps[5],
            Step::Free {
                addr: 4096,
                bytes: 300,
                since: None
            }
        );
        assert_eq!(w.peak_live(), 300 + 512 + 1024);
        assert_eq!(w.peak_live_at(), Some(2));
        assert_eq!(w.live(), 1024);
        assert_eq!((w.reserved(), w.peak_reserved()), (0, 2048));
        assert_eq!(w.open().get(&512), Some(&(2, 1024)));

        let mut c = TraceWalk::new(FreeAt::Completed);
        let steps: Vec<Step> = trace
            .iter()
            .enumerate()
            .map(|(i, e)| c.step(i, e))
            .collect();
        assert_eq!(steps[3], Step::Other);
        assert!(matches!(steps[4], Step::Free { since: Some(1), .. }));
    }

    #[test]
    fn the_peak_is_where_live_bytes_first_reach_their_highest() {
        use TraceAction::*;
        let trace = [
            entry(Alloc, 0, 100),
            entry(FreeRequested, 0, 100),
            entry(Alloc, 0, 100),
        ];
        let mut w = TraceWalk::new(FreeAt::Requested);
        for (i, e) in trace.iter().enumerate() {
            w.step(i, e);
        }
        assert_eq!((w.peak_live(), w.peak_live_at()), (100, Some(0)));
    }
}
