//! Reading snapshots back: PyTorch's pickles at every protocol (fixtures written by CPython's
//! `pickle` with `scripts/make-snapshot-fixtures.py`, committed so that no Python is needed),
//! strata's own pickle (which round-trips exactly) and strata's JSON, and the errors for
//! pickles that are cut short, hold something else or hold Python objects.

use std::path::{Path, PathBuf};

use serde_json::Value;
use strata_alloc::caching::{BlockState, TraceAction};
use strata_alloc::offline::{ReadNotes, SnapshotFormat, UnpickleError};
use strata_alloc::{
    AllocatorConfig, CachingAllocator, Category, DeviceAllocator, RecordContext, Site, Snapshot,
    SnapshotReadError, StreamId, VirtualBacking,
};

const MIB: usize = 1 << 20;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/snapshots")
}

fn fixture(name: &str) -> Vec<u8> {
    let path = fixtures().join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn expected() -> Value {
    let text = String::from_utf8(fixture("expected.json")).expect("expected.json is UTF-8");
    serde_json::from_str(&text).expect("expected.json parses")
}

fn read(name: &str) -> (Snapshot, ReadNotes) {
    Snapshot::from_pickle_with_notes(&fixture(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn max_address(s: &Snapshot) -> u64 {
    s.segments
        .iter()
        .flat_map(|g| std::iter::once(g.address).chain(g.blocks.iter().map(|b| b.address)))
        .max()
        .unwrap_or(0)
}

/// Checks `s` against the figures expected.json holds for `name`.
fn check_figures(name: &str, s: &Snapshot, notes: &ReadNotes) {
    let all = expected();
    let want = &all[name];
    assert!(want.is_object(), "expected.json has no entry for {name}");
    let n = |k: &str| want[k].as_u64().unwrap_or_else(|| panic!("{name}: {k}"));
    assert_eq!(s.segments.len() as u64, n("segments"), "{name}: segments");
    assert_eq!(s.total_reserved(), n("total_size"), "{name}: total_size");
    assert_eq!(
        s.total_allocated(),
        n("allocated_size"),
        "{name}: allocated"
    );
    for (state, key) in [
        (BlockState::ActiveAllocated, "active_allocated"),
        (BlockState::ActivePendingFree, "active_pending_free"),
        (BlockState::Inactive, "inactive"),
    ] {
        let count = s
            .segments
            .iter()
            .flat_map(|g| &g.blocks)
            .filter(|b| b.state == state)
            .count() as u64;
        assert_eq!(Some(count), want["blocks"][key].as_u64(), "{name}: {key}");
    }
    let expandable = s.segments.iter().filter(|g| g.is_expandable).count() as u64;
    assert_eq!(expandable, n("expandable_segments"), "{name}");
    let frames: usize = s
        .segments
        .iter()
        .flat_map(|g| &g.blocks)
        .map(|b| b.frames.len())
        .sum();
    assert_eq!(frames as u64, n("block_frames"), "{name}: block frames");
    let lengths: Vec<u64> = s.device_traces.iter().map(|t| t.len() as u64).collect();
    let want_lengths: Vec<u64> = want["trace_lengths"]
        .as_array()
        .expect("trace_lengths")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(lengths, want_lengths, "{name}: trace lengths");
    assert_eq!(
        notes.skipped_trace_entries() as u64,
        n("skipped_trace_entries"),
        "{name}: skipped"
    );
    let trace = &s.device_traces[0];
    let first = trace.first().map(|e| e.action.as_str());
    let last = trace.last().map(|e| e.action.as_str());
    assert_eq!(first, want["first_action"].as_str(), "{name}: first action");
    assert_eq!(last, want["last_action"].as_str(), "{name}: last action");
    let ooms: Vec<u64> = trace
        .iter()
        .filter(|e| e.action == TraceAction::Oom)
        .map(|e| {
            assert_eq!(e.addr, None, "{name}: an oom entry has no addr");
            e.device_free.expect("an oom entry has device_free")
        })
        .collect();
    let want_ooms: Vec<u64> = want["oom_device_free"]
        .as_array()
        .expect("oom_device_free")
        .iter()
        .filter_map(Value::as_u64)
        .collect();
    assert_eq!(ooms, want_ooms, "{name}: oom entries");
    assert_eq!(
        max_address(s).to_string(),
        want["max_address"].as_str().expect("max_address"),
        "{name}: max address"
    );
    assert_eq!(
        s.allocator_settings.conf,
        want["settings_conf"].as_str().expect("settings_conf"),
        "{name}: settings"
    );
}

#[test]
fn every_protocol_reads_the_same_snapshot() {
    let (p4, _) = read("pytorch-p4.pickle");
    for protocol in 0..=5 {
        let name = format!("pytorch-p{protocol}.pickle");
        let (s, notes) = read(&name);
        check_figures(&name, &s, &notes);
        assert_eq!(notes.format, SnapshotFormat::Pickle);
        let announced = if protocol >= 2 { Some(protocol) } else { None };
        assert_eq!(notes.pickle_protocol, announced, "{name}");
        assert_eq!(s, p4, "{name} reads differently from protocol 4");
    }
}

#[test]
fn pytorch_fields_map_onto_the_snapshot() {
    let (s, _) = read("pytorch-p5.pickle");
    let seg0 = &s.segments[0];
    assert_eq!(seg0.address, 0x7F3A_2000_0000);
    assert_eq!(seg0.total_size, 20 * MIB as u64);
    assert_eq!(seg0.segment_pool_id, (0, 0));
    assert!(!seg0.is_expandable);
    assert_eq!(seg0.blocks[1].state, BlockState::ActivePendingFree);
    assert_eq!(seg0.blocks[0].requested_size, 8 * MIB as u64 - 100);
    let f = &seg0.blocks[0].frames[0];
    assert_eq!(
        (f.filename.as_str(), f.line, f.name.as_str()),
        ("/home/user/project/model.py", 41, "linear")
    );
    assert!(s.segments[1].is_expandable);
    // PyTorch's blocks carry no category.
    assert!(s
        .segments
        .iter()
        .flat_map(|g| &g.blocks)
        .all(|b| b.category.is_none()));
    let trace = &s.device_traces[0];
    let actions: Vec<&str> = trace.iter().map(|e| e.action.as_str()).collect();
    for action in [
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "oom",
        "snapshot",
    ] {
        assert!(actions.contains(&action), "no {action} entry");
    }
    assert_eq!(trace[0].time_us, 1_700_000_000_001_000);
    let settings = &s.allocator_settings;
    assert_eq!(settings.backend, "native", "PyTorch writes no backend");
    assert_eq!(settings.max_split_size, -1);
    assert!(settings.expandable_segments);
    assert_eq!(settings.roundup_power2_divisions.len(), 16);
    assert_eq!(settings.roundup_power2_divisions.get("1024"), Some(&4));
    assert_eq!(settings.memory_limit, None);
}

#[test]
fn unknown_keys_are_ignored_and_listed() {
    let (_, notes) = read("pytorch-p4.pickle");
    for key in [
        "external_annotations",
        "host_segments",
        "segments[].memory_pool_name",
        "segments[].blocks[].stream_uses",
        "segments[].blocks[].frames[].fx_node_op",
        "segments[].blocks[].frames[].fx_node_name",
        "device_traces[][].compile_context",
        "allocator_settings.last_allocator_settings",
    ] {
        assert!(
            notes.ignored_keys.contains(key),
            "{key} not noted: {:?}",
            notes.ignored_keys
        );
    }
    // PyTorch's own settings keys are known, not ignored.
    assert!(!notes
        .ignored_keys
        .iter()
        .any(|k| k.contains("pinned_num_register_threads")));
}

#[test]
fn annotate_entries_are_skipped_and_counted() {
    let (s, notes) = read("pytorch-p3.pickle");
    assert_eq!(notes.skipped_trace_entries(), 1);
    assert_eq!(notes.skipped_actions.get("annotate"), Some(&1));
    assert_eq!(s.device_traces[0].len(), 21);
    // The entries around it are kept in order.
    let actions: Vec<&str> = s.device_traces[0]
        .iter()
        .map(|e| e.action.as_str())
        .collect();
    assert_eq!(
        actions[15..18],
        ["segment_alloc", "segment_free", "free_requested"]
    );
}

#[test]
fn addresses_above_2_pow_63_read_exactly() {
    let name = "pytorch-high-addresses.pickle";
    let (s, notes) = read(name);
    check_figures(name, &s, &notes);
    let base = u64::MAX - (64 * MIB as u64) + 1;
    let seg = &s.segments[0];
    assert_eq!(seg.address, base);
    assert_eq!(seg.blocks[1].address, base + 512);
    assert_eq!(seg.stream, (1 << 63) + 12345);
    assert_eq!(seg.segment_pool_id, (1 << 63, 7));
    let trace = &s.device_traces[0];
    assert_eq!(trace[2].addr, Some(u64::MAX));
    // No allocator_settings: the defaults.
    assert_eq!(s.allocator_settings.backend, "native");
    assert_eq!(s.allocator_settings.conf, "");
}

#[test]
fn shared_frames_read_in_full_at_every_reference() {
    let name = "pytorch-shared-frames.pickle";
    let (s, notes) = read(name);
    check_figures(name, &s, &notes);
    for seg in &s.segments {
        assert_eq!(seg.frames.len(), 2);
        assert_eq!(seg.frames[0].name, "forward");
        for b in seg
            .blocks
            .iter()
            .filter(|b| b.state != BlockState::Inactive)
        {
            assert_eq!(b.frames, seg.frames);
        }
    }
    for e in s.device_traces[0].iter().filter(|e| !e.frames.is_empty()) {
        assert_eq!(e.frames.len(), 2);
        assert_eq!(e.frames[0], e.frames[1]);
        assert_eq!(e.frames[0].line, 12);
    }
}

#[test]
fn a_truncated_pickle_says_where_it_ends() {
    let data = fixture("truncated.pickle");
    let all = expected();
    assert_eq!(
        Some(data.len() as u64),
        all["truncated.pickle"]["length"].as_u64()
    );
    let e = Snapshot::from_pickle(&data).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, SnapshotReadError::Pickle(UnpickleError::Truncated { offset, .. }) if offset == data.len()),
        "{msg}"
    );
    assert!(msg.contains("truncated"), "{msg}");
    assert!(msg.contains(&format!("byte {}", data.len())), "{msg}");
    // Protocol 2 has no frames: cut anywhere, the error names what it was reading.
    let p2 = fixture("pytorch-p2.pickle");
    for cut in [1, 2, 3, 100, p2.len() / 2, p2.len() - 1] {
        let e = Snapshot::from_pickle(&p2[..cut]).unwrap_err();
        assert!(
            matches!(e, SnapshotReadError::Pickle(UnpickleError::Truncated { offset, .. }) if offset == cut),
            "cut at {cut}: {e}"
        );
    }
}

#[test]
fn a_foreign_pickle_is_not_a_snapshot() {
    let e = Snapshot::from_pickle(&fixture("foreign.pickle")).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, SnapshotReadError::NotASnapshot { .. }), "{msg}");
    assert!(
        msg.contains("expected a dict with `segments`") && msg.contains("found a list of 5 items"),
        "{msg}"
    );
    assert!(msg.contains("the first is an int (1)"), "{msg}");
}

