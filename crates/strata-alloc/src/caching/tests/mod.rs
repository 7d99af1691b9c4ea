//! Unit tests of the caching algorithm over `VirtualBacking` (the per-category statistics
//! are tested in `categories.rs`).

mod categories;

use super::*;
use crate::backing::VirtualBacking;

const MIB: usize = 1 << 20;

fn site() -> Site {
    Site::unknown("test")
}

fn alloc(cap: usize, conf: &str) -> CachingAllocator<VirtualBacking> {
    CachingAllocator::with_config(
        VirtualBacking::new(cap),
        AllocatorConfig::parse(conf).unwrap(),
    )
}

fn get<B: Backing>(a: &CachingAllocator<B>, n: usize) -> Block {
    let b = a.allocate(n, &site()).unwrap();
    a.check_consistency().unwrap();
    b
}

fn put<B: Backing>(a: &CachingAllocator<B>, b: Block) {
    // SAFETY: every caller passes a block that `get` or `allocate` took from this same
    // allocator, and drops it here.
    unsafe { a.deallocate(b) };
    a.check_consistency().unwrap();
}

fn layout<B: Backing>(a: &CachingAllocator<B>) -> Vec<Vec<(usize, Option<BlockState>)>> {
    a.segments()
        .iter()
        .map(|s| s.blocks.iter().map(|b| (b.size, b.state)).collect())
        .collect()
}

use BlockState::{ActiveAllocated as A, ActivePendingFree as P, Inactive as I};

#[test]
fn blocks_are_reused_best_fit() {
    let a = alloc(1 << 30, "");
    let x = get(&a, 1000); // 1024
    let y = get(&a, 4096);
    let z = get(&a, 2048);
    let w = get(&a, 100);
    put(&a, x);
    put(&a, z);
    // Free pieces: 1024 at 0, 2048 after y, and the tail. 1500 -> 1536 fits best in 2048.
    let v = get(&a, 1500);
    assert_eq!(
        layout(&a),
        vec![vec![
            (1024, Some(I)),
            (4096, Some(A)),
            (1536, Some(A)),
            (512, Some(I)),
            (512, Some(A)),
            (2 * MIB - 1024 - 4096 - 2048 - 512, Some(I)),
        ]]
    );
    for b in [y, v, w] {
        put(&a, b);
    }
    assert_eq!(layout(&a), vec![vec![(2 * MIB, Some(I))]]);
    let st = a.memory_stats();
    assert_eq!(st.inactive_split.all.current, 0);
    assert_eq!(st.inactive_split_bytes.all.current, 0);
    assert_eq!(st.num_device_alloc, 1);
}

#[test]
fn blocks_stay_on_their_stream() {
    let a = alloc(1 << 30, "");
    let s1 = StreamId(1);
    let b = a.allocate_on_stream(100, s1, &site()).unwrap();
    // SAFETY: `b` came from `a`'s `allocate_on_stream` and is not used again.
    unsafe { a.deallocate(b) };
    let c = get(&a, 100);
    assert_eq!(
        a.memory_reserved(),
        4 * MIB,
        "stream 0 cannot use stream 1's segment"
    );
    let segs = a.segments();
    assert_eq!(segs[0].stream, s1);
    assert_eq!(segs[1].stream, StreamId(0));
    let d = a.allocate_on_stream(100, s1, &site()).unwrap();
    assert_eq!(a.memory_reserved(), 4 * MIB);
    put(&a, c);
    put(&a, d);
}

