//! Statistics with PyTorch's semantics and key names.

use std::collections::BTreeMap;

use super::config::PoolKind;
use crate::Category;

/// One statistic: its current value, the highest value since the last peak reset, and the
/// totals added and removed since the last accumulated reset.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Stat {
    /// Current value.
    pub current: i64,
    /// Highest `current` since creation or `reset_peak_memory_stats`.
    pub peak: i64,
    /// Sum of all increases.
    pub allocated: i64,
    /// Sum of all decreases.
    pub freed: i64,
}

impl Stat {
    #[inline]
    pub(crate) fn increase(&mut self, n: usize) {
        let n = n as i64;
        self.current += n;
        self.peak = self.peak.max(self.current);
        self.allocated += n;
    }

    #[inline]
    pub(crate) fn decrease(&mut self, n: usize) {
        let n = n as i64;
        self.current -= n;
        self.freed += n;
    }

    /// Increases followed each at once by the decrease that undoes it, `total` in all, the
    /// largest `max`: `current` ends as it was and `peak` is at least `current + max`.
    #[inline]
    pub(crate) fn rise_and_fall(&mut self, total: u64, max: usize) {
        self.peak = self.peak.max(self.current + max as i64);
        self.allocated += total as i64;
        self.freed += total as i64;
    }

    /// Decreases followed each at once by the increase that undoes it, `total` in all:
    /// `current` ends as it was and, never above its peak, leaves `peak` unchanged.
    #[inline]
    pub(crate) fn fall_and_rise(&mut self, total: u64) {
        self.allocated += total as i64;
        self.freed += total as i64;
    }

    pub(crate) fn reset_peak(&mut self) {
        self.peak = self.current;
    }

    pub(crate) fn reset_accumulated(&mut self) {
        self.allocated = 0;
        self.freed = 0;
    }

    pub(crate) fn put(&self, map: &mut BTreeMap<String, i64>, prefix: &str) {
        map.insert(format!("{prefix}.current"), self.current);
        map.insert(format!("{prefix}.peak"), self.peak);
        map.insert(format!("{prefix}.allocated"), self.allocated);
        map.insert(format!("{prefix}.freed"), self.freed);
    }
}

/// A statistic kept for all memory and separately for each pool.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StatArray {
    /// Both pools together.
    pub all: Stat,
    /// The small pool (blocks of at most 1 MiB).
    pub small_pool: Stat,
    /// The large pool.
    pub large_pool: Stat,
}

impl StatArray {
    #[inline]
    pub(crate) fn increase(&mut self, pool: PoolKind, n: usize) {
        self.all.increase(n);
        self.pool_mut(pool).increase(n);
    }

    #[inline]
    pub(crate) fn decrease(&mut self, pool: PoolKind, n: usize) {
        self.all.decrease(n);
        self.pool_mut(pool).decrease(n);
    }

    /// [`Stat::rise_and_fall`] in `pool` and in all.
    #[inline]
    pub(crate) fn rise_and_fall(&mut self, pool: PoolKind, total: u64, max: usize) {
        self.all.rise_and_fall(total, max);
        self.pool_mut(pool).rise_and_fall(total, max);
    }

    /// [`Stat::fall_and_rise`] in `pool` and in all.
    #[inline]
    pub(crate) fn fall_and_rise(&mut self, pool: PoolKind, total: u64) {
        self.all.fall_and_rise(total);
        self.pool_mut(pool).fall_and_rise(total);
    }

    /// The statistic of one pool.
    pub fn pool(&self, pool: PoolKind) -> &Stat {
        match pool {
            PoolKind::Small => &self.small_pool,
            PoolKind::Large => &self.large_pool,
        }
    }

    #[inline]
    fn pool_mut(&mut self, pool: PoolKind) -> &mut Stat {
        match pool {
            PoolKind::Small => &mut self.small_pool,
            PoolKind::Large => &mut self.large_pool,
        }
    }