#[test]
fn a_pickled_object_is_an_unsupported_opcode() {
    let data = fixture("object.pickle");
    let at = expected()["object.pickle"]["global_offset"]
        .as_u64()
        .expect("global_offset") as usize;
    let e = Snapshot::from_pickle(&data).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, SnapshotReadError::Pickle(UnpickleError::UnsupportedOpcode { opcode: b'c', name: Some("GLOBAL"), offset }) if offset == at),
        "{msg}"
    );
    assert!(
        msg.starts_with(&format!(
            "unsupported pickle opcode 0x63 ('c', GLOBAL) at byte {at}: a snapshot holds only \
             dicts, lists, strings and numbers"
        )),
        "{msg}"
    );
}

fn at(line: u32, op: &'static str, scope: &'static str) -> Site {
    Site {
        file: "examples/train.rs",
        line,
        column: 9,
        op,
        scope,
    }
}

/// An allocator whose history holds every action strata records, with blocks in every state
/// and categories on blocks and trace entries.
fn busy(conf: &str, limit: Option<usize>) -> CachingAllocator<VirtualBacking> {
    let a = CachingAllocator::with_config(
        VirtualBacking::new(1 << 30),
        AllocatorConfig::parse(conf).expect("valid settings"),
    );
    a.record_memory_history(true, RecordContext::All, 1000);
    // A small segment that is freed again: segment_alloc, alloc, free_requested,
    // free_completed, segment_free (or segment_map / segment_unmap when expandable).
    let t = a.allocate(1000, &Site::unknown("x")).unwrap();
    // SAFETY: `t` came from `a` and is not used again.
    unsafe { a.deallocate(t) };
    a.empty_cache().unwrap();
    let w = a
        .allocate(3 * MIB, &at(10, "linear", "model.layer1"))
        .unwrap();
    a.set_category(&w, Category::Parameter);
    let g = a.allocate(700, &at(11, "grad", "")).unwrap();
    a.set_category(&g, Category::Gradient);
    let act = a
        .allocate(5 * MIB, &at(12, "relu", "model.layer2"))
        .unwrap();
    a.set_category(&act, Category::Activation);
    // SAFETY: `act` came from `a` and is not used again.
    unsafe { a.deallocate(act) };
    // A block freed while a side stream still uses it: pending free.
    let side = StreamId(3);
    a.backing().hold_stream(side);
    let p = a.allocate(2 * MIB, &at(13, "copy", "")).unwrap();
    a.set_category(&p, Category::Input);
    a.record_stream(&p, side);
    // SAFETY: `p` came from `a` and is not used again.
    unsafe { a.deallocate(p) };
    if let Some(limit) = limit {
        a.set_memory_limit(Some(limit));
        let _ = a.allocate(limit + 1, &at(14, "huge", "")).unwrap_err();
    }
    let _ = (w, g);
    a
}

