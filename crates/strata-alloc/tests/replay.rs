//! Replaying a recorded history: under the recorded settings it reproduces the run's peaks
//! exactly; under other settings and capacities it reports what they would change.

use strata_alloc::offline::{replay, Coverage, ReplayError};
use strata_alloc::{
    Backing, Block, CachingAllocator, DeviceAllocator, HostBacking, RecordContext, Site, Snapshot,
    VirtualBacking,
};

const MIB: usize = 1 << 20;

/// A fragmenting workload: blocks of many sizes, every other one kept for a while, with an
/// `empty_cache` halfway. Returns the snapshot and the allocator's peaks.
fn recorded_run(settings: &str, ring: usize) -> (Snapshot, (u64, u64, u64)) {
    let config = strata_alloc::AllocatorConfig::parse(settings).expect("settings");
    recorded_run_on(
        CachingAllocator::with_config(VirtualBacking::new(1 << 36), config),
        ring,
    )
}

/// The same workload on any backing.
fn recorded_run_on<B: Backing>(a: CachingAllocator<B>, ring: usize) -> (Snapshot, (u64, u64, u64)) {
    a.record_memory_history(true, RecordContext::All, ring);
    let site = Site::unknown("workload");
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut kept: Vec<Block> = Vec::new();
    for round in 0..400 {
        let size = match next() % 4 {
            0 => (next() % 4096) as usize + 1,
            1 => (next() % (MIB as u64)) as usize + 1,
            2 => (next() % (8 * MIB as u64)) as usize + MIB,
            _ => (next() % (30 * MIB as u64)) as usize + 10 * MIB,
        };
        let b = a.allocate(size, &site).expect("room");
        if round % 2 == 0 {
            kept.push(b);
        } else {
            // SAFETY: `b` came from `a` and is not used again.
            unsafe { a.deallocate(b) };
        }
        if kept.len() > 12 {
            let i = (next() % kept.len() as u64) as usize;
            // SAFETY: as above.
            unsafe { a.deallocate(kept.swap_remove(i)) };
        }
        if round == 200 {
            a.empty_cache().expect("release");
        }
    }
    let stats = a.memory_stats();
    let peaks = (
        stats.allocated_bytes.all.peak as u64,
        stats.reserved_bytes.all.peak as u64,
        stats.requested_bytes.all.peak as u64,
    );
    let snap = a.snapshot();
    for b in kept {
        // SAFETY: as above.
        unsafe { a.deallocate(b) };
    }
    (snap, peaks)
}

#[test]
fn a_run_over_host_memory_replays_exactly_whatever_its_addresses() {
    // Host memory comes from mmap, whose addresses usually fall as segments are added: strata
    // breaks ties by segment age there, the snapshot says so, and the replay does the same.
    let a = CachingAllocator::new(HostBacking::new());
    let (snap, (allocated, reserved, requested)) = recorded_run_on(a, 100_000);
    assert!(!snap.allocator_settings.ties_by_address);
    let r = replay(&snap, 0, "", None).expect("a replay");
    assert_eq!(
        (
            r.recorded.peak_allocated,
            r.recorded.peak_reserved,
            r.recorded.peak_requested
        ),
        (allocated, reserved, requested)
    );
}

#[test]
fn ties_between_equal_free_blocks_are_replayed_the_way_the_run_broke_them() {
    // Two 20 MiB segments, each holding a 9 MiB block and 11 MiB free: a 9 MiB request is a
    // tie. strata gives it to the older segment; had it gone to the newer one, freeing the
    // older one's block would leave that segment whole, and a 19 MiB request would reuse it.
    let a = CachingAllocator::new(HostBacking::new());
    a.record_memory_history(true, RecordContext::All, 1000);
    let site = Site::unknown("ties");
    let take = |mib: usize| a.allocate(mib * MIB, &site).expect("room");
    let (old, old_2, new, new_2) = (take(9), take(9), take(9), take(9));
    // SAFETY: the block came from `a` and is not used again (so for each below).
    unsafe { a.deallocate(old_2) };
    // SAFETY: as above.
    unsafe { a.deallocate(new_2) };
    let tie = take(9);
    // SAFETY: as above.
    unsafe { a.deallocate(old) };
    let whole = take(19);
    let reserved = a.memory_stats().reserved_bytes.all.peak as u64;
    assert_eq!(
        reserved,
        60 * MIB as u64,
        "the tie went to the older segment"
    );
    let mut snap = a.snapshot();
    for b in [new, tie, whole] {
        // SAFETY: as above.
        unsafe { a.deallocate(b) };
    }
    assert!(!snap.allocator_settings.ties_by_address);
    let r = replay(&snap, 0, "", None).expect("a replay");
    assert_eq!(r.recorded.peak_reserved, reserved);
    // Replayed by PyTorch's rule at the run's addresses, the same trace ends differently
    // whenever the newer segment got the lower address (as mmap usually gives).
    let segments: Vec<u64> = snap.device_traces[0]
        .iter()
        .filter(|e| e.action == strata_alloc::caching::TraceAction::SegmentAlloc)
        .filter_map(|e| e.addr)
        .collect();
    snap.allocator_settings.ties_by_address = true;
    let by_address = replay(&snap, 0, "", None).expect("a replay");
    let newer_is_lower = segments[1] < segments[0];
    assert_eq!(
        by_address.recorded.peak_reserved == 40 * MIB as u64,
        newer_is_lower,
        "{segments:x?}"
    );
}

