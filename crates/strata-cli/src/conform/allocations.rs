//! `--allocations`: a program's allocator events, numbered by segment and offset rather than
//! by address, so that runs on different devices and processes compare equal.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};
use strata::alloc::caching::{TraceAction, TraceEntry};
use strata::alloc::{
    AllocatorConfig, CachingAllocator, DeviceAllocator, HostBacking, RecordContext, VirtualBacking,
};
use strata::core::routing::META_CAPACITY;
use strata::prelude::Device;

use super::PROGRAM_MEMORY_LIMIT;

/// Most history entries one program keeps (far more than any conformance program makes).
const MAX_EVENTS: usize = 1 << 22;

/// A fresh caching allocator with default settings for one program on `device`, recording
/// every event.
pub enum Recorder {
    /// Over host memory.
    Host(Arc<CachingAllocator<HostBacking>>),
    /// Over the virtual backing (the meta device).
    Meta(Arc<CachingAllocator<VirtualBacking>>),
}

impl Recorder {
    /// A recorder for a program whose tensors live on `device`.
    pub fn new(device: Device) -> Recorder {
        let config = AllocatorConfig::default();
        let r = if device == Device::Meta {
            Recorder::Meta(Arc::new(CachingAllocator::with_config(
                VirtualBacking::new(META_CAPACITY),
                config,
            )))
        } else {
            Recorder::Host(Arc::new(CachingAllocator::with_config(
                HostBacking::new(),
                config,
            )))
        };
        match &r {
            Recorder::Host(a) => start(a),
            Recorder::Meta(a) => start(a),
        }
        r
    }

    /// The allocator to install for the program.
    pub fn allocator(&self) -> Arc<dyn DeviceAllocator> {
        match self {
            Recorder::Host(a) => a.clone(),
            Recorder::Meta(a) => a.clone(),
        }
    }

    /// How many events have been recorded so far.
    pub fn len(&self) -> usize {
        match self {
            Recorder::Host(a) => a.history().len(),
            Recorder::Meta(a) => a.history().len(),
        }
    }

    /// The protocol's `allocations` record; `steps[i]` is the number of events recorded
    /// before step `i + 1` began (so events from `steps[i-1]` on belong to step `i`).
    pub fn report(&self, step_ends: &[usize]) -> Value {
        let (history, peak_allocated, peak_reserved, config) = match self {
            Recorder::Host(a) => (
                a.history(),
                a.max_memory_allocated(),
                a.max_memory_reserved(),
                a.config(),
            ),
            Recorder::Meta(a) => (
                a.history(),
                a.max_memory_allocated(),
                a.max_memory_reserved(),
                a.config(),
            ),
        };
        json!({
            "events": events(&history, step_ends, &config),
            "peak_allocated": peak_allocated,
            "peak_reserved": peak_reserved,
        })
    }
}

fn start<B: strata::alloc::Backing>(a: &CachingAllocator<B>) {
    a.set_memory_limit(Some(PROGRAM_MEMORY_LIMIT));
    a.record_memory_history(true, RecordContext::Never, MAX_EVENTS);
}

/// The events as `[step, action, size, segment, offset]`: segments numbered in order of
/// creation, offsets from the segment's start.
fn events(history: &[TraceEntry], step_ends: &[usize], config: &AllocatorConfig) -> Vec<Value> {
    // Live segments by start address: (number, size).
    let mut segments: BTreeMap<usize, (usize, usize)> = BTreeMap::new();
    let mut next_segment = 0;
    let mut out = Vec::new();
    for (i, e) in history.iter().enumerate() {
        let step = step_ends.iter().take_while(|&&end| end <= i).count();
        let action = match e.action {
            TraceAction::Alloc => "alloc",
            TraceAction::FreeCompleted => "free",
            TraceAction::SegmentAlloc => "segment_alloc",
            TraceAction::SegmentFree => "segment_free",
            TraceAction::SegmentMap => "segment_map",
            TraceAction::SegmentUnmap => "segment_unmap",
            // A free is reported once, when the block is back in its pool; out-of-memory
            // shows as the program's error, and snapshots are not allocator actions.
            TraceAction::FreeRequested | TraceAction::Oom | TraceAction::Snapshot => continue,
        };
        if e.action == TraceAction::SegmentAlloc {
            segments.insert(e.addr, (next_segment, e.size));
            next_segment += 1;
        }
        let (segment, offset) = segments
            .range(..=e.addr)
            .next_back()
            .filter(|(start, (_, size))| e.addr < *start + (*size).max(1))
            .map_or((-1, 0), |(start, (n, _))| (*n as i64, e.addr - start));
        let size = match e.action {
            TraceAction::Alloc | TraceAction::FreeCompleted => config.round_size(e.size),
            _ => e.size,
        };
        if e.action == TraceAction::SegmentFree {
            segments.remove(&e.addr);
        }
        out.push(json!([step, action, size, segment, offset]));
    }
    out
}