#[test]
fn strata_pickles_round_trip() {
    let mut seen = std::collections::BTreeSet::new();
    let mut memory_limits = Vec::new();
    for (conf, limit) in [
        ("", None),
        ("", Some(64 * MIB)),
        (
            "expandable_segments:True,garbage_collection_threshold:0.6",
            Some(200 * MIB),
        ),
        (
            "max_split_size_mb:40,roundup_power2_divisions:[256:4,>:8]",
            None,
        ),
    ] {
        let a = busy(conf, limit);
        let snap = a.snapshot();
        let bytes = snap.to_pickle();
        let (back, notes) =
            Snapshot::from_pickle_with_notes(&bytes).unwrap_or_else(|e| panic!("{conf:?}: {e}"));
        assert_eq!(back, snap, "{conf:?}");
        assert_eq!(notes.pickle_protocol, Some(4));
        assert_eq!(notes.skipped_trace_entries(), 0);
        assert!(notes.ignored_keys.is_empty(), "{:?}", notes.ignored_keys);
        assert!(notes.unknown_categories.is_empty());
        for e in &snap.device_traces[0] {
            seen.insert(e.action.as_str());
        }
        for b in snap.segments.iter().flat_map(|g| &g.blocks) {
            seen.insert(match b.state {
                BlockState::ActiveAllocated => "block active_allocated",
                BlockState::ActivePendingFree => "block active_pending_free",
                BlockState::Inactive => "block inactive",
            });
            if b.category.is_some() {
                seen.insert("block category");
            }
            if b.frames.iter().any(|f| f.filename == "<scope>") {
                seen.insert("scope frame");
            }
        }
        if snap.device_traces[0].iter().any(|e| e.category.is_some()) {
            seen.insert("trace category");
        }
        memory_limits.push(snap.allocator_settings.memory_limit);
    }
    for want in [
        "alloc",
        "free_requested",
        "free_completed",
        "segment_alloc",
        "segment_free",
        "segment_map",
        "segment_unmap",
        "oom",
        "snapshot",
        "block active_allocated",
        "block active_pending_free",
        "block inactive",
        "block category",
        "trace category",
        "scope frame",
    ] {
        assert!(
            seen.contains(want),
            "the round trips never had {want}: {seen:?}"
        );
    }
    assert!(memory_limits.contains(&None));
    assert!(memory_limits.contains(&Some(64 * MIB as u64)));
}