#[test]
fn the_recorded_settings_reproduce_the_run_exactly() {
    for settings in ["", "expandable_segments:True", "max_split_size_mb:24"] {
        let (snap, (allocated, reserved, requested)) = recorded_run(settings, 100_000);
        let r = replay(&snap, 0, "", None).expect("a replay");
        assert_eq!(r.coverage, Coverage::Complete);
        assert_eq!(
            (
                r.recorded.peak_allocated,
                r.recorded.peak_reserved,
                r.recorded.peak_requested
            ),
            (allocated, reserved, requested),
            "settings `{settings}`"
        );
        assert_eq!(r.traced_peak_reserved, reserved, "settings `{settings}`");
        assert_eq!(r.traced_peak_requested, requested, "settings `{settings}`");
        assert!(r.recorded.ooms.is_empty());
    }
}

#[test]
fn expandable_segments_waste_less_on_a_fragmenting_run() {
    let (snap, _) = recorded_run("", 100_000);
    let r = replay(&snap, 0, "expandable_segments:True", None).expect("a replay");
    assert_eq!(r.what_if.settings, "expandable_segments:True");
    // The same requests: allocated bytes are rounded alike.
    assert_eq!(r.what_if.peak_requested, r.recorded.peak_requested);
    assert!(
        r.what_if.peak_reserved < r.recorded.peak_reserved,
        "{} against {}",
        r.what_if.peak_reserved,
        r.recorded.peak_reserved
    );
    assert!(r.what_if.reserved_per_allocated < r.recorded.reserved_per_allocated);
    assert!(r.recorded.reserved_per_allocated >= 1.0);
}

#[test]
fn a_smaller_device_shows_where_the_run_would_have_run_out_of_memory() {
    let (snap, (allocated, _, _)) = recorded_run("", 100_000);
    let capacity = allocated * 3 / 4;
    let r = replay(&snap, 0, "", Some(capacity)).expect("a replay");
    assert!(!r.what_if.ooms.is_empty());
    let first = &r.what_if.ooms[0];
    assert!(first.reserved <= capacity);
    assert!(first.site.contains("workload"), "{}", first.site);
    // Why: the new segment it needed, more than the device had left.
    assert!(first.segment >= first.bytes, "{first:?}");
    assert!(first.device_free < first.segment, "{first:?}");
    assert_eq!(first.device_free, capacity - first.reserved, "{first:?}");
    assert!(r.what_if.peak_reserved <= capacity);
    assert!(r.recorded.ooms.is_empty());
}

#[test]
fn a_ring_buffer_that_overflowed_is_said_to_be_truncated() {
    let (snap, (_, reserved, _)) = recorded_run("", 300);
    let r = replay(&snap, 0, "", None).expect("a replay");
    match r.coverage {
        Coverage::Truncated {
            missing,
            missing_bytes,
        } => {
            assert!(missing > 0 && missing_bytes > 0);
        }
        Coverage::Complete => panic!("300 entries cannot hold 400 rounds"),
    }
    assert_eq!(r.entries, 300);
    assert!(r.recorded.peak_reserved <= reserved * 2);
}

#[test]
fn a_snapshot_without_a_trace_says_what_it_can_still_answer() {
    let (mut snap, _) = recorded_run("", 100_000);
    snap.device_traces.clear();
    match replay(&snap, 0, "", None) {
        Err(e @ ReplayError::NoTrace { reserved, .. }) => {
            assert_eq!(reserved, snap.total_reserved());
            assert!(e.to_string().contains("record_memory_history"), "{e}");
        }
        other => panic!("expected NoTrace, got {other:?}"),
    }
    assert!(matches!(
        replay(&snap, 0, "expandable_segments:Maybe", None),
        Err(ReplayError::Settings { .. })
    ));
}
