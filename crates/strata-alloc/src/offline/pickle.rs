//! Snapshots as Python pickles: the file `torch.cuda.memory._dump_snapshot()` writes, so that
//! PyTorch's memory tools (`python -m torch.cuda._memory_viz`, `trace_plot`, `segment_plot`
//! and the viewer at `pytorch.org/memory_viz`) read strata's snapshots as they read PyTorch's.
//!
//! The writer is a small subset of pickle protocol 4 that emits only opcodes both CPython's
//! unpickler and the JavaScript unpickler of `MemoryViz.js` understand:
//!
//! | value | opcode(s) |
//! |---|---|
//! | `None`, `True`, `False` | `NONE`, `NEWTRUE`, `NEWFALSE` |
//! | int in `0..=0xff` / `0..=0xffff` / `i32` | `BININT1` / `BININT2` / `BININT` |
//! | other int (64-bit addresses, timestamps) | `LONG1` (little-endian two's complement) |
//! | float | `BINFLOAT` (big-endian IEEE 754 double) |
//! | str | `SHORT_BINUNICODE` (< 256 bytes of UTF-8) or `BINUNICODE` |
//! | bytes (never in a snapshot) | `SHORT_BINBYTES` (< 256 bytes) or `BINBYTES` |
//! | list | `EMPTY_LIST`, then per batch of up to 1000 items `APPEND` or `MARK` ... `APPENDS` |
//! | dict | `EMPTY_DICT`, then per batch of up to 1000 pairs `SETITEM` or `MARK` ... `SETITEMS` |
//! | tuple | `EMPTY_TUPLE`, `TUPLE1`..`TUPLE3`, or `MARK` ... `TUPLE` |
//!
//! The stream starts with `PROTO 4` and ends with `STOP`. It uses no memo and no `FRAME`
//! (framing is optional in protocol 4), so identical frames are written out each time.

use std::fs;
use std::io;
use std::path::Path;

use crate::backing::Backing;
use crate::caching::{
    AllocatorSettings, BlockSnapshot, BlockState, CachingAllocator, Frame, SegmentSnapshot,
    Snapshot, TraceEntrySnapshot,
};

const PROTO: u8 = 0x80;
const STOP: u8 = b'.';
const NONE: u8 = b'N';
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const BININT2: u8 = b'M';
const LONG1: u8 = 0x8a;
const BINFLOAT: u8 = b'G';
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE: u8 = b'X';
const SHORT_BINBYTES: u8 = b'C';
const BINBYTES: u8 = b'B';
const EMPTY_LIST: u8 = b']';
const APPEND: u8 = b'a';
const APPENDS: u8 = b'e';
const EMPTY_DICT: u8 = b'}';
const SETITEM: u8 = b's';
const SETITEMS: u8 = b'u';
const MARK: u8 = b'(';
const EMPTY_TUPLE: u8 = b')';
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const TUPLE: u8 = b't';

/// The protocol announced by `PROTO`. `SHORT_BINUNICODE` needs 4.
const PROTOCOL: u8 = 4;

/// Items per `APPENDS` / `SETITEMS` batch, as CPython's pickler writes them (the JavaScript
/// unpickler spreads each batch onto its stack, so batches must stay small).
const BATCH: usize = 1000;

/// A Python value, as far as snapshots need them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum PyValue {
    /// `None`.
    None,
    /// `True` or `False`.
    Bool(bool),
    /// An `int`; `i128` holds every `u64` address and `i64` timestamp.
    Int(i128),
    /// A `float`.
    Float(f64),
    /// A `str`.
    Str(String),
    /// A `bytes` (or `bytearray`); snapshots hold none, but pickles read back may.
    Bytes(Vec<u8>),
    /// A `list`.
    List(Vec<PyValue>),
    /// A `tuple`.
    Tuple(Vec<PyValue>),
    /// A `dict` with `str` keys, in insertion order.
    Dict(Vec<(String, PyValue)>),
    /// Trace entries the reader mapped while it read them (entries `first..first + len` of
    /// its table): a trace list that held nothing else, or one such entry inside a list.
    /// Only the reader makes these; the writer writes them as `None`.
    Mapped {
        /// The first entry's index in the reader's table.
        first: usize,
        /// How many entries.
        len: usize,
    },
}

