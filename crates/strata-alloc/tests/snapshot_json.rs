//! Snapshots: PyTorch's `_snapshot()` structure, JSON round trip, agreement with statistics.

use serde_json::Value;
use strata_alloc::caching::{BlockState, TraceAction};
use strata_alloc::{
    AllocatorConfig, CachingAllocator, DeviceAllocator, RecordContext, Site, Snapshot, StreamId,
    VirtualBacking,
};

const MIB: usize = 1 << 20;

fn at(line: u32, op: &'static str) -> Site {
    Site {
        file: "net.rs",
        line,
        column: 5,
        op,
        scope: "",
    }
}

fn busy_allocator(conf: &str) -> CachingAllocator<VirtualBacking> {
    let a = CachingAllocator::with_config(
        VirtualBacking::new(64 * MIB),
        AllocatorConfig::parse(conf).unwrap(),
    );
    a.record_memory_history(true, RecordContext::All, 1000);
    let x = a.allocate(100, &at(1, "zeros")).unwrap();
    let y = a.allocate(3 * MIB, &at(2, "linear")).unwrap();
    let z = a.allocate(700, &at(3, "relu")).unwrap();
    let _ = a.allocate(60 * MIB, &at(4, "huge")).unwrap_err();
    // SAFETY: `x` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(x) };
    let side = StreamId(3);
    a.backing().hold_stream(side);
    let w = a.allocate(5 * MIB, &at(5, "copy")).unwrap();
    a.record_stream(&w, side);
    // SAFETY: `w` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(w) };
    // y and z stay allocated (a Block has no destructor).
    let _ = (y, z);
    a
}

