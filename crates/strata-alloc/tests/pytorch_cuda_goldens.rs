//! PyTorch's real CUDA caching allocator, recorded on a GPU (`fixtures/pytorch-cuda/`, see
//! its README): every golden snapshot reads, and what it says of the allocator agrees with
//! the `torch.cuda.memory_stats()` PyTorch reported for the same moment.
//!
//! These tests need no GPU: the fixtures are committed files. Replaying them through
//! strata's caching allocator is the replay tests' work; this file checks that the reader
//! takes PyTorch's own CUDA snapshots as they are.

use std::path::{Path, PathBuf};

use serde_json::Value;
use strata_alloc::caching::{BlockState, TraceAction};
use strata_alloc::Snapshot;

const PROGRAMS: [&str; 6] = ["mixed", "frag", "streams", "mlp", "gpt", "oom"];
const SETTINGS: [&str; 2] = ["default", "expandable"];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pytorch-cuda")
}

/// The golden of `program` under `setting`: its snapshot and its JSON of figures.
fn golden(program: &str, setting: &str) -> (Snapshot, Value) {
    let pickle = fixtures().join(format!("{program}.{setting}.pickle"));
    let json = fixtures().join(format!("{program}.{setting}.json"));
    let (snapshot, notes) =
        Snapshot::load_with_notes(&pickle).unwrap_or_else(|e| panic!("{}: {e}", pickle.display()));
    assert!(
        notes.skipped_actions.is_empty(),
        "{program}.{setting}: actions strata does not know: {:?}",
        notes.skipped_actions
    );
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{}: {e}", json.display()));
    let figures: Value = serde_json::from_str(&text).expect("a golden's JSON parses");
    (snapshot, figures)
}

fn stat(figures: &Value, key: &str) -> u64 {
    figures["memory_stats"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("memory_stats has no {key}"))
}

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