#[test]
fn cross_stream_frees_wait_for_events() {
    let a = alloc(1 << 30, "");
    let side = StreamId(5);
    a.backing().hold_stream(side);
    let b = get(&a, 3 * MIB);
    assert!(a.record_stream(&b, side));
    assert!(
        a.record_stream(&b, StreamId::DEFAULT),
        "own stream is a no-op"
    );
    put(&a, b);
    let st = a.memory_stats();
    assert_eq!(st.allocated_bytes.all.current, 0);
    assert_eq!(st.active_bytes.all.current, 3 * MIB as i64);
    assert_eq!(st.requested_bytes.all.current, 3 * MIB as i64);
    assert_eq!(
        layout(&a),
        vec![vec![(3 * MIB, Some(P)), (17 * MIB, Some(I))]]
    );
    let snap = a.snapshot();
    assert_eq!(
        snap.segments[0].blocks[0].state,
        BlockState::ActivePendingFree
    );
    // The pending block is not reused while the side stream is busy.
    let c = get(&a, 3 * MIB);
    assert_eq!(layout(&a)[0][1], (3 * MIB, Some(A)));
    a.backing().release_stream(side);
    // The next malloc processes the completed event and merges.
    let d = get(&a, 512);
    assert_eq!(
        a.memory_stats().active_bytes.all.current,
        (3 * MIB + 512) as i64
    );
    put(&a, c);
    put(&a, d);
    // empty_cache waits for events (num_sync_all_streams) and releases everything.
    a.backing().hold_stream(side);
    let e = get(&a, 100);
    a.record_stream(&e, side);
    put(&a, e);
    a.empty_cache().unwrap();
    a.check_consistency().unwrap();
    assert_eq!(a.memory_reserved(), 0);
    assert!(a.memory_stats().num_sync_all_streams >= 1);
}

#[test]
fn expandable_segments_grow_and_shrink() {
    let a = alloc(1 << 30, "expandable_segments:True");
    let x = get(&a, 3 * MIB);
    assert_eq!(a.memory_reserved(), 20 * MIB, "one 20 MiB page");
    let y = get(&a, 15 * MIB);
    assert_eq!(a.memory_reserved(), 20 * MIB, "fits in the mapped page");
    let z = get(&a, 30 * MIB);
    assert_eq!(
        a.memory_reserved(),
        60 * MIB,
        "maps two more pages right after"
    );
    let segs = a.segments();
    assert_eq!(segs.len(), 1);
    assert!(segs[0].expandable);
    assert_eq!(segs[0].mapped_bytes, 60 * MIB);
    // 9/8 of the device (1152 MiB) rounded up to whole 20 MiB pages.
    assert_eq!(segs[0].size, 1160 * MIB);
    let st = a.memory_stats();
    assert_eq!(
        st.segment.all.current, 0,
        "expandable segments are not counted"
    );
    assert_eq!(st.num_device_alloc, 2);
    put(&a, y);
    a.empty_cache().unwrap();
    a.check_consistency().unwrap();
    assert_eq!(a.memory_reserved(), 60 * MIB, "no whole free page");
    put(&a, z);
    a.empty_cache().unwrap();
    a.check_consistency().unwrap();
    assert_eq!(
        a.memory_reserved(),
        20 * MIB,
        "the pages after x were unmapped"
    );
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 1);
    assert!(snap.segments[0].is_expandable);
    assert_eq!(snap.segments[0].total_size, 20 * MIB as u64);
    put(&a, x);
    a.empty_cache().unwrap();
    assert_eq!(a.memory_reserved(), 0);
    assert!(a.segments().is_empty(), "the reservation is given back");
    a.check_consistency().unwrap();
}

#[test]
fn expandable_small_pool_uses_2mib_pages_and_refills_holes() {
    let a = alloc(1 << 30, "expandable_segments:True");
    let blocks: Vec<Block> = (0..5).map(|_| get(&a, 900 << 10)).collect();
    // 5 x 900 KiB = 4.4 MiB -> three 2 MiB pages.
    assert_eq!(a.memory_reserved(), 6 * MIB);
    let mut it = blocks.into_iter();
    let first = it.next().unwrap();
    for b in it {
        put(&a, b);
    }
    a.empty_cache().unwrap();
    assert_eq!(a.memory_reserved(), 2 * MIB);
    let again = get(&a, MIB);
    assert_eq!(
        a.memory_reserved(),
        2 * MIB,
        "fits in the first page's free tail"
    );
    put(&a, again);
    put(&a, first);
    a.empty_cache().unwrap();
    assert_eq!(a.memory_reserved(), 0);
}