impl PyValue {
    fn str(s: &str) -> PyValue {
        PyValue::Str(s.to_owned())
    }

    fn int(v: impl Into<i128>) -> PyValue {
        PyValue::Int(v.into())
    }
}

/// Serialises `value` as a complete pickle (`PROTO 4` ... `STOP`).
pub(crate) fn dumps(value: &PyValue) -> Vec<u8> {
    let mut out = vec![PROTO, PROTOCOL];
    write_value(&mut out, value);
    out.push(STOP);
    out
}

fn write_value(out: &mut Vec<u8>, value: &PyValue) {
    match value {
        PyValue::None | PyValue::Mapped { .. } => out.push(NONE),
        PyValue::Bool(true) => out.push(NEWTRUE),
        PyValue::Bool(false) => out.push(NEWFALSE),
        PyValue::Int(v) => write_int(out, *v),
        PyValue::Float(f) => {
            out.push(BINFLOAT);
            out.extend_from_slice(&f.to_be_bytes());
        }
        PyValue::Str(s) => write_str(out, s),
        PyValue::Bytes(b) => write_bytes(out, b),
        PyValue::List(items) => {
            out.push(EMPTY_LIST);
            for batch in items.chunks(BATCH) {
                if let [item] = batch {
                    write_value(out, item);
                    out.push(APPEND);
                } else {
                    out.push(MARK);
                    for item in batch {
                        write_value(out, item);
                    }
                    out.push(APPENDS);
                }
            }
        }
        PyValue::Dict(entries) => {
            out.push(EMPTY_DICT);
            for batch in entries.chunks(BATCH) {
                if let [(k, v)] = batch {
                    write_str(out, k);
                    write_value(out, v);
                    out.push(SETITEM);
                } else {
                    out.push(MARK);
                    for (k, v) in batch {
                        write_str(out, k);
                        write_value(out, v);
                    }
                    out.push(SETITEMS);
                }
            }
        }
        PyValue::Tuple(items) => {
            if items.is_empty() {
                out.push(EMPTY_TUPLE);
                return;
            }
            if items.len() > 3 {
                out.push(MARK);
            }
            for item in items {
                write_value(out, item);
            }
            out.push(match items.len() {
                1 => TUPLE1,
                2 => TUPLE2,
                3 => TUPLE3,
                _ => TUPLE,
            });
        }
    }
}

