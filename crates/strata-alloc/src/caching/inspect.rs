//! Looking inside: segment layouts, snapshots, and a full consistency check of the bookkeeping
//! against the statistics.

use std::collections::HashMap;

use super::blocks::BlockId;
use super::config::{Backend, PoolKind, MIN_BLOCK_SIZE, ROUNDUP_INTERVALS};
use super::history::{RecordContext, TraceAction};
use super::snapshot::{
    AllocatorSettings, BlockSnapshot, BlockState, Frame, Frames, SegmentSnapshot, Snapshot,
    TraceEntrySnapshot,
};
use super::state::State;
use super::stats::{MemoryStats, StatArray};
use crate::backing::StreamId;
use crate::{Category, Site};

/// One block of a [`SegmentLayout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BlockLayout {
    /// Offset from the segment's base address.
    pub offset: usize,
    /// Bytes.
    pub size: usize,
    /// The caller's bytes (0 unless active).
    pub requested: usize,
    /// `None` for an unmapped range of an expandable segment.
    pub state: Option<BlockState>,
    /// Who allocated it, while active.
    pub site: Option<Site>,
    /// What it holds, while active.
    pub category: Option<Category>,
}

/// A segment and the blocks tiling it, in address order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentLayout {
    /// Creation order, from 0: the tie-breaker of best fit.
    pub seq: u64,
    /// Base address.
    pub address: usize,
    /// Bytes (the whole reservation for an expandable segment).
    pub size: usize,
    /// Bytes backed by memory (`size` unless expandable).
    pub mapped_bytes: usize,
    /// The stream it serves.
    pub stream: StreamId,
    /// Its pool.
    pub pool: PoolKind,
    /// Whether it is an expandable segment.
    pub expandable: bool,
    /// The site whose request created it.
    pub site: Option<Site>,
    /// Its blocks.
    pub blocks: Vec<BlockLayout>,
}

impl State {
    fn block_state(&self, id: BlockId) -> Option<BlockState> {
        let b = &self.heap.blocks[id];
        if !b.mapped {
            None
        } else if b.allocated {
            Some(BlockState::ActiveAllocated)
        } else if b.active {
            Some(BlockState::ActivePendingFree)
        } else {
            Some(BlockState::Inactive)
        }
    }

    /// Every segment with its blocks, in creation order.
    pub fn layout(&self) -> Vec<SegmentLayout> {
        let by_seg = self.heap.segment_blocks();
        self.heap
            .segments
            .iter()
            .map(|(&seq, s)| SegmentLayout {
                seq,
                address: s.base,
                size: s.size,
                mapped_bytes: s.expandable.as_ref().map_or(s.size, |e| e.mapped_bytes),
                stream: s.stream,
                pool: s.pool,
                expandable: s.expandable.is_some(),
                site: s.site,
                blocks: by_seg
                    .get(&seq)
                    .map(Vec::as_slice)
                    .unwrap_or_default()
                    .iter()
                    .map(|&id| {
                        let b = &self.heap.blocks[id];
                        BlockLayout {
                            offset: b.addr - s.base,
                            size: b.size,
                            requested: b.requested,
                            state: self.block_state(id),
                            site: b.site,
                            category: b.allocated.then_some(b.category),
                        }
                    })
                    .collect(),
            })
            .collect()
    }

    fn frames(&self, site: Option<Site>) -> Vec<Frame> {
        if self.history.context == RecordContext::Never {
            Vec::new()
        } else {
            Frame::frames(site)
        }
    }