#[test]
fn every_prefix_of_a_strata_pickle_is_an_error() {
    let a = busy("expandable_segments:True", Some(100 * MIB));
    let bytes = a.snapshot().to_pickle();
    assert!(Snapshot::from_pickle(&bytes).is_ok());
    for n in 0..bytes.len() {
        let r = std::panic::catch_unwind(|| Snapshot::from_pickle(&bytes[..n]));
        match r {
            Ok(Err(_)) => {}
            Ok(Ok(_)) => panic!(
                "a prefix of {n} of {} bytes read as a snapshot",
                bytes.len()
            ),
            Err(_) => panic!("reading a prefix of {n} bytes panicked"),
        }
    }
}

#[test]
fn corrupted_bytes_never_panic() {
    let bytes = fixture("pytorch-p4.pickle");
    // Deterministic pseudo-random single-byte corruptions (xorshift).
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    for _ in 0..3000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let mut d = bytes.clone();
        let i = (x % d.len() as u64) as usize;
        d[i] = (x >> 32) as u8;
        let r = std::panic::catch_unwind(|| Snapshot::from_pickle(&d));
        assert!(r.is_ok(), "corrupting byte {i} panicked");
    }
}

fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "strata-snapshot-read-{test}-{}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("temp dir");
    dir
}

