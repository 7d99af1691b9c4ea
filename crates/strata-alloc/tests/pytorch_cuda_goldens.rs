//! PyTorch's real CUDA caching allocator, recorded on a GPU (`fixtures/pytorch-cuda/`, see
//! its README): every golden snapshot reads, and what it says of the allocator agrees with
//! the `torch.cuda.memory_stats()` PyTorch reported for the same moment.
//!
//! These tests need no GPU: the fixtures are committed files. Replaying them through
//! strata's caching allocator is the replay tests' work; this file checks that the reader
//! takes PyTorch's own CUDA snapshots as they are.

mod goldens;

use goldens::{golden, stat, PROGRAMS, SETTINGS};
use strata_alloc::caching::{BlockState, TraceAction};

#[test]
fn every_golden_reads_and_agrees_with_pytorchs_statistics() {
    for program in PROGRAMS {
        for setting in SETTINGS {
            let name = format!("{program}.{setting}");
            let (s, figures) = golden(program, setting);
            assert_eq!(figures["program"], program, "{name}");
            assert_eq!(figures["setting"], setting, "{name}");
            // The snapshot was taken when the program ended, with nothing allocated after it.
            assert_eq!(
                s.total_allocated(),
                stat(&figures, "allocated_bytes.all.current"),
                "{name}: allocated"
            );
            assert_eq!(
                s.total_reserved(),
                stat(&figures, "reserved_bytes.all.current"),
                "{name}: reserved"
            );
            let active: u64 = s
                .segments
                .iter()
                .flat_map(|g| &g.blocks)
                .filter(|b| b.state == BlockState::ActiveAllocated)
                .map(|b| b.size)
                .sum();
            assert_eq!(active, s.total_allocated(), "{name}: active blocks");
            let expandable = setting == "expandable";
            assert_eq!(
                s.allocator_settings.expandable_segments, expandable,
                "{name}"
            );
            assert!(!s.segments.is_empty(), "{name}: no segments");
            assert!(
                s.segments.iter().all(|g| g.is_expandable == expandable),
                "{name}: segment kinds"
            );
            // PyTorch counts only ordinary segments in `segment.all`; an expandable segment
            // is one growing mapping.
            let counted = if expandable {
                0
            } else {
                s.segments.len() as u64
            };
            assert_eq!(
                counted,
                stat(&figures, "segment.all.current"),
                "{name}: segments"
            );

            // The trace holds the whole program: `_dump_snapshot` adds one `snapshot` entry
            // to the count the program read from its own `_snapshot()` just before.
            let trace = &s.device_traces[0];
            let recorded = figures["trace_entries"].as_u64().expect("trace_entries");
            assert_eq!(trace.len() as u64, recorded + 1, "{name}: trace length");
            assert_eq!(trace.last().map(|e| e.action), Some(TraceAction::Snapshot));
            let segment_event = if expandable {
                TraceAction::SegmentMap
            } else {
                TraceAction::SegmentAlloc
            };
            assert!(
                trace.iter().any(|e| e.action == segment_event),
                "{name}: no {segment_event:?}"
            );
            let allocs = trace
                .iter()
                .filter(|e| e.action == TraceAction::Alloc)
                .count() as u64;
            assert_eq!(
                allocs,
                stat(&figures, "allocation.all.allocated"),
                "{name}: allocations"
            );
            let ooms = trace
                .iter()
                .filter(|e| e.action == TraceAction::Oom)
                .count() as u64;
            assert_eq!(ooms, stat(&figures, "num_ooms"), "{name}: ooms");
        }
    }
}

#[test]
fn the_oom_goldens_record_the_failure_under_a_one_gib_limit() {
    for setting in SETTINGS {
        let (s, figures) = golden("oom", setting);
        let limit = figures["limit_bytes"].as_u64().expect("limit_bytes");
        // The fraction of the card that makes 1 GiB, times the card, rounds down one byte.
        assert!(
            (1u64 << 30).abs_diff(limit) <= 1,
            "oom.{setting}: limit {limit}"
        );
        assert!(figures["oom_error"]
            .as_str()
            .is_some_and(|e| e.contains("out of memory")));
        let oom = s.device_traces[0]
            .iter()
            .find(|e| e.action == TraceAction::Oom)
            .expect("an oom entry");
        assert!(oom.device_free.is_some(), "oom.{setting}: device_free");
        assert!(s.total_reserved() <= limit, "oom.{setting}: over the limit");
    }
}

#[test]
fn the_mlp_goldens_keep_their_python_frames() {
    for setting in SETTINGS {
        let (s, _) = golden("mlp", setting);
        let framed = s.device_traces[0]
            .iter()
            .filter(|e| e.action == TraceAction::Alloc && !e.frames.is_empty())
            .count();
        assert!(framed > 0, "mlp.{setting}: no frames");
        let (stripped, _) = golden("gpt", setting);
        assert!(stripped.device_traces[0]
            .iter()
            .all(|e| e.frames.is_empty()));
    }
}