    /// A snapshot (recording a `snapshot` trace entry first).
    pub fn snapshot(&mut self, ties_by_address: bool) -> Snapshot {
        let active = self.stats.active_bytes.all.current.max(0) as usize;
        self.trace(TraceAction::Snapshot, 0, active, StreamId::DEFAULT, None);
        let mut segments = Vec::new();
        for seg in self.layout() {
            let mut runs: Vec<Vec<&BlockLayout>> = Vec::new();
            let mut cur: Vec<&BlockLayout> = Vec::new();
            for b in &seg.blocks {
                if b.state.is_some() {
                    cur.push(b);
                } else if !cur.is_empty() {
                    runs.push(std::mem::take(&mut cur));
                }
            }
            if !cur.is_empty() {
                runs.push(cur);
            }
            for run in runs {
                let mut s = SegmentSnapshot {
                    device: 0,
                    address: (seg.address + run[0].offset) as u64,
                    total_size: run.iter().map(|b| b.size as u64).sum(),
                    allocated_size: 0,
                    active_size: 0,
                    requested_size: 0,
                    stream: seg.stream.0,
                    segment_type: seg.pool,
                    segment_pool_id: (0, 0),
                    is_expandable: seg.expandable,
                    frames: self.frames(seg.site),
                    blocks: Vec::new(),
                };
                for b in run {
                    let state = b.state.expect("runs hold mapped blocks");
                    if state == BlockState::ActiveAllocated {
                        s.allocated_size += b.size as u64;
                    }
                    if state != BlockState::Inactive {
                        s.active_size += b.size as u64;
                        s.requested_size += b.requested as u64;
                    }
                    s.blocks.push(BlockSnapshot {
                        address: (seg.address + b.offset) as u64,
                        size: b.size as u64,
                        requested_size: b.requested as u64,
                        state,
                        frames: self.frames(b.site),
                        category: b.category,
                    });
                }
                segments.push(s);
            }
        }
        segments.sort_by_key(|s| s.address);
        // One stack per site, shared by its entries.
        let mut stacks: HashMap<Option<Site>, Frames> = HashMap::new();
        let trace = self
            .history
            .entries
            .iter()
            .map(|e| {
                let oom = e.action == TraceAction::Oom;
                let frames = stacks
                    .entry(e.site)
                    .or_insert_with(|| Frame::frames(e.site).into())
                    .clone();
                TraceEntrySnapshot {
                    action: e.action,
                    addr: (!oom).then_some(e.addr as u64),
                    device_free: oom.then_some(e.addr as u64),
                    size: e.size as u64,
                    stream: e.stream.0,
                    time_us: e.time_us,
                    frames,
                    category: e.category,
                }
            })
            .collect();
        let cfg = &self.cfg;
        let roundup = (0..ROUNDUP_INTERVALS)
            .map(|i| {
                (
                    (1u64 << i).to_string(),
                    cfg.roundup_power2_divisions[i] as u64,
                )
            })
            .collect();
        Snapshot {
            segments,
            device_traces: vec![trace],
            allocator_settings: AllocatorSettings {
                conf: cfg.raw.clone(),
                backend: match cfg.backend {
                    Backend::Native => "native".into(),
                    Backend::System => "system".into(),
                },
                max_split_size: self.stats.max_split_size,
                garbage_collection_threshold: cfg.garbage_collection_threshold,
                expandable_segments: cfg.expandable_segments,
                roundup_power2_divisions: roundup,
                memory_limit: self.limit.map(|l| l as u64),
                ties_by_address,
            },
        }
    }

