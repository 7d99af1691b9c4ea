//! The history ring buffer: what the allocator did, when, and for which site.

use std::collections::VecDeque;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::backing::StreamId;
use crate::{Category, Site};

/// What a trace entry records (the action names of PyTorch's memory snapshots).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TraceAction {
    /// A block was handed out (`size` = the caller's bytes).
    Alloc,
    /// The owner gave a block back.
    FreeRequested,
    /// The block is back in its pool (after the streams that used it finished).
    FreeCompleted,
    /// A segment was obtained from the backing.
    SegmentAlloc,
    /// A segment was returned to the backing.
    SegmentFree,
    /// Pages of an expandable segment were mapped.
    SegmentMap,
    /// Pages of an expandable segment were unmapped.
    SegmentUnmap,
    /// A request failed with out-of-memory (`addr` = the device's free bytes,
    /// `size` = the rounded request).
    Oom,
    /// A snapshot was taken (`size` = active bytes).
    Snapshot,
}

impl TraceAction {
    /// The snapshot name of the action (`"alloc"`, `"free_requested"`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeRequested => "free_requested",
            TraceAction::FreeCompleted => "free_completed",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            TraceAction::Oom => "oom",
            TraceAction::Snapshot => "snapshot",
        }
    }
}

/// How much context (allocation sites) history keeps, as PyTorch's `context` argument.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum RecordContext {
    /// No sites in trace entries.
    Never,
    /// Sites only on live blocks (snapshots), not on trace entries.
    State,
    /// Sites on allocation trace entries as well (free entries carry the allocation's site).
    Alloc,
    /// Everything (the default). Frees have no site of their own here, so this is `Alloc`.
    #[default]
    All,
}

/// One recorded event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceEntry {
    /// What happened.
    pub action: TraceAction,
    /// Block, segment or range address (for `Oom`: the device's free bytes).
    pub addr: usize,
    /// Bytes (see [`TraceAction`] for which).
    pub size: usize,
    /// The stream involved.
    pub stream: StreamId,
    /// Microseconds since the Unix epoch.
    pub time_us: i64,
    /// The site that caused it, when the context level keeps sites.
    pub site: Option<Site>,
    /// On `FreeRequested`: what the block held.
    pub category: Option<Category>,
}

pub(crate) fn now_us() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as i64)
        .unwrap_or(0)
}

/// The ring buffer. Disabled by default: recording costs a timestamp per event.
#[derive(Debug, Clone)]
pub(crate) struct History {
    pub enabled: bool,
    pub context: RecordContext,
    pub max_entries: usize,
    pub entries: VecDeque<TraceEntry>,
}

impl Default for History {
    fn default() -> Self {
        History {
            enabled: false,
            context: RecordContext::All,
            max_entries: 0,
            entries: VecDeque::new(),
        }
    }
}

impl History {
    /// Turns recording on (keeping at most `max_entries`, at least 1) or off (clearing it).
    pub fn configure(&mut self, enabled: bool, context: RecordContext, max_entries: usize) {
        self.enabled = enabled;
        self.context = context;
        if !enabled {
            self.entries = VecDeque::new();
            self.max_entries = 0;
            return;
        }
        self.max_entries = max_entries.max(1);
        while self.entries.len() > self.max_entries {
            self.entries.pop_front();
        }
    }

    pub fn record(
        &mut self,
        action: TraceAction,
        addr: usize,
        size: usize,
        stream: StreamId,
        site: Option<Site>,
        category: Option<Category>,
    ) {
        if !self.enabled {
            return;
        }
        let site = if self.context >= RecordContext::Alloc {
            site
        } else {
            None
        };
        if self.entries.len() == self.max_entries {
            self.entries.pop_front();
        }
        self.entries.push_back(TraceEntry {
            action,
            addr,
            size,
            stream,
            time_us: now_us(),
            site,
            category,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_buffer_keeps_the_newest() {
        let mut h = History::default();
        h.record(TraceAction::Alloc, 1, 1, StreamId(0), None, None);
        assert!(h.entries.is_empty());
        h.configure(true, RecordContext::All, 3);
        for i in 0..5 {
            h.record(
                TraceAction::Alloc,
                i,
                1,
                StreamId(0),
                Some(Site::unknown("t")),
                None,
            );
        }
        let addrs: Vec<usize> = h.entries.iter().map(|e| e.addr).collect();
        assert_eq!(addrs, [2, 3, 4]);
        assert!(h.entries[0].site.is_some());
        h.configure(true, RecordContext::State, 2);
        assert_eq!(h.entries.len(), 2);
        h.record(
            TraceAction::FreeRequested,
            9,
            1,
            StreamId(0),
            Some(Site::unknown("t")),
            Some(Category::Gradient),
        );
        assert!(h.entries.back().unwrap().site.is_none());
        assert_eq!(h.entries.back().unwrap().category, Some(Category::Gradient));
        h.configure(false, RecordContext::All, 10);
        assert!(h.entries.is_empty());
        assert_eq!(TraceAction::SegmentUnmap.as_str(), "segment_unmap");
    }
}
