//! Windows of a trace (`Snapshot::restrict`, `--from`/`--to`): the offline tools look at part
//! of a long run, by trace entry or by time.

use strata_alloc::offline::{
    explain, replay, Coverage, ExplainOptions, Moment, TracePoint, WindowError,
};
use strata_alloc::{CachingAllocator, DeviceAllocator, RecordContext, Site, VirtualBacking};

/// A run of three steps, each allocating 4 MiB of weights' gradients and freeing them, over
/// 10 MiB of weights held throughout.
fn run() -> strata_alloc::Snapshot {
    let a = CachingAllocator::new(VirtualBacking::new(1 << 30));
    a.record_memory_history(true, RecordContext::All, 10_000);
    let weights = a.allocate(10 << 20, &Site::unknown("weights")).unwrap();
    for _ in 0..3 {
        let g = a.allocate(4 << 20, &Site::unknown("grads")).unwrap();
        // SAFETY: `g` came from `a` and is not used again.
        unsafe { a.deallocate(g) };
    }
    let s = a.snapshot();
    // SAFETY: as above.
    unsafe { a.deallocate(weights) };
    s
}

#[test]
fn a_window_from_an_entry_replays_what_was_live_then_first() {
    let mut s = run();
    let whole = s.device_traces[0].len();
    let cuts = s.restrict(Some(TracePoint::Entry(3)), None).unwrap();
    assert_eq!((cuts[0].start, cuts[0].end), (3, whole));
    assert!(!s.segments.is_empty(), "an open end keeps the segments");
    let r = replay(&s, 0, "", None).unwrap();
    // The weights were allocated before the window: the replay allocates them first.
    assert_eq!(
        r.coverage,
        Coverage::Truncated {
            missing: 1,
            missing_bytes: 10 << 20
        }
    );
    assert_eq!(r.recorded.peak_allocated, 14 << 20);
}

#[test]
fn a_window_that_ends_early_leaves_out_the_end_of_run_state() {
    let mut s = run();
    s.restrict(None, Some(TracePoint::Entry(4))).unwrap();
    assert_eq!(s.device_traces[0].len(), 4);
    assert!(s.segments.is_empty());
    let e = explain(&s, &ExplainOptions::default());
    assert!(matches!(e.moment, Moment::Peak { .. }));
}

#[test]
fn windows_by_time_count_from_the_first_entry() {
    let mut s = run();
    let trace = &mut s.device_traces[0];
    let t0 = 1_000_000;
    for (i, e) in trace.iter_mut().enumerate() {
        e.time_us = t0 + 1000 * i as i64;
    }
    let cuts = s
        .restrict(
            Some(TracePoint::Micros(2500)),
            Some(TracePoint::Micros(5000)),
        )
        .unwrap();
    // Entries at 3 ms and 4 ms: the first at or after 2.5 ms, up to the first at 5 ms.
    assert_eq!((cuts[0].start, cuts[0].end), (3, 5));
}

#[test]
fn an_empty_window_is_an_error_that_names_the_trace() {
    let mut s = run();
    let whole = s.device_traces[0].len();
    let e = s
        .restrict(Some(TracePoint::Entry(5)), Some(TracePoint::Entry(2)))
        .unwrap_err();
    assert!(matches!(e, WindowError::Empty { entries, .. } if entries == whole));
    let text = e.to_string();
    assert!(text.contains("from entry 5 to entry 2"), "{text}");
    // Nothing was cut.
    assert_eq!(s.device_traces[0].len(), whole);
}
