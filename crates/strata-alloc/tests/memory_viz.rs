//! Snapshots pickled for PyTorch's memory tools: `python -m torch.cuda._memory_viz stats` and
//! `trace`, `trace_plot` and `segment_plot` read strata's pickle, and the figures they print
//! are strata's own statistics.
//!
//! The Python used is `$STRATA_TEST_PYTHON`, else `python3`. Without Python, or (for the
//! tests that need it) without PyTorch, a test prints why it skips and passes.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use strata_alloc::caching::TraceAction;
use strata_alloc::{
    Block, CachingAllocator, DeviceAllocator, HostBacking, RecordContext, Site, Snapshot, StreamId,
    VirtualBacking,
};

const MIB: usize = 1 << 20;

fn at(line: u32, op: &'static str) -> Site {
    Site {
        file: "examples/train.rs",
        line,
        column: 9,
        op,
        scope: "",
    }
}

fn python() -> String {
    std::env::var("STRATA_TEST_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// Runs `python args...`; `None` when the interpreter cannot be started.
fn run_python(args: &[&str]) -> Option<Output> {
    Command::new(python()).args(args).output().ok()
}

/// Whether Python runs at all; prints the skip message when not.
fn have_python(test: &str) -> bool {
    match run_python(&["-c", "import pickle, json"]) {
        Some(o) if o.status.success() => true,
        _ => {
            eprintln!(
                "skipping {test}: no usable Python at `{}` (set STRATA_TEST_PYTHON to a \
                 python3 executable)",
                python()
            );
            false
        }
    }
}

/// Whether `import torch` works; prints the skip message when not.
fn have_torch(test: &str) -> bool {
    match run_python(&["-c", "import torch.cuda._memory_viz"]) {
        Some(o) if o.status.success() => true,
        other => {
            let why = other
                .map(|o| String::from_utf8_lossy(&o.stderr).trim().to_string())
                .unwrap_or_else(|| "the interpreter could not be started".into());
            let why = why.lines().last().unwrap_or("").to_string();
            eprintln!(
                "skipping {test}: `import torch` fails under `{}` ({why}); install torch with \
                 `{} -m pip install torch --index-url https://download.pytorch.org/whl/cpu` \
                 or point STRATA_TEST_PYTHON at a Python that has it",
                python(),
                python()
            );
            false
        }
    }
}

/// Runs Python and returns its stdout, failing the test (with stderr) if it fails.
fn python_ok(args: &[&str]) -> String {
    let out = run_python(args).expect("python started before");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "python {args:?} failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    stdout
}

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memory_viz-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn s(p: &Path) -> &str {
    p.to_str().expect("scratch paths are UTF-8")
}

/// PyTorch's `_memory_viz._format_size`: `f"{num:3.1f}{unit}B"` in steps of 1024.
fn format_size(n: usize) -> String {
    let mut num = n as f64;
    for unit in ["", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi"] {
        if num.abs() < 1024.0 {
            return format!("{num:3.1}{unit}B");
        }
        num /= 1024.0;
    }
    format!("{num:.1}YiB")
}

/// The value after `key: ` on the line that starts with `key:`.
fn field<'a>(text: &'a str, key: &str) -> &'a str {
    let prefix = format!("{key}: ");
    text.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .unwrap_or_else(|| panic!("no `{key}:` line in\n{text}"))
}

/// `"123B"` -> 123 (sizes printed with `_format_size` replaced by exact byte counts).
fn exact(v: &str) -> usize {
    v.trim()
        .strip_suffix('B')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("not an exact size: {v:?}"))
}

/// What a `_memory_viz.trace` printout says happened.
#[derive(Debug, Default)]
struct Replay {
    entries: usize,
    allocs: usize,
    frees_requested: usize,
    frees_completed: usize,
    segment_allocs: usize,
    segment_frees: usize,
    ooms: usize,
    /// Bytes allocated minus bytes whose free completed (exact printouts only).
    in_use: i64,
    /// Bytes of `cudaMalloc` minus bytes of `cudaFree` (exact printouts only).
    reserved: i64,
    total_mem: String,
}