    fn each(&mut self, f: impl Fn(&mut Stat)) {
        f(&mut self.all);
        f(&mut self.small_pool);
        f(&mut self.large_pool);
    }

    fn put(&self, map: &mut BTreeMap<String, i64>, name: &str) {
        self.all.put(map, &format!("{name}.all"));
        self.small_pool.put(map, &format!("{name}.small_pool"));
        self.large_pool.put(map, &format!("{name}.large_pool"));
    }
}

/// Everything `torch.cuda.memory_stats()` reports, typed.
///
/// Byte statistics count rounded block sizes, except `requested_bytes` (the callers' sizes).
/// `allocated_*` drop when a block is freed; `active_*` and `requested_bytes` drop only when
/// the block is back in its pool (after other streams that used it are done with it).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MemoryStats {
    /// Blocks handed out (`allocation`).
    pub allocation: StatArray,
    /// Segments obtained from the backing, expandable ones excluded (`segment`).
    pub segment: StatArray,
    /// Blocks handed out or waiting for other streams (`active`).
    pub active: StatArray,
    /// Free blocks inside segments that are partly in use, which `empty_cache` cannot
    /// release (`inactive_split`, "non-releasable").
    pub inactive_split: StatArray,
    /// Bytes of blocks handed out (`allocated_bytes`).
    pub allocated_bytes: StatArray,
    /// Bytes held from the backing: segments plus mapped pages (`reserved_bytes`).
    pub reserved_bytes: StatArray,
    /// Bytes of active blocks (`active_bytes`).
    pub active_bytes: StatArray,
    /// Bytes of inactive split blocks (`inactive_split_bytes`).
    pub inactive_split_bytes: StatArray,
    /// Callers' un-rounded bytes of active blocks (`requested_bytes`).
    pub requested_bytes: StatArray,
    /// Blocks handed out of at least `max_split_size` bytes.
    pub oversize_allocations: Stat,
    /// Segments of at least `max_split_size` bytes.
    pub oversize_segments: Stat,
    /// Allocations that succeeded only after every cached segment was released.
    pub num_alloc_retries: u64,
    /// Out-of-memory errors reported.
    pub num_ooms: u64,
    /// Times every outstanding cross-stream event was waited for.
    pub num_sync_all_streams: u64,
    /// Segments allocated plus expandable page ranges mapped.
    pub num_device_alloc: u64,
    /// Segments freed plus expandable page ranges unmapped.
    pub num_device_free: u64,
    /// The configured `max_split_size` in bytes, -1 when unlimited.
    pub max_split_size: i64,
    /// Bytes of blocks handed out, by what they hold (`category_bytes.<category>`); the
    /// categories add up to `allocated_bytes.all`.
    #[serde(default)]
    pub category_bytes: CategoryBytes,
    /// Each category's bytes at the moment `allocated_bytes.all` last reached its peak (the
    /// mix of the peak, as the blocks were marked then), not each category's own peak.
    #[serde(default)]
    pub category_bytes_at_peak: CategoryMix,
    /// Bytes of files memory-mapped for tensors on this device (`mapped_bytes`): not
    /// allocated here, but held by the program all the same; released when the mapping
    /// drops. Counted apart from `allocated_bytes` and `reserved_bytes`.
    #[serde(default)]
    pub mapped_bytes: Stat,
}

impl MemoryStats {
    fn arrays_mut(&mut self) -> [&mut StatArray; 9] {
        [
            &mut self.allocation,
            &mut self.segment,
            &mut self.active,
            &mut self.inactive_split,
            &mut self.allocated_bytes,
            &mut self.reserved_bytes,
            &mut self.active_bytes,
            &mut self.inactive_split_bytes,
            &mut self.requested_bytes,
        ]
    }