#[test]
fn expandable_respects_the_limit() {
    let a = alloc(1 << 30, "expandable_segments:True");
    a.set_memory_limit(Some(40 * MIB));
    let x = get(&a, 30 * MIB);
    assert_eq!(a.memory_reserved(), 40 * MIB);
    let err = a.allocate(12 * MIB, &site()).unwrap_err();
    assert!(matches!(err, AllocError::OutOfMemory { .. }));
    assert!(a.memory_reserved() <= 40 * MIB);
    a.check_consistency().unwrap();
    put(&a, x);
    let y = get(&a, 12 * MIB);
    put(&a, y);
}

#[test]
fn garbage_collection_frees_old_cached_segments() {
    let a = alloc(1 << 30, "garbage_collection_threshold:0.5");
    a.set_memory_limit(Some(100 * MIB));
    // Cache four 20 MiB segments (80 MiB reserved, above the 50 MiB threshold).
    let held: Vec<Block> = (0..4).map(|_| get(&a, 19 * MIB)).collect();
    for b in held {
        put(&a, b);
    }
    assert_eq!(a.memory_reserved(), 80 * MIB);
    // A miss triggers collection: old whole segments go until reserved is under 50 MiB.
    let big = get(&a, 40 * MIB);
    a.check_consistency().unwrap();
    assert!(a.memory_reserved() <= 100 * MIB);
    assert!(a.memory_stats().num_device_free >= 2);
    put(&a, big);
}

#[test]
fn gc_is_off_without_a_limit() {
    let a = alloc(1 << 30, "garbage_collection_threshold:0.5");
    let held: Vec<Block> = (0..4).map(|_| get(&a, 19 * MIB)).collect();
    for b in held {
        put(&a, b);
    }
    let big = get(&a, 40 * MIB);
    assert_eq!(a.memory_stats().num_device_free, 0);
    put(&a, big);
}

#[test]
fn system_backend_caches_nothing() {
    let a = alloc(1 << 30, "backend:system");
    let x = get(&a, 100);
    let y = get(&a, 3 * MIB);
    assert_eq!(a.memory_reserved(), 512 + 3 * MIB);
    put(&a, x);
    assert_eq!(a.memory_reserved(), 3 * MIB);
    put(&a, y);
    assert_eq!(a.memory_reserved(), 0);
    let st = a.memory_stats();
    assert_eq!(st.num_device_alloc, 2);
    assert_eq!(st.num_device_free, 2);
}

#[test]
fn roundup_power2_divisions_change_block_sizes() {
    let a = alloc(1 << 30, "roundup_power2_divisions:4");
    let b = get(&a, 5 * MIB + 1);
    assert_eq!(a.memory_allocated(), 6 * MIB);
    assert_eq!(
        a.memory_stats().requested_bytes.all.current,
        (5 * MIB + 1) as i64
    );
    put(&a, b);
}

#[test]
fn runtime_settings_switch_expandable_off() {
    let a = alloc(1 << 30, "expandable_segments:True");
    let x = get(&a, 3 * MIB);
    put(&a, x);
    a.set_allocator_settings("expandable_segments:False")
        .unwrap();
    let y = get(&a, 3 * MIB);
    let segs = a.segments();
    assert_eq!(segs.len(), 2, "a regular segment is created");
    assert!(!segs[1].expandable);
    put(&a, y);
    assert!(a.set_allocator_settings("bogus:1").is_err());
    a.empty_cache().unwrap();
    assert_eq!(a.memory_reserved(), 0);
}

#[test]
fn zero_and_absurd_sizes() {
    let a = alloc(1 << 30, "");
    let z = a.allocate(0, &site()).unwrap();
    assert_eq!(a.memory_allocated(), 0);
    assert_eq!(a.memory_reserved(), 0);
    put(&a, z);
    assert!(matches!(
        a.allocate(usize::MAX, &site()),
        Err(AllocError::Invalid(_))
    ));
    assert!(matches!(
        a.allocate(1 << 60, &site()),
        Err(AllocError::Invalid(_))
    ));
    assert_eq!(a.memory_stats().num_ooms, 0);
}