/// Replays the lines of `_memory_viz.trace` output. With `exact`, sizes are byte counts.
fn replay(text: &str, exact_sizes: bool) -> Replay {
    let mut r = Replay::default();
    let size = |v: &str| -> i64 {
        if exact_sizes {
            exact(v) as i64
        } else {
            0
        }
    };
    for line in text.lines() {
        if let Some(n) = line.strip_suffix(" entries") {
            r.entries = n.parse().unwrap();
        } else if let Some(rest) = line.strip_prefix("TOTAL MEM: ") {
            r.total_mem = rest.to_string();
        } else if let Some(rest) = line.strip_prefix("# free completed for ") {
            // `# free completed for NAME SIZE`
            r.frees_completed += 1;
            r.in_use -= size(rest.rsplit(' ').next().unwrap());
        } else if let Some(rest) = line.strip_prefix("del ") {
            // `del NAME # SIZE`
            assert!(rest.contains(" # "), "{line}");
            r.frees_requested += 1;
        } else if let Some(rest) = line.strip_prefix("cudaFree(") {
            // `cudaFree(NAME) # SIZE`
            r.segment_frees += 1;
            r.reserved -= size(rest.split(" # ").nth(1).unwrap());
        } else if line.starts_with("raise OutOfMemoryError") {
            r.ooms += 1;
        } else if let Some((_, rhs)) = line.split_once(" = ") {
            if let Some(args) = rhs.strip_prefix("cudaMalloc(") {
                // `NAME = cudaMalloc(ADDR, SIZE)`
                r.segment_allocs += 1;
                let sz = args.trim_end_matches(')').split(", ").nth(1).unwrap();
                r.reserved += size(sz);
            } else if let Some((_, slice)) = rhs.split_once('[') {
                // `NAME = SEG[OFFSET:SIZE]`
                r.allocs += 1;
                let sz = slice.trim_end_matches(']').split(':').nth(1).unwrap();
                r.in_use += size(sz);
            }
        }
    }
    r
}

/// A small workload over host memory, leaving blocks live in both pools, a freed split block
/// in each, a segment released by `empty_cache` and one out-of-memory. Returns the allocator
/// and its live blocks.
fn workload() -> (CachingAllocator<HostBacking>, Vec<Block>) {
    let a = CachingAllocator::new(HostBacking::with_capacity(64 * MIB));
    a.record_memory_history(true, RecordContext::All, 10_000);
    let mut live = Vec::new();
    // Small pool: one 2 MiB segment; the middle block is freed and stays a cached split.
    live.push(a.allocate(4096, &at(10, "zeros")).unwrap());
    let mid = a.allocate(1000, &at(11, "arange")).unwrap();
    live.push(a.allocate(1536, &at(12, "relu")).unwrap());
    // SAFETY: `mid` came from `a` and is not used again.
    unsafe { a.deallocate(mid) };
    // Large pool: a 20 MiB segment split three ways, and a 14 MiB segment of its own.
    let first = a.allocate(3 * MIB, &at(20, "linear")).unwrap();
    live.push(a.allocate(5 * MIB, &at(21, "matmul")).unwrap());
    let big = a.allocate(12 * MIB + 100, &at(22, "cat")).unwrap();
    // SAFETY: both came from `a` and are not used again.
    unsafe {
        a.deallocate(first);
        a.deallocate(big);
    }
    // The 14 MiB segment is wholly free: give it back.
    a.empty_cache().unwrap();
    // More than the backing's capacity can hold.
    let err = a.allocate(60 * MIB, &at(30, "huge")).unwrap_err();
    assert!(err.to_string().contains("out of memory"), "{err}");
    // Reuses (and splits) the freed 3 MiB block at the start of the 20 MiB segment.
    live.push(a.allocate(MIB + 512, &at(31, "conv2d")).unwrap());
    a.check_consistency().unwrap();
    (a, live)
}

