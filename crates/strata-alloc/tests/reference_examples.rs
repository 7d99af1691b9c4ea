//! The worked examples of `shared/reference/pytorch-memory-spec.md` §1.3–1.7 (rounding, pools,
//! segment sizes, split rules, oversize rules), checked through the public API.

use strata_alloc::caching::{allocation_size, BlockState, PoolKind};
use strata_alloc::{
    AllocatorConfig, Block, CachingAllocator, DeviceAllocator, Site, VirtualBacking,
};

const MIB: usize = 1 << 20;

fn site() -> Site {
    Site::unknown("reference")
}

fn allocator(conf: &str) -> CachingAllocator<VirtualBacking> {
    CachingAllocator::with_config(
        VirtualBacking::new(1 << 30),
        AllocatorConfig::parse(conf).unwrap(),
    )
}

fn get(a: &CachingAllocator<VirtualBacking>, n: usize) -> Block {
    let b = a.allocate(n, &site()).unwrap();
    a.check_consistency().unwrap();
    b
}

fn put(a: &CachingAllocator<VirtualBacking>, b: Block) {
    // SAFETY: every caller passes a block that `get` took from this same allocator, and drops
    // it here.
    unsafe { a.deallocate(b) };
    a.check_consistency().unwrap();
}

/// (size, state) of every block, per segment in creation order.
fn blocks(a: &CachingAllocator<VirtualBacking>) -> Vec<Vec<(usize, BlockState)>> {
    a.segments()
        .iter()
        .map(|s| {
            s.blocks
                .iter()
                .map(|b| (b.size, b.state.expect("mapped")))
                .collect()
        })
        .collect()
}

use BlockState::{ActiveAllocated as A, Inactive as I};

#[test]
fn round_size_examples() {
    let c = AllocatorConfig::default();
    assert_eq!(c.round_size(1), 512);
    assert_eq!(c.round_size(100), 512);
    assert_eq!(c.round_size(511), 512);
    assert_eq!(c.round_size(512), 512);
    assert_eq!(c.round_size(513), 1024);
    assert_eq!(c.round_size(11 * MIB), 11 * MIB);
    let d4 = AllocatorConfig::parse("roundup_power2_divisions:4").unwrap();
    // Powers of two are kept; otherwise the next quarter step between two powers of two.
    assert_eq!(d4.round_size(4 * MIB), 4 * MIB);
    assert_eq!(d4.round_size(4 * MIB + 1), 5 * MIB);
    assert_eq!(d4.round_size(5000), 5120);
    // Only above 512 x divisions does the power-of-two rule apply.
    assert_eq!(d4.round_size(1200), 1536);
    // A division count of 1 is plain 512-byte rounding (PyTorch issue #161139).
    let d1 = AllocatorConfig::parse("roundup_power2_divisions:[>:1]").unwrap();
    assert_eq!(d1.round_size(5 * MIB + 1), 5 * MIB + 512);
}

#[test]
fn pools_and_segment_sizes() {
    assert_eq!(PoolKind::for_size(MIB), PoolKind::Small);
    assert_eq!(PoolKind::for_size(MIB + 512), PoolKind::Large);
    assert_eq!(allocation_size(512), 2 * MIB);
    assert_eq!(allocation_size(MIB), 2 * MIB);
    assert_eq!(allocation_size(3 * MIB), 20 * MIB);
    assert_eq!(allocation_size(10 * MIB - 512), 20 * MIB);
    assert_eq!(allocation_size(10 * MIB), 10 * MIB);
    assert_eq!(allocation_size(11 * MIB), 12 * MIB);
    assert_eq!(allocation_size(12 * MIB + 512), 14 * MIB);
}