    /// Sets every peak to its current value.
    pub fn reset_peak(&mut self) {
        for a in self.arrays_mut() {
            a.each(Stat::reset_peak);
        }
        self.oversize_allocations.reset_peak();
        self.oversize_segments.reset_peak();
        self.category_bytes.each_mut().for_each(Stat::reset_peak);
        self.mapped_bytes.reset_peak();
        self.take_peak_mix();
    }

    /// Bytes by category name at this allocator's peak, plus what `held` (another
    /// allocator's statistics: the memory that lived there through the same time) holds now:
    /// what a step measured on its own allocator was made of, with what it ran beside.
    pub fn categories_at_peak_with(&self, held: &MemoryStats) -> BTreeMap<String, usize> {
        Category::ALL
            .iter()
            .map(|&c| {
                let here = self.category_bytes_at_peak.get(c).max(0) as usize;
                let elsewhere = held.category_bytes.get(c).current.max(0) as usize;
                (c.as_str().to_owned(), here + elsewhere)
            })
            .collect()
    }

    /// Records the current category mix as the peak's mix.
    #[inline]
    pub(crate) fn take_peak_mix(&mut self) {
        for c in Category::ALL {
            self.category_bytes_at_peak.0[c.index()] = self.category_bytes.get(c).current;
        }
    }

    /// After an allocation: when allocated bytes stand at their peak, records the mix.
    #[inline]
    pub(crate) fn note_if_peak(&mut self) {
        let all = &self.allocated_bytes.all;
        if all.current == all.peak {
            self.take_peak_mix();
        }
    }

    /// After `set_category` moved `size` bytes from `old` to `new`: while allocated bytes still
    /// stand at their peak, the peak's mix follows the mark.
    #[inline]
    pub(crate) fn follow_mark_at_peak(&mut self, old: Category, new: Category, size: usize) {
        let all = &self.allocated_bytes.all;
        if all.current == all.peak {
            self.category_bytes_at_peak.0[old.index()] -= size as i64;
            self.category_bytes_at_peak.0[new.index()] += size as i64;
        }
    }

    /// Zeroes every `allocated`/`freed` total and the event counters.
    pub fn reset_accumulated(&mut self) {
        for a in self.arrays_mut() {
            a.each(Stat::reset_accumulated);
        }
        self.oversize_allocations.reset_accumulated();
        self.oversize_segments.reset_accumulated();
        self.category_bytes
            .each_mut()
            .for_each(Stat::reset_accumulated);
        self.mapped_bytes.reset_accumulated();
        self.num_alloc_retries = 0;
        self.num_ooms = 0;
        self.num_sync_all_streams = 0;
        self.num_device_alloc = 0;
        self.num_device_free = 0;
    }

    /// The statistics flattened to PyTorch's dotted keys (`allocated_bytes.all.current`,
    /// `reserved_bytes.large_pool.peak`, `num_ooms`, ...), sorted by key.
    pub fn to_map(&self) -> BTreeMap<String, i64> {
        let mut m = BTreeMap::new();
        self.allocation.put(&mut m, "allocation");
        self.segment.put(&mut m, "segment");
        self.active.put(&mut m, "active");
        self.inactive_split.put(&mut m, "inactive_split");
        self.allocated_bytes.put(&mut m, "allocated_bytes");
        self.reserved_bytes.put(&mut m, "reserved_bytes");
        self.active_bytes.put(&mut m, "active_bytes");
        self.inactive_split_bytes
            .put(&mut m, "inactive_split_bytes");
        self.requested_bytes.put(&mut m, "requested_bytes");
        self.oversize_allocations
            .put(&mut m, "oversize_allocations");
        self.oversize_segments.put(&mut m, "oversize_segments");
        m.insert("num_alloc_retries".into(), self.num_alloc_retries as i64);
        m.insert("num_ooms".into(), self.num_ooms as i64);
        m.insert(
            "num_sync_all_streams".into(),
            self.num_sync_all_streams as i64,
        );
        m.insert("num_device_alloc".into(), self.num_device_alloc as i64);
        m.insert("num_device_free".into(), self.num_device_free as i64);
        m.insert("max_split_size".into(), self.max_split_size);
        self.category_bytes.put(&mut m);
        self.mapped_bytes.put(&mut m, "mapped_bytes");
        m
    }
}