#[test]
fn load_tells_pickle_from_json() {
    let dir = temp_dir("load");
    let a = busy("", Some(64 * MIB));
    let snap = a.snapshot();
    let pickle = dir.join("s.pickle");
    let json = dir.join("s.json");
    snap.save_pickle(&pickle).unwrap();
    snap.save_json(&json).unwrap();
    let (from_pickle, notes) = Snapshot::load_with_notes(&pickle).unwrap();
    assert_eq!(notes.format, SnapshotFormat::Pickle);
    assert_eq!(from_pickle, snap);
    let (from_json, notes) = Snapshot::load_with_notes(&json).unwrap();
    assert_eq!(notes.format, SnapshotFormat::Json);
    assert_eq!(from_json, snap);
    assert_eq!(Snapshot::load(&json).unwrap(), snap);
    // PyTorch's fixtures, protocol 0 (no 0x80) included.
    for p in 0..=5 {
        let s = Snapshot::load(fixtures().join(format!("pytorch-p{p}.pickle"))).unwrap();
        assert_eq!(s.segments.len(), 2);
    }
    // Errors: a missing file, bad JSON.
    let missing = dir.join("missing.pickle");
    let e = Snapshot::load(&missing).unwrap_err();
    assert!(matches!(e, SnapshotReadError::Io { .. }), "{e}");
    assert!(e.to_string().contains("missing.pickle"), "{e}");
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "  {\"segments\": 3}").unwrap();
    let e = Snapshot::load(&bad).unwrap_err();
    assert!(matches!(e, SnapshotReadError::Json { .. }), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_snapshot_larger_than_the_read_window_reads_back_whole_and_shares_its_stacks() {
    // Over 64 MiB, a file is read through a mapping whose pages go back to the kernel behind
    // the reader; what it reads must be what was written, entry for entry.
    use strata_alloc::caching::{Frame, TraceAction, TraceEntrySnapshot};
    let a = CachingAllocator::new(VirtualBacking::new(1 << 30));
    let mut snap = a.snapshot();
    let stacks: Vec<Vec<Frame>> = (0..7)
        .map(|s| {
            (0..12)
                .map(|f| Frame {
                    filename: format!("/home/user/project/models/transformer/layer{s}.py"),
                    line: 10 + f,
                    name: format!("forward_{f}"),
                })
                .collect()
        })
        .collect();
    let entries = 120_000;
    let trace: Vec<TraceEntrySnapshot> = (0..entries)
        .map(|i| TraceEntrySnapshot {
            action: if i % 2 == 0 {
                TraceAction::Alloc
            } else {
                TraceAction::FreeCompleted
            },
            addr: Some(0x7f00_0000_0000 + (i as u64 / 2) * 4096),
            device_free: None,
            size: 4096,
            stream: 0,
            time_us: 1_700_000_000_000_000 + i as i64,
            frames: stacks[i % stacks.len()].clone().into(),
            category: None,
        })
        .collect();
    snap.device_traces = vec![trace];
    let path = std::env::temp_dir().join(format!("strata-large-{}.pickle", std::process::id()));
    snap.save_pickle(&path).expect("written");
    let size = std::fs::metadata(&path).unwrap().len();
    assert!(
        size > 64 << 20,
        "the file must exceed the read window: {size} bytes"
    );
    let read = Snapshot::load(&path).expect("read back");
    std::fs::remove_file(&path).ok();
    assert_eq!(read, snap);
    // Equal stacks are one allocation, however many entries hold them.
    let t = &read.device_traces[0];
    assert!(std::sync::Arc::ptr_eq(&t[0].frames, &t[7].frames));
}