#[test]
fn a_100_byte_request_takes_512_bytes_of_a_new_2mib_segment() {
    let a = allocator("");
    let b = get(&a, 100);
    assert_eq!(a.memory_allocated(), 512);
    assert_eq!(a.memory_reserved(), 2 * MIB);
    assert_eq!(blocks(&a), vec![vec![(512, A), (2 * MIB - 512, I)]]);
    assert_eq!(a.segments()[0].pool, PoolKind::Small);
    let st = a.memory_stats();
    assert_eq!(st.requested_bytes.all.current, 100);
    assert_eq!(st.inactive_split.small_pool.current, 1);
    assert_eq!(
        st.inactive_split_bytes.small_pool.current,
        (2 * MIB - 512) as i64
    );
    assert_eq!(st.segment.small_pool.current, 1);
    put(&a, b);
    assert_eq!(blocks(&a), vec![vec![(2 * MIB, I)]]);
    assert_eq!(a.memory_stats().inactive_split.all.current, 0);
}

#[test]
fn a_3mib_request_splits_a_20mib_segment() {
    let a = allocator("");
    let b = get(&a, 3 * MIB);
    assert_eq!(a.memory_reserved(), 20 * MIB);
    assert_eq!(blocks(&a), vec![vec![(3 * MIB, A), (17 * MIB, I)]]);
    let st = a.memory_stats();
    assert_eq!(
        st.inactive_split_bytes.large_pool.current,
        (17 * MIB) as i64
    );
    put(&a, b);
}

#[test]
fn an_11mib_request_gets_a_whole_12mib_segment() {
    let a = allocator("");
    let b = get(&a, 11 * MIB);
    assert_eq!(a.memory_reserved(), 12 * MIB);
    // The 1 MiB remainder is not more than 1 MiB: no split, the slack is allocated.
    assert_eq!(blocks(&a), vec![vec![(12 * MIB, A)]]);
    assert_eq!(a.memory_allocated(), 12 * MIB);
    assert_eq!(
        a.memory_stats().requested_bytes.all.current,
        (11 * MIB) as i64
    );
    assert_eq!(a.memory_stats().inactive_split.all.current, 0);
    put(&a, b);
}

#[test]
fn a_12mib_request_reuses_and_splits_a_cached_20mib_block() {
    let a = allocator("");
    let b = get(&a, 3 * MIB);
    put(&a, b);
    let c = get(&a, 12 * MIB);
    assert_eq!(a.memory_reserved(), 20 * MIB);
    assert_eq!(a.memory_stats().num_device_alloc, 1);
    assert_eq!(blocks(&a), vec![vec![(12 * MIB, A), (8 * MIB, I)]]);
    put(&a, c);
}

#[test]
fn a_1_5mib_request_takes_a_cached_2_25mib_block_whole() {
    let a = allocator("");
    let x = get(&a, 2 * MIB + MIB / 4);
    let y = get(&a, 20 * MIB - (2 * MIB + MIB / 4)); // the rest of the segment, exactly
    assert_eq!(blocks(&a).len(), 1);
    put(&a, x);
    let st = a.memory_stats();
    assert_eq!(st.inactive_split.large_pool.current, 1);
    let z = get(&a, MIB + MIB / 2);
    // 0.75 MiB remainder is not more than 1 MiB: handed out whole.
    assert_eq!(blocks(&a)[0][0], (2 * MIB + MIB / 4, A));
    assert_eq!(a.memory_allocated(), 20 * MIB);
    let st = a.memory_stats();
    assert_eq!(st.inactive_split.large_pool.current, 0);
    assert_eq!(st.inactive_split_bytes.large_pool.current, 0);
    put(&a, y);
    put(&a, z);
}

#[test]
fn carving_an_already_split_block_keeps_one_inactive_split() {
    let a = allocator("");
    let x = get(&a, 3 * MIB);
    let y = get(&a, 4 * MIB);
    let st = a.memory_stats();
    assert_eq!(st.inactive_split.large_pool.current, 1);
    assert_eq!(
        st.inactive_split_bytes.large_pool.current,
        (13 * MIB) as i64
    );
    put(&a, x);
    let st = a.memory_stats();
    assert_eq!(st.inactive_split.large_pool.current, 2);
    assert_eq!(
        st.inactive_split_bytes.large_pool.current,
        (16 * MIB) as i64
    );
    put(&a, y);
    let st = a.memory_stats();
    assert_eq!(st.inactive_split.large_pool.current, 0);
    assert_eq!(st.inactive_split_bytes.large_pool.current, 0);
}