#[test]
#[should_panic(expected = "did not come from this caching allocator")]
fn foreign_blocks_are_refused() {
    let a = alloc(1 << 30, "");
    let host = crate::HostAllocator::new();
    let b = host.allocate(64, &site()).unwrap();
    // SAFETY: this breaks `deallocate`'s contract on purpose: the caching allocator looks the
    // address up among its own live blocks and panics before touching a block it did not hand
    // out, which is what the test asserts (the host block leaks).
    unsafe { a.deallocate(b) };
}

#[test]
fn history_records_every_action() {
    let a = alloc(30 * MIB, "");
    a.record_memory_history(true, RecordContext::All, 100);
    let s = Site {
        file: "model.rs",
        line: 7,
        column: 3,
        op: "zeros",
        scope: "",
    };
    let b = a.allocate(3 * MIB, &s).unwrap();
    let _ = a.allocate(25 * MIB, &s).unwrap_err();
    // SAFETY: `b` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(b) };
    a.empty_cache().unwrap();
    let _ = a.snapshot();
    let actions: Vec<TraceAction> = a.history().iter().map(|e| e.action).collect();
    use TraceAction::*;
    assert_eq!(
        actions,
        [
            SegmentAlloc,
            Alloc,
            Oom,
            FreeRequested,
            FreeCompleted,
            SegmentFree,
            Snapshot
        ]
    );
    let h = a.history();
    assert_eq!(h[1].size, 3 * MIB);
    assert_eq!(h[1].site, Some(s));
    assert_eq!(
        h[2].addr,
        30 * MIB - 20 * MIB,
        "oom records the device's free bytes"
    );
    assert_eq!(h[2].size, 25 * MIB);
    assert!(h.windows(2).all(|w| w[0].time_us <= w[1].time_us));
    a.record_memory_history(true, RecordContext::State, 100);
    let b = a.allocate(1, &s).unwrap();
    assert_eq!(a.history().last().unwrap().site, None);
    // SAFETY: `b` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(b) };
    a.record_memory_history(false, RecordContext::All, 0);
    assert!(a.history().is_empty());
}

#[test]
fn summary_and_sites() {
    let a = alloc(1 << 30, "");
    let s1 = Site {
        file: "a.rs",
        line: 1,
        column: 1,
        op: "ones",
        scope: "",
    };
    let s2 = Site {
        file: "b.rs",
        line: 2,
        column: 1,
        op: "matmul",
        scope: "",
    };
    let x: Vec<Block> = (0..3).map(|_| a.allocate(1000, &s1).unwrap()).collect();
    let y = a.allocate(5 * MIB, &s2).unwrap();
    let live = a.live_allocations();
    assert_eq!(live.len(), 2);
    assert_eq!(live[0].site, s2);
    assert_eq!(live[0].bytes, 5 * MIB);
    assert_eq!(live[1].count, 3);
    assert_eq!(live[1].bytes, 3 * 1024);
    assert_eq!(live[1].requested_bytes, 3000);
    let text = a.memory_summary(false);
    assert!(text.contains("strata caching allocator memory summary, device virtual"));
    assert!(
        text.contains("| Allocated memory      |   5123 KiB |"),
        "{text}"
    );
    assert!(
        text.contains("| Reserved memory       |  22528 KiB |"),
        "{text}"
    );
    assert!(
        text.contains("| Allocations           |       4    |"),
        "{text}"
    );
    assert!(text.lines().all(|l| l.chars().count() == 77));
    for b in x {
        put(&a, b);
    }
    put(&a, y);
    assert!(a.live_allocations().is_empty());
}

#[test]
fn dropping_the_allocator_releases_its_cache() {
    let backing = std::sync::Arc::new(VirtualBacking::new(1 << 30));
    let a = CachingAllocator::new(backing.clone());
    let b = get(&a, 100);
    let c = get(&a, 3 * MIB);
    put(&a, b);
    assert!(format!("{a:?}").contains("reserved"));
    assert_eq!(backing.mapped_bytes(), 22 * MIB);
    drop(a);
    // The small segment was free and goes back; the large one still holds a live block.
    assert_eq!(backing.mapped_bytes(), 20 * MIB);
    let _ = c; // still allocated: a Block has no destructor
}