    /// Checks every invariant of the bookkeeping; the first violation found is the error.
    pub fn check(&self) -> Result<(), String> {
        let h = &self.heap;
        // Segments do not overlap.
        let mut by_addr: Vec<(usize, usize)> =
            h.segments.values().map(|s| (s.base, s.size)).collect();
        by_addr.sort_unstable();
        for w in by_addr.windows(2) {
            if w[0].0 + w[0].1 > w[1].0 {
                return Err(format!(
                    "segments at {:#x} and {:#x} overlap",
                    w[0].0, w[1].0
                ));
            }
        }
        let mut expect = MemoryStats::default();
        let mut reserved = 0usize;
        let mut free_count = [0usize; 2];
        let mut unmapped_count = [0usize; 2];
        let by_seg = h.segment_blocks();
        if by_seg.keys().any(|k| !h.segments.contains_key(k)) {
            return Err("a block belongs to no segment".into());
        }
        for (&seq, seg) in &h.segments {
            let ids = by_seg.get(&seq).map(Vec::as_slice).unwrap_or_default();
            if ids.is_empty() {
                return Err(format!("segment {seq} has no blocks"));
            }
            let pool = seg.pool;
            let expandable = seg.expandable.is_some();
            let mut at = seg.base;
            let mut mapped = 0;
            for (i, &id) in ids.iter().enumerate() {
                let b = &h.blocks[id];
                let want_prev = i.checked_sub(1).map(|j| ids[j]);
                let want_next = ids.get(i + 1).copied();
                if b.addr != at {
                    return Err(format!("segment {seq}: gap or overlap at {:#x}", b.addr));
                }
                if b.prev != want_prev || b.next != want_next {
                    return Err(format!(
                        "segment {seq}: neighbour links broken at {:#x}",
                        b.addr
                    ));
                }
                if b.size == 0 || !b.size.is_multiple_of(MIN_BLOCK_SIZE) {
                    return Err(format!("block at {:#x} has size {}", b.addr, b.size));
                }
                if b.stream != seg.stream
                    || b.pool != pool
                    || b.seg_base != seg.base
                    || b.seg_expandable != expandable
                {
                    return Err(format!("block at {:#x} disagrees with its segment", b.addr));
                }
                if b.allocated && !b.active {
                    return Err(format!("allocated block at {:#x} is not active", b.addr));
                }
                if !b.mapped && (!expandable || b.active) {
                    return Err(format!("block at {:#x} is unmapped", b.addr));
                }
                if let Some(j) = want_prev {
                    let p = &h.blocks[j];
                    let both_free = b.is_free() && p.is_free();
                    let both_unmapped = !b.mapped && !p.mapped;
                    if (both_free && b.event_count == 0 && p.event_count == 0) || both_unmapped {
                        return Err(format!("free neighbours at {:#x} were not merged", b.addr));
                    }
                }
                at += b.size;
                if b.mapped {
                    mapped += b.size;
                }
                // Membership in the sets.
                let p = pool.index();
                if b.is_free() {
                    free_count[p] += 1;
                    if h.free[p].get(&h.free_key(id)) != Some(&id) {
                        return Err(format!("free block at {:#x} is not in its pool", b.addr));
                    }
                } else if !b.mapped {
                    unmapped_count[p] += 1;
                }
                if b.allocated {
                    if self.live.get(&b.addr) != Some(&id) {
                        return Err(format!("live block at {:#x} is not findable", b.addr));
                    }
                    expect.allocation.increase(pool, 1);
                    expect.allocated_bytes.increase(pool, b.size);
                    expect.category_bytes.get_mut(b.category).increase(b.size);
                    if b.oversize {
                        expect.oversize_allocations.increase(1);
                    }
                }
                if b.active {
                    expect.active.increase(pool, 1);
                    expect.active_bytes.increase(pool, b.size);
                    expect.requested_bytes.increase(pool, b.requested);
                } else if b.requested != 0 || b.site.is_some() {
                    return Err(format!("free block at {:#x} keeps a request", b.addr));
                }
                if b.is_free() && !expandable && ids.len() > 1 {
                    expect.inactive_split.increase(pool, 1);
                    expect.inactive_split_bytes.increase(pool, b.size);
                }
            }
            if at != seg.base + seg.size {
                return Err(format!("segment {seq}: blocks do not cover it"));
            }
            match &seg.expandable {
                Some(e) => {
                    if e.mapped_bytes != mapped || mapped % e.page != 0 {
                        return Err(format!("segment {seq}: mapped bytes disagree"));
                    }
                    reserved += mapped;
                    expect.reserved_bytes.increase(pool, mapped);
                }
                None => {
                    reserved += seg.size;
                    expect.segment.increase(pool, 1);
                    expect.reserved_bytes.increase(pool, seg.size);
                    if seg.oversize {
                        expect.oversize_segments.increase(1);
                    }
                }
            }
        }
        for p in 0..2 {
            if h.free[p].len() != free_count[p] {
                return Err("a pool holds blocks that are not free".into());
            }
            if h.unmapped[p].len() != unmapped_count[p] {
                return Err("the unmapped set disagrees with the blocks".into());
            }
        }
        if self.live.len() != expect.allocation.all.current as usize {
            return Err("the live-block map disagrees with the blocks".into());
        }
        if self.reserved != reserved {
            return Err(format!(
                "reserved is {} but the segments hold {reserved}",
                self.reserved
            ));
        }
        let st = &self.stats;
        let arrays: [(&str, &StatArray, &StatArray); 9] = [
            ("allocation", &st.allocation, &expect.allocation),
            ("segment", &st.segment, &expect.segment),
            ("active", &st.active, &expect.active),
            ("inactive_split", &st.inactive_split, &expect.inactive_split),
            (
                "allocated_bytes",
                &st.allocated_bytes,
                &expect.allocated_bytes,
            ),
            ("reserved_bytes", &st.reserved_bytes, &expect.reserved_bytes),
            ("active_bytes", &st.active_bytes, &expect.active_bytes),
            (
                "inactive_split_bytes",
                &st.inactive_split_bytes,
                &expect.inactive_split_bytes,
            ),
            (
                "requested_bytes",
                &st.requested_bytes,
                &expect.requested_bytes,
            ),
        ];
        for (name, have, want) in arrays {
            for (pool, h, w) in [
                ("all", have.all, want.all),
                ("small_pool", have.small_pool, want.small_pool),
                ("large_pool", have.large_pool, want.large_pool),
            ] {
                if h.current != w.current {
                    return Err(format!(
                        "{name}.{pool}.current is {} but the blocks say {}",
                        h.current, w.current
                    ));
                }
                if h.peak < h.current || h.allocated - h.freed != h.current {
                    return Err(format!("{name}.{pool} is inconsistent: {h:?}"));
                }
            }
        }
        for (name, h, w) in [
            (
                "oversize_allocations",
                st.oversize_allocations,
                expect.oversize_allocations,
            ),
            (
                "oversize_segments",
                st.oversize_segments,
                expect.oversize_segments,
            ),
        ] {
            if h.current != w.current || h.peak < h.current {
                return Err(format!("{name} is {h:?} but the blocks say {}", w.current));
            }
        }
        for c in crate::Category::ALL {
            let (h, w) = (st.category_bytes.get(c), expect.category_bytes.get(c));
            if h.current != w.current || h.peak < h.current || h.allocated - h.freed != h.current {
                return Err(format!(
                    "category_bytes.{c} is {h:?} but the blocks say {}",
                    w.current
                ));
            }
        }
        let pending: usize = self.events.values().map(|q| q.len()).sum();
        let counted: usize = h.blocks.iter().map(|(_, b)| b.event_count).sum();
        if pending != counted {
            return Err("outstanding events disagree with the blocks".into());
        }
        Ok(())
    }
}
