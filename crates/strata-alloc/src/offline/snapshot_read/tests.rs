//! Unit tests of the mapping from pickled values to snapshots.

use super::*;

fn d(entries: Vec<(&str, PyValue)>) -> PyValue {
    PyValue::Dict(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

fn s(v: &str) -> PyValue {
    PyValue::Str(v.to_owned())
}

fn read(v: &PyValue) -> Result<(Snapshot, ReadNotes)> {
    let mut notes = ReadNotes::default();
    snapshot(v, &mut notes, &mut TraceTable::default()).map(|s| (s, notes))
}

fn block(state: &str) -> PyValue {
    d(vec![("size", PyValue::Int(512)), ("state", s(state))])
}

#[test]
fn minimal_segments_take_defaults() {
    let seg = d(vec![
        ("address", PyValue::Int(4096)),
        ("total_size", PyValue::Int(1536)),
        (
            "blocks",
            PyValue::List(vec![
                block("active_allocated"),
                block("active_awaiting_free"),
                block("inactive"),
            ]),
        ),
    ]);
    let (snap, notes) = read(&d(vec![("segments", PyValue::List(vec![seg.clone()]))]))
        .unwrap_or_else(|e| panic!("{e}"));
    let sg = &snap.segments[0];
    assert_eq!(sg.segment_type, PoolKind::Small);
    assert_eq!(sg.segment_pool_id, (0, 0));
    let addrs: Vec<u64> = sg.blocks.iter().map(|b| b.address).collect();
    assert_eq!(addrs, [4096, 4608, 5120]);
    assert_eq!(sg.blocks[1].state, BlockState::ActivePendingFree);
    assert_eq!(
        (sg.allocated_size, sg.active_size, sg.requested_size),
        (512, 1024, 1024)
    );
    assert_eq!(snap.allocator_settings, default_settings());
    assert!(snap.device_traces.is_empty());
    assert_eq!(notes, ReadNotes::default());
    // memory_snapshot(): a bare list of segments.
    let (bare, _) = read(&PyValue::List(vec![seg])).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(bare.segments, snap.segments);
}

#[test]
fn field_errors_name_the_path() {
    let seg = |size: PyValue| {
        d(vec![(
            "segments",
            PyValue::List(vec![d(vec![
                ("address", PyValue::Int(0)),
                ("total_size", PyValue::Int(512)),
                (
                    "blocks",
                    PyValue::List(vec![d(vec![("size", size), ("state", s("inactive"))])]),
                ),
            ])]),
        )])
    };
    let msg = read(&seg(s("big"))).unwrap_err().to_string();
    assert!(
        msg.starts_with("`segments[0].blocks[0].size`: expected an int, found a str (\"big\")"),
        "{msg}"
    );
    let msg = read(&seg(PyValue::Int(-1))).unwrap_err().to_string();
    assert!(
        msg.contains("expected an int in 0..2**64, found an int (-1)"),
        "{msg}"
    );
    let msg = read(&d(vec![(
        "segments",
        PyValue::List(vec![d(vec![("total_size", PyValue::Int(1))])]),
    )]))
    .unwrap_err()
    .to_string();
    assert!(msg.contains("`segments[0].address` is missing"), "{msg}");
    let e = read(&d(vec![("device_traces", PyValue::List(vec![]))])).unwrap_err();
    assert!(matches!(e, SnapshotReadError::NotASnapshot { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("found a dict with keys device_traces"),
        "{e}"
    );
}

#[test]
fn unknown_actions_and_categories_are_noted() {
    let entry = |action: &str, category: Option<&str>| {
        let mut e = vec![
            ("action", s(action)),
            ("addr", PyValue::Int(1)),
            ("size", PyValue::Int(2)),
        ];
        if let Some(c) = category {
            e.push(("category", s(c)));
        }
        d(e)
    };
    let v = d(vec![
        ("segments", PyValue::List(vec![])),
        (
            "device_traces",
            PyValue::List(vec![PyValue::List(vec![
                entry("alloc", Some("autograd_detail")),
                entry("annotate", None),
                entry("free_requested", Some("gradient")),
                entry("user_defined", None),
            ])]),
        ),
        ("host_segments", PyValue::List(vec![])),
    ]);
    let (snap, notes) = read(&v).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(snap.device_traces[0].len(), 2);
    assert_eq!(snap.device_traces[0][0].category, None);
    assert_eq!(snap.device_traces[0][1].category, Some(Category::Gradient));
    assert_eq!(notes.skipped_trace_entries(), 2);
    assert_eq!(notes.skipped_actions.get("annotate"), Some(&1));
    assert_eq!(notes.unknown_categories.get("autograd_detail"), Some(&1));
    assert!(notes.ignored_keys.contains("host_segments"));
}