/// Runs one random sequence of operations, rich in frees of the newest block and repeated
/// requests, on two allocators: `fast` as callers use it, and `plain` where an inspection after
/// every operation completes any deferred free, so every free and request there takes the
/// general path. Everything observable must agree.
fn same_with_and_without_reuse(conf: &str, limit: Option<usize>, seed: u64) {
    let fast = alloc(1 << 30, conf);
    let plain = alloc(1 << 30, conf);
    for a in [&fast, &plain] {
        a.set_memory_limit(limit);
        a.record_memory_history(true, RecordContext::All, 1 << 20);
    }
    let side = StreamId(7);
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let sizes = [
        100,
        512,
        4000,
        64 << 10,
        MIB - 512,
        MIB + 1,
        3 * MIB,
        4 * MIB,
        12 * MIB,
        19 * MIB + 600 * 1024,
        25 * MIB,
    ];
    let mut held: Vec<(Block, Block)> = Vec::new();
    let mut last = 512;
    for step in 0..4000 {
        let r = next();
        match r % 16 {
            0..=5 if held.len() < 40 => {
                let n = if r % 3 == 0 {
                    last
                } else {
                    sizes[(r >> 8) as usize % sizes.len()] + (r >> 20) as usize % 3 * 256
                };
                last = n;
                let stream = StreamId((r >> 40) % 2);
                let x = fast.allocate_on_stream(n, stream, &site());
                let y = plain.allocate_on_stream(n, stream, &site());
                let (x, y) = match (x, y) {
                    (Ok(x), Ok(y)) => (x, y),
                    (Err(_), Err(_)) => continue,
                    (x, y) => panic!("step {step}: {} vs {}", x.is_ok(), y.is_ok()),
                };
                assert_eq!(x.ptr(), y.ptr(), "step {step}");
                held.push((x, y));
            }
            0..=10 if !held.is_empty() => {
                let k = if r % 4 == 0 {
                    (r >> 8) as usize % held.len()
                } else {
                    held.len() - 1
                };
                let (x, y) = held.swap_remove(k);
                // SAFETY: `x` came from `fast` and `y` from `plain`, as a pair, and neither is
                // used again.
                unsafe {
                    fast.deallocate(x);
                    plain.deallocate(y);
                }
            }
            11 if !held.is_empty() => {
                let (x, y) = &held[(r >> 8) as usize % held.len()];
                assert_eq!(fast.record_stream(x, side), plain.record_stream(y, side));
            }
            12 => {
                for a in [&fast, &plain] {
                    if r % 2 == 0 {
                        a.backing().hold_stream(side);
                    } else {
                        a.backing().release_stream(side);
                    }
                }
            }
            13 if r % 8 == 0 => {
                fast.empty_cache().unwrap();
                plain.empty_cache().unwrap();
            }
            14 if r % 4 == 0 => {
                assert_eq!(layout(&fast), layout(&plain), "step {step}");
                fast.check_consistency().unwrap();
            }
            _ => {}
        }
        plain.check_consistency().unwrap();
        assert_eq!(fast.memory_stats(), plain.memory_stats(), "step {step}");
        assert_eq!(fast.memory_reserved(), plain.memory_reserved());
    }
    fast.check_consistency().unwrap();
    assert_eq!(fast.segments(), plain.segments());
    assert_eq!(fast.largest_free_block(), plain.largest_free_block());
    let strip = |h: Vec<TraceEntry>| -> Vec<_> {
        h.into_iter()
            .map(|e| (e.action, e.addr, e.size, e.stream, e.site))
            .collect()
    };
    assert_eq!(strip(fast.history()), strip(plain.history()));
    assert_eq!(fast.memory_stats(), plain.memory_stats());
}