/// The smallest of CPython's encodings for `v`.
fn write_int(out: &mut Vec<u8>, v: i128) {
    if let Ok(b) = u8::try_from(v) {
        out.extend_from_slice(&[BININT1, b]);
    } else if let Ok(h) = u16::try_from(v) {
        out.push(BININT2);
        out.extend_from_slice(&h.to_le_bytes());
    } else if let Ok(w) = i32::try_from(v) {
        out.push(BININT);
        out.extend_from_slice(&w.to_le_bytes());
    } else {
        let bytes = long_bytes(v);
        out.push(LONG1);
        // At most 16 bytes: an i128 never needs more.
        out.push(bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
}

/// `v` as the shortest little-endian two's complement byte string that keeps its sign
/// (CPython's `encode_long`); empty for 0.
fn long_bytes(v: i128) -> Vec<u8> {
    let mut bytes = v.to_le_bytes().to_vec();
    let fill = if v < 0 { 0xff } else { 0x00 };
    // Drop redundant sign-extension bytes: the top byte is pure fill and the byte below it
    // already carries the right sign bit.
    while let [.., below, top] = bytes[..] {
        if top == fill && (below & 0x80) == (fill & 0x80) {
            bytes.pop();
        } else {
            break;
        }
    }
    if bytes == [0] {
        bytes.clear();
    }
    bytes
}

fn write_str(out: &mut Vec<u8>, s: &str) {
    let bytes = s.as_bytes();
    if let Ok(n) = u8::try_from(bytes.len()) {
        out.extend_from_slice(&[SHORT_BINUNICODE, n]);
        out.extend_from_slice(bytes);
        return;
    }
    // `BINUNICODE` holds at most 4 GiB; a longer string is cut at a character boundary.
    // Snapshot strings (file names, op names, settings) are nowhere near that.
    let mut end = bytes.len().min(u32::MAX as usize);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    out.push(BINUNICODE);
    out.extend_from_slice(&(end as u32).to_le_bytes());
    out.extend_from_slice(&bytes[..end]);
}

fn write_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    if let Ok(n) = u8::try_from(bytes.len()) {
        out.extend_from_slice(&[SHORT_BINBYTES, n]);
        out.extend_from_slice(bytes);
        return;
    }
    // `BINBYTES` holds at most 4 GiB; snapshots hold no bytes at all.
    let end = bytes.len().min(u32::MAX as usize);
    out.push(BINBYTES);
    out.extend_from_slice(&(end as u32).to_le_bytes());
    out.extend_from_slice(&bytes[..end]);
}

fn dict<const N: usize>(entries: [(&str, PyValue); N]) -> PyValue {
    PyValue::Dict(
        entries
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect(),
    )
}

fn frames(frames: &[Frame]) -> PyValue {
    PyValue::List(
        frames
            .iter()
            .map(|f| {
                dict([
                    ("filename", PyValue::str(&f.filename)),
                    ("line", PyValue::int(f.line)),
                    ("name", PyValue::str(&f.name)),
                ])
            })
            .collect(),
    )
}

fn block(b: &BlockSnapshot) -> PyValue {
    let state = match b.state {
        BlockState::ActiveAllocated => "active_allocated",
        BlockState::ActivePendingFree => "active_pending_free",
        BlockState::Inactive => "inactive",
    };
    let mut d = dict([
        ("address", PyValue::int(b.address)),
        ("size", PyValue::int(b.size)),
        ("requested_size", PyValue::int(b.requested_size)),
        ("state", PyValue::str(state)),
        ("frames", frames(&b.frames)),
    ]);
    if let (Some(c), PyValue::Dict(entries)) = (b.category, &mut d) {
        entries.push(("category".to_owned(), PyValue::str(c.as_str())));
    }
    d
}

fn segment(s: &SegmentSnapshot) -> PyValue {
    dict([
        ("device", PyValue::int(s.device)),
        ("address", PyValue::int(s.address)),
        ("total_size", PyValue::int(s.total_size)),
        ("allocated_size", PyValue::int(s.allocated_size)),
        ("active_size", PyValue::int(s.active_size)),
        ("requested_size", PyValue::int(s.requested_size)),
        ("stream", PyValue::int(s.stream)),
        ("segment_type", PyValue::str(s.segment_type.as_str())),
        (
            "segment_pool_id",
            PyValue::Tuple(vec![
                PyValue::int(s.segment_pool_id.0),
                PyValue::int(s.segment_pool_id.1),
            ]),
        ),
        ("is_expandable", PyValue::Bool(s.is_expandable)),
        ("frames", frames(&s.frames)),
        (
            "blocks",
            PyValue::List(s.blocks.iter().map(block).collect()),
        ),
    ])
}

fn trace_entry(e: &TraceEntrySnapshot) -> PyValue {
    let mut entries = vec![("action".to_owned(), PyValue::str(e.action.as_str()))];
    // An `oom` entry names the device's free bytes instead of an address.
    if let Some(addr) = e.addr {
        entries.push(("addr".to_owned(), PyValue::int(addr)));
    }
    if let Some(free) = e.device_free {
        entries.push(("device_free".to_owned(), PyValue::int(free)));
    }
    entries.extend([
        ("size".to_owned(), PyValue::int(e.size)),
        ("stream".to_owned(), PyValue::int(e.stream)),
        ("time_us".to_owned(), PyValue::int(e.time_us)),
        ("frames".to_owned(), frames(&e.frames)),
    ]);
    if let Some(c) = e.category {
        entries.push(("category".to_owned(), PyValue::str(c.as_str())));
    }
    PyValue::Dict(entries)
}

fn settings(s: &AllocatorSettings) -> PyValue {
    dict([
        // PyTorch's keys first. The raw settings text goes where PyTorch keeps the text of
        // `PYTORCH_CUDA_ALLOC_CONF`; the pinned-memory and lock settings are accepted but not
        // implemented by strata, so they read as PyTorch's defaults.
        ("PYTORCH_CUDA_ALLOC_CONF", PyValue::str(&s.conf)),
        ("max_split_size", PyValue::int(s.max_split_size)),
        (
            "garbage_collection_threshold",
            PyValue::Float(s.garbage_collection_threshold),
        ),
        ("expandable_segments", PyValue::Bool(s.expandable_segments)),
        ("pinned_num_register_threads", PyValue::int(1)),
        ("release_lock_on_cudamalloc", PyValue::Bool(false)),
        ("pinned_use_cuda_host_register", PyValue::Bool(false)),
        (
            "roundup_power2_divisions",
            PyValue::Dict(
                s.roundup_power2_divisions
                    .iter()
                    .map(|(k, v)| (k.clone(), PyValue::int(*v)))
                    .collect(),
            ),
        ),
        // strata's own settings.
        ("backend", PyValue::str(&s.backend)),
        (
            "memory_limit",
            s.memory_limit.map_or(PyValue::None, PyValue::int),
        ),
        ("ties_by_address", PyValue::Bool(s.ties_by_address)),
    ])
}

impl Snapshot {
    /// The snapshot as the Python object `torch.cuda.memory._snapshot()` returns: a dict with
    /// `segments`, `device_traces` and `allocator_settings`.
    pub(crate) fn to_py_value(&self) -> PyValue {
        dict([
            (
                "segments",
                PyValue::List(self.segments.iter().map(segment).collect()),
            ),
            (
                "device_traces",
                PyValue::List(
                    self.device_traces
                        .iter()
                        .map(|t| PyValue::List(t.iter().map(trace_entry).collect()))
                        .collect(),
                ),
            ),
            ("allocator_settings", settings(&self.allocator_settings)),
        ])
    }

    /// The snapshot pickled as `torch.cuda.memory._dump_snapshot()` pickles PyTorch's: the
    /// bytes of a file that `pickle.load`, `python -m torch.cuda._memory_viz` and
    /// `pytorch.org/memory_viz` read.
    ///
    /// Keys and values are PyTorch's: block `state` is `"active_allocated"`,
    /// `"active_pending_free"` or `"inactive"`, `segment_type` is `"small"` or `"large"`,
    /// `segment_pool_id` is a tuple, addresses are Python ints, an `oom` trace entry has
    /// `device_free` instead of `addr`. `allocator_settings` holds PyTorch's keys (the raw
    /// settings text under `PYTORCH_CUDA_ALLOC_CONF`) plus strata's `backend` and
    /// `memory_limit` (`None` when unlimited).
    ///
    /// ```
    /// use strata_alloc::{CachingAllocator, DeviceAllocator, Site, VirtualBacking};
    /// let a = CachingAllocator::new(VirtualBacking::new(1 << 30));
    /// let _b = a.allocate(100, &Site::unknown("example")).unwrap();
    /// let bytes = a.snapshot().to_pickle();
    /// assert_eq!(&bytes[..2], b"\x80\x04"); // PROTO 4
    /// assert_eq!(bytes.last(), Some(&b'.')); // STOP
    /// ```
    pub fn to_pickle(&self) -> Vec<u8> {
        dumps(&self.to_py_value())
    }

    /// Writes [`to_pickle`](Self::to_pickle) to `path` (conventionally `*.pickle`), replacing
    /// any file there.
    pub fn save_pickle(&self, path: impl AsRef<Path>) -> io::Result<()> {
        fs::write(path, self.to_pickle())
    }
}

impl<B: Backing> CachingAllocator<B> {
    /// Takes a [`snapshot`](Self::snapshot) and writes it to `path` as a pickle, as PyTorch's
    /// `torch.cuda.memory._dump_snapshot(filename)` does: the file PyTorch's memory tools
    /// (`python -m torch.cuda._memory_viz`, `pytorch.org/memory_viz`) read. (It is written
    /// here, beside the pickle writer, so that the allocator itself never depends on it.)
    pub fn dump_snapshot(&self, path: impl AsRef<Path>) -> io::Result<()> {
        self.snapshot().save_pickle(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(v: &PyValue) -> Vec<u8> {
        let all = dumps(v);
        assert_eq!(&all[..2], &[PROTO, 4]);
        assert_eq!(all.last(), Some(&STOP));
        all[2..all.len() - 1].to_vec()
    }

    #[test]
    fn constants() {
        assert_eq!(body(&PyValue::None), b"N");
        assert_eq!(body(&PyValue::Bool(true)), [0x88]);
        assert_eq!(body(&PyValue::Bool(false)), [0x89]);
        // pickle.dumps(None, 4) without the frame.
        assert_eq!(dumps(&PyValue::None), b"\x80\x04N.");
    }

    #[test]
    fn small_ints_use_the_short_forms() {
        assert_eq!(body(&PyValue::Int(0)), b"K\x00");
        assert_eq!(body(&PyValue::Int(255)), b"K\xff");
        assert_eq!(body(&PyValue::Int(256)), b"M\x00\x01");
        assert_eq!(body(&PyValue::Int(65535)), b"M\xff\xff");
        assert_eq!(body(&PyValue::Int(65536)), b"J\x00\x00\x01\x00");
        assert_eq!(body(&PyValue::Int(-1)), b"J\xff\xff\xff\xff");
        assert_eq!(body(&PyValue::Int(i32::MAX as i128)), b"J\xff\xff\xff\x7f");
        assert_eq!(body(&PyValue::Int(i32::MIN as i128)), b"J\x00\x00\x00\x80");
    }

    #[test]
    fn big_ints_are_long1() {
        // pickle.dumps(2**31, 2) == b'\x80\x02\x8a\x05\x00\x00\x00\x80\x00.'
        assert_eq!(
            body(&PyValue::Int(1 << 31)),
            b"\x8a\x05\x00\x00\x00\x80\x00"
        );
        // A typical 47-bit host address: 0x7f12_3456_7000.
        assert_eq!(
            body(&PyValue::int(0x7f12_3456_7000u64)),
            b"\x8a\x06\x00\x70\x56\x34\x12\x7f"
        );
        // u64::MAX needs a ninth byte to stay positive.
        assert_eq!(
            body(&PyValue::int(u64::MAX)),
            b"\x8a\x09\xff\xff\xff\xff\xff\xff\xff\xff\x00"
        );
        assert_eq!(
            body(&PyValue::int(i64::MIN)),
            b"\x8a\x08\x00\x00\x00\x00\x00\x00\x00\x80"
        );
        // -2**31 - 1 (CPython: b'\x8a\x05\xff\xff\xff\x7f\xff').
        assert_eq!(
            body(&PyValue::Int(-(1i128 << 31) - 1)),
            b"\x8a\x05\xff\xff\xff\x7f\xff"
        );
    }

    #[test]
    fn long_bytes_matches_cpython_encode_long() {
        assert_eq!(long_bytes(0), Vec::<u8>::new());
        assert_eq!(long_bytes(127), [0x7f]);
        assert_eq!(long_bytes(128), [0x80, 0x00]);
        assert_eq!(long_bytes(-128), [0x80]);
        assert_eq!(long_bytes(-129), [0x7f, 0xff]);
        assert_eq!(long_bytes(255), [0xff, 0x00]);
        assert_eq!(long_bytes(-256), [0x00, 0xff]);
    }

    #[test]
    fn floats_are_big_endian_doubles() {
        assert_eq!(
            body(&PyValue::Float(1.5)),
            b"G\x3f\xf8\x00\x00\x00\x00\x00\x00"
        );
        assert_eq!(
            body(&PyValue::Float(0.0)),
            b"G\x00\x00\x00\x00\x00\x00\x00\x00"
        );
    }

    #[test]
    fn strings() {
        assert_eq!(body(&PyValue::str("")), b"\x8c\x00");
        assert_eq!(body(&PyValue::str("alloc")), b"\x8c\x05alloc");
        // UTF-8 length, not characters.
        assert_eq!(body(&PyValue::str("é")), b"\x8c\x02\xc3\xa9");
        let long = "x".repeat(300);
        let b = body(&PyValue::Str(long.clone()));
        assert_eq!(&b[..5], b"X\x2c\x01\x00\x00");
        assert_eq!(&b[5..], long.as_bytes());
    }

    #[test]
    fn lists_batch_their_items() {
        assert_eq!(body(&PyValue::List(vec![])), b"]");
        assert_eq!(body(&PyValue::List(vec![PyValue::Int(1)])), b"]K\x01a");
        assert_eq!(
            body(&PyValue::List(vec![PyValue::Int(1), PyValue::Int(2)])),
            b"](K\x01K\x02e"
        );
        // 1001 items: one batch of 1000, then a single APPEND.
        let b = body(&PyValue::List(vec![PyValue::None; 1001]));
        let mut want = b"](".to_vec();
        want.extend(std::iter::repeat_n(b'N', 1000));
        want.extend_from_slice(b"eNa");
        assert_eq!(b, want);
    }

    #[test]
    fn dicts_and_tuples() {
        assert_eq!(body(&PyValue::Dict(vec![])), b"}");
        assert_eq!(body(&dict([("a", PyValue::Int(1))])), b"}\x8c\x01aK\x01s");
        assert_eq!(
            body(&dict([("a", PyValue::Int(1)), ("b", PyValue::Bool(true))])),
            b"}(\x8c\x01aK\x01\x8c\x01b\x88u"
        );
        assert_eq!(body(&PyValue::Tuple(vec![])), b")");
        assert_eq!(body(&PyValue::Tuple(vec![PyValue::Int(0)])), b"K\x00\x85");
        assert_eq!(
            body(&PyValue::Tuple(vec![PyValue::Int(0), PyValue::Int(0)])),
            b"K\x00K\x00\x86"
        );
        assert_eq!(body(&PyValue::Tuple(vec![PyValue::None; 3])), b"NNN\x87");
        assert_eq!(body(&PyValue::Tuple(vec![PyValue::None; 4])), b"(NNNNt");
    }

    #[test]
    fn snapshot_dict_has_pytorchs_keys() {
        use crate::{CachingAllocator, DeviceAllocator, RecordContext, Site, VirtualBacking};
        let a = CachingAllocator::new(VirtualBacking::new(1 << 30));
        a.record_memory_history(true, RecordContext::All, 100);
        let _b = a.allocate(100, &Site::unknown("t")).unwrap();
        let v = a.snapshot().to_py_value();
        let PyValue::Dict(top) = v else {
            panic!("not a dict")
        };
        let keys: Vec<&str> = top.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["segments", "device_traces", "allocator_settings"]);
        let PyValue::List(segs) = &top[0].1 else {
            panic!("segments is not a list")
        };
        let PyValue::Dict(seg) = &segs[0] else {
            panic!("segment is not a dict")
        };
        let get = |k: &str| seg.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        assert_eq!(get("segment_type"), Some(PyValue::str("small")));
        assert_eq!(
            get("segment_pool_id"),
            Some(PyValue::Tuple(vec![PyValue::Int(0), PyValue::Int(0)]))
        );
        assert_eq!(get("is_expandable"), Some(PyValue::Bool(false)));
        let Some(PyValue::List(blocks)) = get("blocks") else {
            panic!("no blocks")
        };
        let PyValue::Dict(b0) = &blocks[0] else {
            panic!("block is not a dict")
        };
        assert!(b0
            .iter()
            .any(|(k, v)| k == "state" && *v == PyValue::str("active_allocated")));
    }
}