fn release(a: &CachingAllocator<HostBacking>, live: Vec<Block>) {
    for b in live {
        // SAFETY: every block came from `a` and is not used again.
        unsafe { a.deallocate(b) };
    }
    a.empty_cache().unwrap();
    assert_eq!(a.memory_reserved(), 0);
}

fn count(snap: &Snapshot, action: TraceAction) -> usize {
    snap.device_traces[0]
        .iter()
        .filter(|e| e.action == action)
        .count()
}

#[test]
fn memory_viz_reports_stratas_statistics() {
    if !have_torch("memory_viz_reports_stratas_statistics") {
        return;
    }
    let dir = scratch("stats");
    let (a, live) = workload();

    // strata's figures and the snapshot, at the same moment.
    let snap = a.snapshot();
    let reserved = a.memory_reserved();
    let allocated = a.memory_allocated();
    let stats = a.memory_stats();
    assert_eq!(stats.reserved_bytes.all.current as usize, reserved);
    // Live requests are multiples of 512 bytes, so PyTorch's `total_allocated` (the requested
    // bytes of allocated blocks) is exactly `memory_allocated`.
    assert_eq!(stats.requested_bytes.all.current as usize, allocated);
    assert_eq!(reserved, 22 * MIB);
    assert_eq!(allocated, 4096 + 1536 + 5 * MIB + MIB + 512);
    let pickle = dir.join("snapshot.pickle");
    snap.save_pickle(&pickle).unwrap();
    let file = s(&pickle);

    // `stats`, as printed.
    let stats_out = python_ok(&["-m", "torch.cuda._memory_viz", "stats", file]);
    eprintln!("--- _memory_viz stats ---\n{stats_out}");
    assert_eq!(
        field(&stats_out, "segments"),
        snap.segments.len().to_string()
    );
    assert_eq!(field(&stats_out, "total_reserved"), format_size(reserved));
    assert_eq!(field(&stats_out, "total_allocated"), format_size(allocated));
    assert_eq!(
        field(&stats_out, "total_free"),
        format!("{} (0.0% internal)", format_size(reserved - allocated))
    );
    // Only the 20 MiB segment reaches the summary's 20 MiB page size.
    assert_eq!(
        stats_out
            .lines()
            .filter(|l| l.starts_with('[') && l.contains(" allocated, "))
            .count(),
        1,
        "{stats_out}"
    );

    // `trace`, as printed.
    let trace_out = python_ok(&["-m", "torch.cuda._memory_viz", "trace", file]);
    eprintln!("--- _memory_viz trace ---\n{trace_out}");
    assert!(trace_out.starts_with("Device 0 ----------------\n"));
    let r = replay(&trace_out, false);
    assert_eq!(r.entries, snap.device_traces[0].len());
    assert_eq!(r.allocs, count(&snap, TraceAction::Alloc));
    assert_eq!(r.frees_requested, count(&snap, TraceAction::FreeRequested));
    assert_eq!(r.frees_completed, count(&snap, TraceAction::FreeCompleted));
    assert_eq!(r.segment_allocs, count(&snap, TraceAction::SegmentAlloc));
    assert_eq!(r.segment_frees, count(&snap, TraceAction::SegmentFree));
    assert_eq!(r.ooms, 1);
    assert_eq!((r.allocs, r.frees_completed), (7, 3));
    assert_eq!((r.segment_allocs, r.segment_frees), (3, 1));
    eprintln!(
        "(TOTAL MEM as printed: {}; `trace` reuses its running total as the loop index, so \
         the figure is not the memory in use)",
        r.total_mem
    );

    // The same two reports with sizes printed as exact byte counts, and the trace replayed.
    let exact_out = python_ok(&[
        "-c",
        "import pickle, sys\n\
         import torch.cuda._memory_viz as mv\n\
         mv._format_size = lambda n: f'{int(n)}B'\n\
         with open(sys.argv[1], 'rb') as f:\n    data = pickle.load(f)\n\
         print(mv.segsum(data))\n\
         print(mv.trace(data))\n",
        file,
    ]);
    let total_reserved = exact(field(&exact_out, "total_reserved"));
    let total_allocated = exact(field(&exact_out, "total_allocated"));
    let total_free = field(&exact_out, "total_free");
    let total_free = exact(total_free.split(" (").next().unwrap());
    let r = replay(&exact_out, true);
    eprintln!(
        "_memory_viz (exact): total_reserved {total_reserved}, total_allocated \
         {total_allocated}, total_free {total_free}; trace replay: in use {}, reserved {}\n\
         strata:              memory_reserved {reserved}, memory_allocated {allocated}, \
         reserved - allocated {}",
        r.in_use,
        r.reserved,
        reserved - allocated
    );
    assert_eq!(total_reserved, reserved);
    assert_eq!(total_allocated, allocated);
    assert_eq!(total_free, reserved - allocated);
    assert_eq!(
        r.in_use, allocated as i64,
        "memory in use by the trace replay"
    );
    assert_eq!(
        r.reserved, reserved as i64,
        "segments held by the trace replay"
    );
    assert_eq!(r.ooms, 1);

    release(&a, live);
}