#[test]
fn reusing_the_last_block_changes_nothing_observable() {
    for seed in 1..=6 {
        same_with_and_without_reuse("", None, seed);
        same_with_and_without_reuse("max_split_size_mb:20", None, seed);
        same_with_and_without_reuse("roundup_power2_divisions:4", None, seed);
        same_with_and_without_reuse("expandable_segments:True", None, seed);
        same_with_and_without_reuse("garbage_collection_threshold:0.5", Some(200 * MIB), seed);
        same_with_and_without_reuse("", Some(60 * MIB), seed);
    }
}

/// An allocation without the consistency check `get` makes (which would complete every
/// deferred step).
fn take<B: Backing>(a: &CachingAllocator<B>, n: usize) -> Block {
    a.allocate(n, &site()).unwrap()
}

/// A free without the consistency check `put` makes.
fn give<B: Backing>(a: &CachingAllocator<B>, b: Block) {
    // SAFETY: every caller passes a block that `take` got from this same allocator, and drops
    // it here.
    unsafe { a.deallocate(b) };
}

#[test]
fn uncounted_pairs_fold_into_exact_totals_and_peaks() {
    let a = alloc(1 << 30, "");
    let first = take(&a, 1000);
    give(&a, first);
    a.reset_peak_memory_stats();
    // Repeated requests rounding to 1024 bytes, each freed at once: none is counted until the
    // statistics are read.
    for n in [600, 1024, 700, 513] {
        let b = take(&a, n);
        give(&a, b);
    }
    let st = a.memory_stats();
    let k = 4;
    for s in [&st.allocated_bytes, &st.active_bytes] {
        for stat in [s.all, s.small_pool] {
            assert_eq!(
                stat,
                Stat {
                    current: 0,
                    peak: 1024,
                    allocated: (k + 1) * 1024,
                    freed: (k + 1) * 1024
                }
            );
        }
        assert_eq!(s.large_pool, Stat::default());
    }
    for s in [&st.allocation, &st.active] {
        assert_eq!(
            s.all,
            Stat {
                current: 0,
                peak: 1,
                allocated: k + 1,
                freed: k + 1
            }
        );
    }
    let requested = 1000 + 600 + 1024 + 700 + 513;
    assert_eq!(
        st.requested_bytes.all,
        Stat {
            current: 0,
            peak: 1024,
            allocated: requested,
            freed: requested
        }
    );
    // Each request split the whole 2 MiB segment, leaving its remainder non-releasable.
    let rem = 2 * MIB as i64 - 1024;
    assert_eq!(
        st.inactive_split_bytes.small_pool,
        Stat {
            current: 0,
            peak: rem,
            allocated: (k + 1) * rem,
            freed: (k + 1) * rem
        }
    );
    assert_eq!(
        st.inactive_split.small_pool,
        Stat {
            current: 0,
            peak: 1,
            allocated: k + 1,
            freed: k + 1
        }
    );

    // A peak reset between pairs keeps only the later ones' peaks.
    a.check_consistency().unwrap();
    a.reset_peak_memory_stats();
    assert_eq!(a.max_memory_allocated(), 0);
    let b = take(&a, 520);
    give(&a, b);
    a.reset_accumulated_memory_stats();
    let st = a.memory_stats();
    assert_eq!(st.requested_bytes.all.peak, 520);
    assert_eq!(st.requested_bytes.all.allocated, 0);
    assert_eq!(st.allocated_bytes.all.peak, 1024);

    // A request read while it is held, then freed.
    a.reset_peak_memory_stats();
    let b = take(&a, 900);
    assert_eq!(a.memory_allocated(), 1024);
    a.reset_peak_memory_stats();
    give(&a, b);
    let b = take(&a, 1000);
    give(&a, b);
    let st = a.memory_stats();
    assert_eq!(st.allocated_bytes.all.current, 0);
    assert_eq!(st.allocated_bytes.all.peak, 1024);
    assert_eq!(st.requested_bytes.all.peak, 1000);
    assert_eq!(st.requested_bytes.all.allocated, 900 + 1000);
    assert_eq!(st.requested_bytes.all.freed, 900 + 1000);
}