#[test]
fn oversize_blocks_are_not_split_and_reused_only_within_20mib() {
    let a = allocator("max_split_size_mb:40");
    let big = get(&a, 50 * MIB);
    assert_eq!(a.memory_stats().oversize_allocations.current, 1);
    assert_eq!(a.memory_stats().oversize_segments.current, 1);
    put(&a, big);
    assert_eq!(a.memory_stats().oversize_allocations.current, 0);
    // A normal request never takes an oversize cached block.
    let small = get(&a, 3 * MIB);
    assert_eq!(a.memory_reserved(), 70 * MIB);
    // An oversize request takes it whole if it is within 20 MiB of the request.
    let over = get(&a, 45 * MIB);
    assert_eq!(a.memory_reserved(), 70 * MIB);
    assert_eq!(a.memory_allocated(), 3 * MIB + 50 * MIB);
    put(&a, over);
    // ... but not if it is 20 MiB or more larger.
    let far = get(&a, 30 * MIB);
    assert_eq!(a.memory_reserved(), 100 * MIB);
    put(&a, far);
    put(&a, small);
    assert_eq!(a.memory_stats_map()["max_split_size"], 40 * MIB as i64);
}

#[test]
fn oversize_cached_segments_are_released_first_under_pressure() {
    let a = CachingAllocator::with_config(
        VirtualBacking::new(100 * MIB),
        AllocatorConfig::parse("max_split_size_mb:40").unwrap(),
    );
    let keep = a.allocate(3 * MIB, &site()).unwrap();
    let big = a.allocate(70 * MIB, &site()).unwrap();
    // SAFETY: `big` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(big) };
    // 45 MiB cannot reuse the 70 MiB block (not within 20 MiB) and does not fit beside it:
    // the oversize block is released and the allocation succeeds without a full flush.
    let b = a.allocate(45 * MIB, &site()).unwrap();
    let st = a.memory_stats();
    assert_eq!(st.num_device_free, 1);
    assert_eq!(st.num_alloc_retries, 0);
    assert_eq!(a.memory_reserved(), 20 * MIB + 46 * MIB);
    a.check_consistency().unwrap();
    // SAFETY: `b` and `keep` came from `a`'s `allocate` and are not used again.
    unsafe {
        a.deallocate(b);
        a.deallocate(keep);
    }
}

#[test]
fn merging_frees_neighbours_immediately() {
    let a = allocator("");
    let v: Vec<Block> = (0..4).map(|_| get(&a, 1000)).collect();
    let mut it = v.into_iter();
    let (b0, b1, b2, b3) = (
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
        it.next().unwrap(),
    );
    put(&a, b1);
    put(&a, b3); // merges with the tail
    assert_eq!(
        blocks(&a),
        vec![vec![(1024, A), (1024, I), (1024, A), (2 * MIB - 3072, I)]]
    );
    put(&a, b2); // merges both ways
    assert_eq!(blocks(&a), vec![vec![(1024, A), (2 * MIB - 1024, I)]]);
    put(&a, b0);
    assert_eq!(blocks(&a), vec![vec![(2 * MIB, I)]]);
}

#[test]
fn empty_cache_releases_only_whole_segments() {
    let a = allocator("");
    let x = get(&a, 100);
    let y = get(&a, 100);
    let z = get(&a, 3 * MIB);
    put(&a, x);
    put(&a, z);
    a.empty_cache().unwrap();
    // The small segment still holds y: its free pieces are non-releasable.
    assert_eq!(a.memory_reserved(), 2 * MIB);
    let st = a.memory_stats();
    assert_eq!(
        st.inactive_split_bytes.all.current,
        (2 * MIB - 1024 + 512) as i64
    );
    assert_eq!(st.num_device_free, 1);
    assert_eq!(st.num_sync_all_streams, 1);
    put(&a, y);
    a.empty_cache().unwrap();
    assert_eq!(a.memory_reserved(), 0);
    assert_eq!(a.memory_stats().reserved_bytes.all.peak, (22 * MIB) as i64);
    assert_eq!(a.max_memory_reserved(), 22 * MIB);
    a.reset_peak_memory_stats();
    assert_eq!(a.max_memory_reserved(), 0);
    assert_eq!(a.max_memory_allocated(), 0);
}