#[test]
fn memory_viz_plots_render() {
    if !have_torch("memory_viz_plots_render") {
        return;
    }
    let dir = scratch("plots");
    let (a, live) = workload();
    let pickle = dir.join("snapshot.pickle");
    a.dump_snapshot(&pickle).unwrap();
    let file = s(&pickle);

    // The functions: HTML strings whose embedded snapshot is the one written.
    let out = python_ok(&[
        "-c",
        "import base64, json, pickle, sys\n\
         import torch.cuda._memory_viz as mv\n\
         with open(sys.argv[1], 'rb') as f:\n    data = pickle.load(f)\n\
         plots = {\n\
             'trace_plot': mv.trace_plot(data),\n\
             'trace_plot_segments': mv.trace_plot(data, plot_segments=True),\n\
             'segment_plot': mv.segment_plot(data),\n\
         }\n\
         for name, html in plots.items():\n\
         \x20   files = json.loads(html.split('const local_files = ')[1].split('\\n')[0])\n\
         \x20   embedded = pickle.loads(base64.b64decode(files[0]['base64']))\n\
         \x20   assert embedded == data, name\n\
         \x20   with open(f'{sys.argv[2]}/{name}.html', 'w') as f:\n\
         \x20       f.write(html)\n\
         \x20   print(name, len(html))\n",
        file,
        s(&dir),
    ]);
    eprintln!("{out}");
    for (name, view) in [
        ("trace_plot", "Active Memory Timeline"),
        ("trace_plot_segments", "Active Cached Memory Timeline"),
        ("segment_plot", "Allocator State History"),
    ] {
        let html = std::fs::read_to_string(dir.join(format!("{name}.html"))).unwrap();
        assert!(html.len() > 1000, "{name}: {} bytes", html.len());
        assert!(
            html.contains("<html>") && html.contains("MemoryViz.js"),
            "{name}"
        );
        assert!(html.contains(view), "{name} opens {view}");
    }

    // The command line.
    for cmd in ["trace_plot", "segment_plot"] {
        let html = dir.join(format!("cli_{cmd}.html"));
        python_ok(&["-m", "torch.cuda._memory_viz", cmd, file, "-o", s(&html)]);
        let text = std::fs::read_to_string(&html).unwrap();
        assert!(
            text.len() > 1000 && text.contains("snapshot.pickle"),
            "{cmd}"
        );
    }

    release(&a, live);
}