/// Runs one random sequence rich in repeated alloc+free pairs and reads or resets the
/// statistics at random moments on `lazy` (as callers use it, history off, so repeated pairs
/// go uncounted until a read), and compares them with `eager`, where every operation takes the
/// general path and counts at once (`largest_free_block` completes whatever `malloc` and
/// `free` defer; `check_consistency` would too, but it cannot tell whether totals that were
/// reset agree with the current values).
fn lazy_statistics_match_eager(conf: &str, seed: u64) {
    let lazy = alloc(1 << 30, conf);
    let eager = alloc(1 << 30, conf);
    let mut rng = seed | 1;
    let mut next = move || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let sizes = [512, 4096, 64 << 10, MIB, 3 * MIB, 12 * MIB, 25 * MIB];
    let mut held: Vec<(Block, Block)> = Vec::new();
    let mut reads = 0;
    for step in 0..3000 {
        let r = next();
        match r % 8 {
            // A burst of pairs of one size class, the requests varying below it, with reads
            // sometimes while a request is held.
            0..=3 => {
                let base = sizes[(r >> 8) as usize % sizes.len()];
                for i in 0..(r >> 16) % 24 {
                    let n = base - (next() as usize % 4) * 128 * (i as usize % 2);
                    let x = lazy.allocate(n, &site()).unwrap();
                    let y = eager.allocate(n, &site()).unwrap();
                    eager.largest_free_block();
                    assert_eq!(x.ptr(), y.ptr(), "step {step}");
                    if next() % 16 == 0 {
                        assert_eq!(lazy.memory_allocated(), eager.memory_allocated());
                        reads += 1;
                    }
                    if next() % 32 == 0 {
                        lazy.reset_peak_memory_stats();
                        eager.reset_peak_memory_stats();
                    }
                    give(&lazy, x);
                    give(&eager, y);
                    eager.largest_free_block();
                }
            }
            4 if held.len() < 12 => {
                let n = sizes[(r >> 8) as usize % sizes.len()] + (r >> 24) as usize % 2000;
                held.push((take(&lazy, n), take(&eager, n)));
                eager.largest_free_block();
            }
            5 if !held.is_empty() => {
                let (x, y) = held.swap_remove((r >> 8) as usize % held.len());
                give(&lazy, x);
                give(&eager, y);
                eager.largest_free_block();
            }
            6 => {
                reads += 1;
                match (r >> 8) % 6 {
                    0 => assert_eq!(lazy.memory_stats(), eager.memory_stats(), "step {step}"),
                    1 => assert_eq!(lazy.memory_stats_map(), eager.memory_stats_map()),
                    2 => assert_eq!(lazy.max_memory_allocated(), eager.max_memory_allocated()),
                    3 => assert_eq!(lazy.memory_summary(false), eager.memory_summary(false)),
                    4 => {
                        lazy.reset_peak_memory_stats();
                        eager.reset_peak_memory_stats();
                    }
                    _ => {
                        lazy.reset_accumulated_memory_stats();
                        eager.reset_accumulated_memory_stats();
                    }
                }
            }
            7 if r % 16 == 7 => {
                // An operation that completes everything deferred.
                assert_eq!(layout(&lazy), layout(&eager), "step {step}");
            }
            _ => {}
        }
    }
    assert!(reads > 100);
    assert_eq!(lazy.memory_stats(), eager.memory_stats());
    assert_eq!(lazy.segments(), eager.segments());
    assert_eq!(lazy.memory_stats(), eager.memory_stats());
}

#[test]
fn lazily_counted_pairs_read_as_eagerly_counted_ones() {
    for seed in 1..=4 {
        lazy_statistics_match_eager("", seed);
        lazy_statistics_match_eager("max_split_size_mb:20", seed);
        lazy_statistics_match_eager("roundup_power2_divisions:4", seed);
        lazy_statistics_match_eager("expandable_segments:True", seed);
    }
}
