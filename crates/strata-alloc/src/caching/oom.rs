//! The caching allocator's side of an out-of-memory: who holds the live memory, and the
//! report it returns (the report itself is [`OomReport`]).

use std::collections::HashMap;

use super::blocks::BlockInfo;
use super::history::TraceAction;
use super::state::State;
use crate::backing::{Backing, StreamId};
use crate::error::{OomReport, OOM_TOP_SITES};
use crate::site::{GroupUsage, Grouping, Site, SiteUsage};

impl State {
    /// Live blocks summed by `key` (blocks it gives no key are left out): bytes, the
    /// callers' bytes, and the number of blocks.
    fn live_totals<K: std::hash::Hash + Eq>(
        &self,
        key: impl Fn(&BlockInfo) -> Option<K>,
    ) -> HashMap<K, (usize, usize, usize)> {
        let mut by: HashMap<K, (usize, usize, usize)> = HashMap::new();
        for &id in self.live.values() {
            let b = &self.heap.blocks[id];
            let Some(k) = key(b) else { continue };
            let t = by.entry(k).or_default();
            t.0 += b.size;
            t.1 += b.requested;
            t.2 += 1;
        }
        by
    }

    /// Live bytes and blocks grouped as `grouping` says, largest first (ties by key).
    pub fn live_by(&self, grouping: Grouping) -> Vec<GroupUsage> {
        let totals = self.live_totals(|b| match (grouping, b.site) {
            (Grouping::Category, _) => Some(b.category.as_str().to_string()),
            (Grouping::Scope, Some(site)) => Some(site.scope.to_string()),
            (Grouping::Site, Some(site)) => Some(site.to_string()),
            (_, None) => None,
        });
        let mut v: Vec<GroupUsage> = totals
            .into_iter()
            .map(|(key, (bytes, requested_bytes, count))| GroupUsage {
                key,
                bytes,
                requested_bytes,
                count,
            })
            .collect();
        v.sort_by(|a, b| b.bytes.cmp(&a.bytes).then_with(|| a.key.cmp(&b.key)));
        v
    }

    /// Live bytes and blocks grouped by site, largest first.
    pub fn live_by_site(&self) -> Vec<SiteUsage> {
        let mut v: Vec<SiteUsage> = self
            .live_totals(|b| b.site)
            .into_iter()
            .map(|(site, (bytes, requested_bytes, count))| SiteUsage {
                site,
                bytes,
                requested_bytes,
                count,
            })
            .collect();
        v.sort_by(|a, b| {
            b.bytes
                .cmp(&a.bytes)
                .then(b.count.cmp(&a.count))
                .then_with(|| {
                    let key = |s: &Site| (s.file, s.line, s.column, s.op, s.scope);
                    key(&a.site).cmp(&key(&b.site))
                })
        });
        v
    }

    /// Counts and records the out-of-memory (with the request's site, as PyTorch records the
    /// failing request's stack) and builds its report.
    pub fn out_of_memory<B: Backing>(
        &mut self,
        b: &B,
        requested: usize,
        rounded: usize,
        segment_size: usize,
        stream: StreamId,
        site: Site,
    ) -> OomReport {
        let (device_free, device_total) = b.mem_info();
        self.stats.num_ooms += 1;
        self.trace(TraceAction::Oom, device_free, rounded, stream, Some(site));
        let allocated = self.stats.allocated_bytes.all.current.max(0) as usize;
        let mut top = self.live_by_site();
        top.truncate(OOM_TOP_SITES);
        let report = OomReport {
            device: b.device_name().to_string(),
            requested,
            rounded,
            segment_size,
            stream,
            allocated,
            reserved: self.reserved,
            reserved_unallocated: self.reserved.saturating_sub(allocated),
            limit: self.limit,
            device_free,
            device_total,
            largest_free_block: self.largest_free_block(),
            top_sites: top,
            expandable_segments: self.cfg.expandable_segments,
        };
        self.last_oom = Some(report.clone());
        report
    }
}