/// Bytes of live blocks per [`Category`] (block sizes, as `allocated_bytes` counts them).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CategoryBytes([Stat; 7]);

impl CategoryBytes {
    /// The statistic of one category.
    pub fn get(&self, c: Category) -> &Stat {
        &self.0[c.index()]
    }

    pub(crate) fn get_mut(&mut self, c: Category) -> &mut Stat {
        &mut self.0[c.index()]
    }

    pub(crate) fn each_mut(&mut self) -> impl Iterator<Item = &mut Stat> {
        self.0.iter_mut()
    }

    /// `category_bytes.<name>.{current,peak}` for every category.
    pub(crate) fn put(&self, map: &mut BTreeMap<String, i64>) {
        for c in Category::ALL {
            let s = self.get(c);
            map.insert(format!("category_bytes.{c}.current"), s.current);
            map.insert(format!("category_bytes.{c}.peak"), s.peak);
        }
    }
}

/// Bytes per [`Category`] at one moment (see [`MemoryStats::category_bytes_at_peak`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct CategoryMix([i64; 7]);

impl CategoryMix {
    /// The bytes of one category.
    pub fn get(&self, c: Category) -> i64 {
        self.0[c.index()]
    }

    pub(crate) fn add_temporary(&mut self, bytes: usize) {
        self.0[Category::Temporary.index()] += bytes as i64;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_semantics() {
        let mut s = StatArray::default();
        s.increase(PoolKind::Small, 10);
        s.increase(PoolKind::Large, 5);
        s.decrease(PoolKind::Small, 10);
        assert_eq!(
            s.all,
            Stat {
                current: 5,
                peak: 15,
                allocated: 15,
                freed: 10
            }
        );
        assert_eq!(s.small_pool.current, 0);
        assert_eq!(s.pool(PoolKind::Large).current, 5);
    }

    #[test]
    fn map_has_pytorch_keys() {
        let mut st = MemoryStats {
            max_split_size: -1,
            ..MemoryStats::default()
        };
        st.allocated_bytes.increase(PoolKind::Large, 7);
        st.reset_peak();
        let m = st.to_map();
        assert_eq!(m["allocated_bytes.all.current"], 7);
        assert_eq!(m["allocated_bytes.large_pool.peak"], 7);
        for k in [
            "allocation.all.current",
            "segment.small_pool.freed",
            "active.large_pool.allocated",
            "inactive_split.all.peak",
            "reserved_bytes.large_pool.peak",
            "active_bytes.all.current",
            "inactive_split_bytes.small_pool.current",
            "requested_bytes.all.allocated",
            "oversize_allocations.current",
            "oversize_segments.peak",
            "num_alloc_retries",
            "num_ooms",
            "num_sync_all_streams",
            "num_device_alloc",
            "num_device_free",
        ] {
            assert!(m.contains_key(k), "{k}");
        }
        assert_eq!(m["max_split_size"], -1);
        // 9 arrays x 3 pools x 4 + 2 x 4 + 6 counters + 7 categories x (current, peak)
        // + mapped bytes x 4.
        assert_eq!(m.len(), 9 * 12 + 8 + 6 + 7 * 2 + 4);
        assert_eq!(m["mapped_bytes.current"], 0);
        assert_eq!(m["mapped_bytes.peak"], 0);
        assert_eq!(m["category_bytes.optimizer_state.current"], 0);
        st.reset_accumulated();
        assert_eq!(st.allocated_bytes.all.allocated, 0);
        assert_eq!(st.allocated_bytes.all.current, 7);
    }
}