/// Plain `pickle.load` (no PyTorch needed) reads the same snapshot the JSON holds, with
/// Python's types: tuples for pool ids, bools, floats, big ints for addresses.
#[test]
fn pickle_loads_as_the_json_snapshot() {
    if !have_python("pickle_loads_as_the_json_snapshot") {
        return;
    }
    let dir = scratch("python");
    // A pending-free block (a side stream still uses it) and virtual addresses.
    let a = CachingAllocator::new(VirtualBacking::new(64 * MIB));
    a.record_memory_history(true, RecordContext::All, 1000);
    let x = a.allocate(700, &at(1, "zeros")).unwrap();
    let y = a.allocate(3 * MIB, &at(2, "linear")).unwrap();
    let _ = a.allocate(60 * MIB, &at(3, "huge")).unwrap_err();
    let side = StreamId(3);
    a.backing().hold_stream(side);
    let w = a.allocate(5 * MIB, &at(4, "copy")).unwrap();
    a.record_stream(&w, side);
    // SAFETY: `w` came from `a` and is not used again.
    unsafe { a.deallocate(w) };
    let snap = a.snapshot();
    // x and y stay allocated (a Block has no destructor).
    let _ = (x, y);

    let pickle = dir.join("snapshot.pickle");
    let json = dir.join("snapshot.json");
    snap.save_pickle(&pickle).unwrap();
    snap.save_json(&json).unwrap();
    let out = python_ok(&[
        "-c",
        "import json, pickle, sys\n\
         with open(sys.argv[1], 'rb') as f:\n    p = pickle.load(f)\n\
         with open(sys.argv[2]) as f:\n    j = json.load(f)\n\
         assert sorted(p) == ['allocator_settings', 'device_traces', 'segments'], sorted(p)\n\
         for seg in j['segments']:\n    seg['segment_pool_id'] = tuple(seg['segment_pool_id'])\n\
         assert p['segments'] == j['segments']\n\
         assert p['device_traces'] == j['device_traces']\n\
         seg = p['segments'][0]\n\
         assert type(seg['segment_pool_id']) is tuple and type(seg['is_expandable']) is bool\n\
         assert seg['address'] > 2**32, seg['address']\n\
         states = {b['state'] for s in p['segments'] for b in s['blocks']}\n\
         assert states == {'active_allocated', 'active_pending_free', 'inactive'}, states\n\
         oom = [e for e in p['device_traces'][0] if e['action'] == 'oom']\n\
         assert len(oom) == 1 and 'device_free' in oom[0] and 'addr' not in oom[0], oom\n\
         s, js = p['allocator_settings'], j['allocator_settings']\n\
         assert s['PYTORCH_CUDA_ALLOC_CONF'] == js['STRATA_ALLOC_CONF']\n\
         assert type(s['garbage_collection_threshold']) is float\n\
         assert s['roundup_power2_divisions'] == js['roundup_power2_divisions']\n\
         assert s['max_split_size'] == js['max_split_size'] == -1\n\
         assert s['memory_limit'] is None\n\
         print('ok', len(p['device_traces'][0]), 'entries')\n",
        s(&pickle),
        s(&json),
    ]);
    assert!(out.starts_with("ok "), "{out}");
}

/// The JSON path still round-trips, in memory and through a file.
#[test]
fn json_round_trips() {
    let dir = scratch("json");
    let (a, live) = workload();
    let snap = a.snapshot();
    assert_eq!(Snapshot::from_json(&snap.to_json()).unwrap(), snap);
    assert_eq!(Snapshot::from_json(&snap.to_json_pretty()).unwrap(), snap);
    let path = dir.join("snapshot.json");
    snap.save_json(&path).unwrap();
    assert_eq!(Snapshot::load_json(&path).unwrap(), snap);
    assert!(Snapshot::load_json(dir.join("missing.json")).is_err());
    std::fs::write(dir.join("bad.json"), "{").unwrap();
    assert!(Snapshot::load_json(dir.join("bad.json")).is_err());
    // Both files describe the same snapshot.
    let pickle = snap.to_pickle();
    assert_eq!(&pickle[..2], b"\x80\x04");
    assert_eq!(pickle.last(), Some(&b'.'));
    release(&a, live);
}