#[test]
fn snapshot_has_pytorchs_structure() {
    let a = busy_allocator("");
    let snap = a.snapshot();
    let v: Value = serde_json::from_str(&snap.to_json()).unwrap();
    let segs = v["segments"].as_array().unwrap();
    assert_eq!(segs.len(), 2);
    for s in segs {
        for key in [
            "device",
            "address",
            "total_size",
            "allocated_size",
            "active_size",
            "requested_size",
            "stream",
            "segment_type",
            "segment_pool_id",
            "is_expandable",
            "frames",
            "blocks",
        ] {
            assert!(s.get(key).is_some(), "segment lacks {key}: {s}");
        }
        let mut addr = s["address"].as_u64().unwrap();
        let mut total = 0;
        for b in s["blocks"].as_array().unwrap() {
            for key in ["address", "size", "requested_size", "state", "frames"] {
                assert!(b.get(key).is_some(), "block lacks {key}: {b}");
            }
            assert_eq!(
                b["address"].as_u64().unwrap(),
                addr,
                "blocks tile the segment"
            );
            addr += b["size"].as_u64().unwrap();
            total += b["size"].as_u64().unwrap();
            let state = b["state"].as_str().unwrap();
            assert!(["active_allocated", "active_pending_free", "inactive"].contains(&state));
        }
        assert_eq!(total, s["total_size"].as_u64().unwrap());
    }
    // Address order; the small segment holds z and a free piece; the large one y, the pending
    // block and the rest.
    let small = segs.iter().find(|s| s["segment_type"] == "small").unwrap();
    assert_eq!(small["total_size"], 2 * MIB as u64);
    assert_eq!(small["allocated_size"], 1024);
    assert_eq!(small["requested_size"], 700);
    let large = segs.iter().find(|s| s["segment_type"] == "large").unwrap();
    let states: Vec<&str> = large["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["state"].as_str().unwrap())
        .collect();
    assert_eq!(
        states,
        ["active_allocated", "active_pending_free", "inactive"]
    );
    assert_eq!(large["allocated_size"], 3 * MIB as u64);
    assert_eq!(large["active_size"], 8 * MIB as u64);
    let frame = &large["blocks"][0]["frames"][0];
    assert_eq!(frame["filename"], "net.rs");
    assert_eq!(frame["line"], 2);
    assert_eq!(frame["name"], "linear");

    let traces = v["device_traces"].as_array().unwrap();
    assert_eq!(traces.len(), 1);
    let trace = traces[0].as_array().unwrap();
    let actions: Vec<&str> = trace
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(
        actions,
        [
            "segment_alloc",
            "alloc",
            "segment_alloc",
            "alloc",
            "alloc",
            "oom",
            "free_requested",
            "free_completed",
            "alloc",
            "free_requested",
            "snapshot"
        ]
    );
    for e in trace {
        for key in ["action", "size", "stream", "frames", "time_us"] {
            assert!(e.get(key).is_some(), "trace entry lacks {key}: {e}");
        }
        if e["action"] == "oom" {
            assert!(e.get("addr").is_none());
            assert_eq!(e["device_free"], (64 - 22) * MIB as u64);
        } else {
            assert!(e.get("addr").is_some());
        }
    }
    assert_eq!(trace[1]["size"], 100);
    assert_eq!(trace[1]["frames"][0]["name"], "zeros");
    let settings = &v["allocator_settings"];
    assert_eq!(settings["max_split_size"], -1);
    assert_eq!(settings["expandable_segments"], false);
    assert_eq!(settings["roundup_power2_divisions"]["1024"], 0);
}

#[test]
fn snapshot_json_round_trips() {
    for conf in [
        "",
        "expandable_segments:True",
        "max_split_size_mb:20,roundup_power2_divisions:[2:4,>:8]",
    ] {
        let a = busy_allocator(conf);
        let snap = a.snapshot();
        let json = snap.to_json();
        let back = Snapshot::from_json(&json).unwrap();
        assert_eq!(back, snap, "{conf}");
        let pretty = Snapshot::from_json(&snap.to_json_pretty()).unwrap();
        assert_eq!(pretty, snap);
        assert_eq!(back.allocator_settings.conf, conf);
    }
}

#[test]
fn snapshot_agrees_with_statistics() {
    let a = busy_allocator("");
    let snap = a.snapshot();
    let st = a.memory_stats();
    assert_eq!(snap.total_reserved() as i64, st.reserved_bytes.all.current);
    assert_eq!(
        snap.total_allocated() as i64,
        st.allocated_bytes.all.current
    );
    let active: u64 = snap.segments.iter().map(|s| s.active_size).sum();
    assert_eq!(active as i64, st.active_bytes.all.current);
    let requested: u64 = snap.segments.iter().map(|s| s.requested_size).sum();
    assert_eq!(requested as i64, st.requested_bytes.all.current);
    let pending = snap
        .segments
        .iter()
        .flat_map(|s| &s.blocks)
        .filter(|b| b.state == BlockState::ActivePendingFree)
        .count();
    assert_eq!(pending, 1);
    // The snapshot entry records the active bytes.
    let last = snap.device_traces[0].last().unwrap();
    assert_eq!(last.action, TraceAction::Snapshot);
    assert_eq!(last.size as i64, st.active_bytes.all.current);
}

#[test]
fn expandable_snapshots_list_mapped_ranges() {
    let a = CachingAllocator::with_config(
        VirtualBacking::new(256 * MIB),
        AllocatorConfig::parse("expandable_segments:True").unwrap(),
    );
    let x = a.allocate(30 * MIB, &at(1, "a")).unwrap();
    let snap = a.snapshot();
    assert_eq!(snap.segments.len(), 1);
    assert!(snap.segments[0].is_expandable);
    assert_eq!(snap.segments[0].total_size, 40 * MIB as u64);
    // SAFETY: `x` came from `a`'s `allocate` and is not used again.
    unsafe { a.deallocate(x) };
}

#[test]
fn history_ring_buffer_and_context() {
    let a = CachingAllocator::new(VirtualBacking::new(64 * MIB));
    a.record_memory_history(true, RecordContext::Never, 3);
    for i in 0..5 {
        let b = a.allocate(100, &at(i, "t")).unwrap();
        // SAFETY: `b` came from `a`'s `allocate` and is not used again.
        unsafe { a.deallocate(b) };
    }
    let h = a.history();
    assert_eq!(h.len(), 3);
    assert!(h.iter().all(|e| e.site.is_none()));
    let snap = a.snapshot();
    assert!(snap.segments.iter().all(|s| s.frames.is_empty()));
    assert_eq!(snap.device_traces[0].len(), 3);
}
