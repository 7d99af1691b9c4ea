//! Reading snapshots: PyTorch's pickles (`torch.cuda.memory._dump_snapshot()`), strata's
//! pickles ([`Snapshot::to_pickle`]) and strata's JSON ([`Snapshot::to_json`]).
//!
//! The pickle is read by the small virtual machine in `unpickle/` into plain Python values,
//! which are then mapped onto [`Snapshot`]. The mapping follows
//! `shared/reference/pytorch-memory-spec.md` §2.3 and tolerates what newer and older PyTorch
//! versions add or leave out:
//!
//! * keys strata does not know (`host_segments`, `external_annotations`, frame keys such as
//!   `fx_node_op`, new settings) are ignored and listed in [`ReadNotes::ignored_keys`];
//! * trace entries whose action strata does not know (`annotate`, user-defined actions) are
//!   skipped and counted in [`ReadNotes::skipped_actions`];
//! * category names strata does not know (PyTorch's `profile_plot` writes `unknown` and
//!   `autograd_detail`) read as no category and are counted in
//!   [`ReadNotes::unknown_categories`];
//! * missing optional parts take defaults: no `allocator_settings` gives the default
//!   settings, no `backend` gives `"native"`, no `device_traces` gives no traces, a block
//!   without `address` lies after the previous block, a segment without `allocated_size`,
//!   `active_size` or `requested_size` sums its blocks, and a bare list of segments (what
//!   `torch.cuda.memory_snapshot()` returns) is a snapshot without traces.
//!
//! What a snapshot cannot do without (a segment's `address` and `total_size`, a block's
//! `size` and `state`, a trace entry's `action`, `size` and, except for `oom`, `addr`) is an
//! error naming the field's path, as is a value of the wrong type.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::de::value::StrDeserializer;
use serde::de::IntoDeserializer;
use serde::Deserialize;

use super::pickle::PyValue;
use super::read_ahead::ReadAhead;
use super::unpickle::{self, describe, UnpickleError, PROGRESS_EVERY};
use crate::caching::TraceAction;
use crate::caching::{
    AllocatorSettings, BlockSnapshot, BlockState, Frame, Frames, SegmentSnapshot, Snapshot,
    TraceEntrySnapshot,
};
use crate::caching::{PoolKind, ROUNDUP_INTERVALS, SMALL_BUFFER};
use crate::Category;

/// Why a snapshot could not be read. Each message says what went wrong, where (the byte of
/// the pickle or the path of the field, such as `segments[3].blocks[0].size`) and what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotReadError {
    /// The pickle itself could not be read: it is cut short, holds an opcode that builds
    /// Python objects, or breaks the rules of the pickle machine.
    #[error(transparent)]
    Pickle(#[from] UnpickleError),
    /// The pickle holds something other than a memory snapshot.
    #[error(
        "not a memory snapshot: expected a dict with `segments` (what \
         torch.cuda.memory._snapshot() returns and strata's Snapshot::to_pickle writes) or a \
         list of segment dicts (torch.cuda.memory.memory_snapshot()), found {found}; save a \
         snapshot with torch.cuda.memory._dump_snapshot(path) or strata's \
         CachingAllocator::dump_snapshot"
    )]
    NotASnapshot {
        /// What the pickle holds instead.
        found: String,
    },
    /// A field of the snapshot has the wrong type or an unknown value.
    #[error(
        "`{path}`: expected {expected}, found {found}; this is not the structure of \
         torch.cuda.memory._snapshot(), so the file was written by another tool or damaged"
    )]
    WrongType {
        /// The field, as `segments[3].blocks[0].size`.
        path: String,
        /// What the field should hold.
        expected: String,
        /// What it holds.
        found: String,
    },
    /// A field every snapshot has is missing.
    #[error(
        "`{path}` is missing; PyTorch and strata always write it, so the file is not a \
         complete memory snapshot"
    )]
    Missing {
        /// The field, as `segments[0].total_size`.
        path: String,
    },
    /// The file could not be read.
    #[error("cannot read the snapshot file {}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// The file starts with `{` but is not a snapshot in strata's JSON.
    #[error(
        "{} starts with `{{` but is not a strata JSON snapshot ({source}); write it with \
         Snapshot::save_json, or pass a pickle from torch.cuda.memory._dump_snapshot",
        path.display()
    )]
    Json {
        /// The file.
        path: PathBuf,
        /// Why serde_json refused it.
        source: serde_json::Error,
    },
}

/// Which format a snapshot file was in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SnapshotFormat {
    /// A Python pickle (PyTorch's `_dump_snapshot` or strata's `save_pickle`).
    #[default]
    Pickle,
    /// strata's JSON ([`Snapshot::save_json`]).
    Json,
}

impl fmt::Display for SnapshotFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            SnapshotFormat::Pickle => "pickle",
            SnapshotFormat::Json => "JSON",
        })
    }
}

/// What reading a snapshot found besides the snapshot: the format, and what was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReadNotes {
    /// The file's format.
    pub format: SnapshotFormat,
    /// The pickle's protocol; `None` for JSON and for protocol 0 and 1 pickles (which do not
    /// announce one).
    pub pickle_protocol: Option<u8>,
    /// Trace entries skipped because strata does not know their action (`annotate`,
    /// user-defined actions), counted by action name.
    pub skipped_actions: BTreeMap<String, usize>,
    /// Keys that were ignored, as paths with the indices left out
    /// (`external_annotations`, `segments[].frames[].fx_node_op`).
    pub ignored_keys: BTreeSet<String>,
    /// Category names strata does not know, read as no category, counted by name.
    pub unknown_categories: BTreeMap<String, usize>,
}

impl ReadNotes {
    /// How many trace entries were skipped.
    pub fn skipped_trace_entries(&self) -> usize {
        self.skipped_actions.values().sum()
    }
}

impl Snapshot {
    /// Reads a pickled snapshot: the file `torch.cuda.memory._dump_snapshot()` writes (the
    /// dict `torch.cuda.memory._snapshot()` returns, at any pickle protocol from 0 to 5), the
    /// list `torch.cuda.memory.memory_snapshot()` returns, or strata's
    /// [`to_pickle`](Self::to_pickle), which reads back equal to the snapshot written.
    ///
    /// Unknown keys are ignored and trace entries with unknown actions skipped; see
    /// [`from_pickle_with_notes`](Self::from_pickle_with_notes) to learn which.
    ///
    /// ```
    /// use strata_alloc::{CachingAllocator, DeviceAllocator, Site, Snapshot, VirtualBacking};
    /// let a = CachingAllocator::new(VirtualBacking::new(1 << 30));
    /// let _b = a.allocate(100, &Site::unknown("example")).unwrap();
    /// let snap = a.snapshot();
    /// assert_eq!(Snapshot::from_pickle(&snap.to_pickle()).unwrap(), snap);
    /// ```
    pub fn from_pickle(bytes: &[u8]) -> Result<Snapshot, SnapshotReadError> {
        Self::from_pickle_with_notes(bytes).map(|(s, _)| s)
    }

    /// [`from_pickle`](Self::from_pickle), also telling what was skipped or ignored.
    pub fn from_pickle_with_notes(
        bytes: &[u8],
    ) -> Result<(Snapshot, ReadNotes), SnapshotReadError> {
        read_pickle(bytes, None)
    }

    /// Reads a snapshot file: a pickle (see [`from_pickle`](Self::from_pickle)) or strata's
    /// JSON (see [`from_json`](Self::from_json)), told apart by the first byte that is not
    /// white space (`{` for JSON; a pickle starts with `0x80`, or for protocols 0 and 1 with
    /// another opcode). [`load_with_notes`](Self::load_with_notes) also says which it was.
    pub fn load(path: impl AsRef<Path>) -> Result<Snapshot, SnapshotReadError> {
        Self::load_with_notes(path).map(|(s, _)| s)
    }

    /// [`load`](Self::load), also telling the format ([`ReadNotes::format`]) and what was
    /// skipped or ignored.
    pub fn load_with_notes(
        path: impl AsRef<Path>,
    ) -> Result<(Snapshot, ReadNotes), SnapshotReadError> {
        let path = path.as_ref();
        let io = |source| SnapshotReadError::Io {
            path: path.to_owned(),
            source,
        };
        let large = fs::metadata(path).map_err(io)?.len() >= PROGRESS_EVERY as u64;
        if large {
            // Read through a mapping whose pages go back to the kernel behind the reader.
            let file = ReadAhead::open(path).map_err(io)?;
            let release = |upto: usize| file.release_before(upto);
            return read_file(file.bytes(), path, Some(&release));
        }
        let bytes = fs::read(path).map_err(io)?;
        read_file(&bytes, path, None)
    }
}

/// A snapshot file's bytes: strata's JSON or a pickle (see [`Snapshot::load`]).
fn read_file(
    bytes: &[u8],
    path: &Path,
    progress: Option<&dyn Fn(usize)>,
) -> Result<(Snapshot, ReadNotes), SnapshotReadError> {
    {
        let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
        if first == Some(&b'{') {
            let snapshot: Snapshot =
                serde_json::from_slice(bytes).map_err(|source| SnapshotReadError::Json {
                    path: path.to_owned(),
                    source,
                })?;
            let notes = ReadNotes {
                format: SnapshotFormat::Json,
                ..ReadNotes::default()
            };
            Ok((snapshot, notes))
        } else {
            read_pickle(bytes, progress)
        }
    }
}

/// A pickled snapshot, its trace entries mapped as they are read (see `TraceTable`).
fn read_pickle(
    bytes: &[u8],
    progress: Option<&dyn Fn(usize)>,
) -> Result<(Snapshot, ReadNotes), SnapshotReadError> {
    let mut table = TraceTable::default();
    let unpickled = unpickle::loads_compacting(bytes, Some(&mut table), progress)?;
    let mut notes = ReadNotes {
        format: SnapshotFormat::Pickle,
        pickle_protocol: unpickled.protocol,
        ..ReadNotes::default()
    };
    let snapshot = snapshot(&unpickled.value, &mut notes, &mut table)?;
    table.merge_notes(&mut notes);
    Ok((snapshot, notes))
}

type Result<T, E = SnapshotReadError> = std::result::Result<T, E>;

fn wrong(path: &str, expected: &str, found: &PyValue) -> SnapshotReadError {
    SnapshotReadError::WrongType {
        path: path.to_owned(),
        expected: expected.to_owned(),
        found: describe(found),
    }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

/// One of the names of a snake_case enum (`TraceAction`, `BlockState`, `PoolKind`,
/// `Category`), through its serde derive; `None` for a name it does not know.
fn variant<'de, T: Deserialize<'de>>(name: &'de str) -> Option<T> {
    let de: StrDeserializer<'de, serde::de::value::Error> = name.into_deserializer();
    T::deserialize(de).ok()
}

fn to_u64(path: &str, v: &PyValue) -> Result<u64> {
    match v {
        PyValue::Int(i) => u64::try_from(*i).map_err(|_| wrong(path, "an int in 0..2**64", v)),
        _ => Err(wrong(path, "an int", v)),
    }
}

fn to_i64(path: &str, v: &PyValue) -> Result<i64> {
    match v {
        PyValue::Int(i) => i64::try_from(*i).map_err(|_| wrong(path, "an int in -2**63..2**63", v)),
        _ => Err(wrong(path, "an int", v)),
    }
}

fn to_str<'a>(path: &str, v: &'a PyValue) -> Result<&'a str> {
    match v {
        PyValue::Str(s) => Ok(s),
        _ => Err(wrong(path, "a str", v)),
    }
}

fn to_list<'a>(path: &str, v: &'a PyValue) -> Result<&'a [PyValue]> {
    match v {
        PyValue::List(items) | PyValue::Tuple(items) => Ok(items),
        _ => Err(wrong(path, "a list", v)),
    }
}

/// A dict of the snapshot with its path (`segments[3]`) and its path without indices
/// (`segments[]`, for [`ReadNotes::ignored_keys`]).
struct Dict<'a> {
    path: Cow<'a, str>,
    generic: Cow<'a, str>,
    entries: Items<'a>,
}

/// A dict's items: a value tree's, or a trace entry's as the reader still holds them.
#[derive(Clone, Copy)]
enum Items<'a> {
    Tree(&'a [(String, PyValue)]),
    Read(&'a [(&'a str, &'a PyValue)]),
}

impl<'a> Items<'a> {
    fn iter(self) -> impl Iterator<Item = (&'a str, &'a PyValue)> {
        let (tree, read) = match self {
            Items::Tree(t) => (t, &[][..]),
            Items::Read(r) => (&[][..], r),
        };
        tree.iter()
            .map(|(k, v)| (k.as_str(), v))
            .chain(read.iter().map(|&(k, v)| (k, v)))
    }
}

impl<'a> Dict<'a> {
    fn of(
        v: &'a PyValue,
        path: impl Into<Cow<'a, str>>,
        generic: impl Into<Cow<'a, str>>,
    ) -> Result<Dict<'a>> {
        let path = path.into();
        match v {
            PyValue::Dict(entries) => Ok(Dict {
                path,
                generic: generic.into(),
                entries: Items::Tree(entries),
            }),
            _ => Err(wrong(&path, "a dict", v)),
        }
    }

    fn at(&self, key: &str) -> String {
        join(&self.path, key)
    }

    fn get(&self, key: &str) -> Option<&'a PyValue> {
        self.entries.iter().find(|(k, _)| *k == key).map(|(_, v)| v)
    }

    /// The value of `key`, `None` when it is missing or Python's `None`.
    fn present(&self, key: &str) -> Option<&'a PyValue> {
        self.get(key).filter(|v| **v != PyValue::None)
    }

    fn req(&self, key: &str) -> Result<&'a PyValue> {
        self.get(key)
            .ok_or_else(|| SnapshotReadError::Missing { path: self.at(key) })
    }

    fn u64(&self, key: &str) -> Result<u64> {
        to_u64(&self.at(key), self.req(key)?)
    }

    fn opt_u64(&self, key: &str) -> Result<Option<u64>> {
        self.present(key)
            .map(|v| to_u64(&self.at(key), v))
            .transpose()
    }

    fn i64_or(&self, key: &str, default: i64) -> Result<i64> {
        self.present(key)
            .map_or(Ok(default), |v| to_i64(&self.at(key), v))
    }

    fn str(&self, key: &str) -> Result<&'a str> {
        to_str(&self.at(key), self.req(key)?)
    }

    fn bool_or(&self, key: &str, default: bool) -> Result<bool> {
        match self.present(key) {
            None => Ok(default),
            Some(PyValue::Bool(b)) => Ok(*b),
            Some(PyValue::Int(i @ (0 | 1))) => Ok(*i == 1),
            Some(v) => Err(wrong(&self.at(key), "a bool", v)),
        }
    }

    /// A list, empty when the key is missing or `None`.
    fn list(&self, key: &str) -> Result<&'a [PyValue]> {
        self.present(key)
            .map_or(Ok(&[][..]), |v| to_list(&self.at(key), v))
    }

    /// Records the keys not in `known` as ignored (once: a long trace repeats them).
    fn note_unknown(&self, known: &[&str], notes: &mut ReadNotes) {
        for (k, _) in self.entries.iter() {
            if known.contains(&k) {
                continue;
            }
            let g: &str = &self.generic;
            let noted = notes.ignored_keys.iter().any(|n| match n.strip_suffix(k) {
                Some(head) if g.is_empty() => head.is_empty(),
                Some(head) => head.strip_suffix('.') == Some(g),
                None => false,
            });
            if !noted {
                notes.ignored_keys.insert(join(&self.generic, k));
            }
        }
    }

    /// The category under `key`: unknown names are counted and read as none.
    fn category(&self, key: &str, notes: &mut ReadNotes) -> Result<Option<Category>> {
        let Some(v) = self.present(key) else {
            return Ok(None);
        };
        let name = to_str(&self.at(key), v)?;
        let category = variant::<Category>(name);
        if category.is_none() {
            *notes.unknown_categories.entry(name.to_owned()).or_default() += 1;
        }
        Ok(category)
    }
}

fn snapshot(v: &PyValue, notes: &mut ReadNotes, table: &mut TraceTable) -> Result<Snapshot> {
    match v {
        PyValue::Dict(entries) if entries.iter().any(|(k, _)| k == "segments") => {
            let top = Dict::of(v, "", "")?;
            top.note_unknown(&["segments", "device_traces", "allocator_settings"], notes);
            let segments = segments(top.req("segments")?, "segments", notes)?;
            let device_traces = top
                .list("device_traces")?
                .iter()
                .enumerate()
                .map(|(d, t)| trace(t, d, notes, table))
                .collect::<Result<_>>()?;
            let allocator_settings = match top.present("allocator_settings") {
                Some(s) => settings(s, notes)?,
                None => default_settings(),
            };
            Ok(Snapshot {
                segments,
                device_traces,
                allocator_settings,
            })
        }
        // `torch.cuda.memory.memory_snapshot()`: the segments alone.
        PyValue::List(items) if items.iter().all(is_segment) => Ok(Snapshot {
            segments: segments(v, "", notes)?,
            device_traces: Vec::new(),
            allocator_settings: default_settings(),
        }),
        _ => Err(SnapshotReadError::NotASnapshot {
            found: describe_top(v),
        }),
    }
}

fn is_segment(v: &PyValue) -> bool {
    matches!(v, PyValue::Dict(d) if d.iter().any(|(k, _)| k == "blocks")
        && d.iter().any(|(k, _)| k == "total_size"))
}

/// What a pickle that is no snapshot holds, for [`SnapshotReadError::NotASnapshot`].
fn describe_top(v: &PyValue) -> String {
    match v {
        PyValue::List(items) | PyValue::Tuple(items) => match items.first() {
            Some(first) => format!("{} (the first is {})", describe(v), describe(first)),
            None => describe(v),
        },
        _ => describe(v),
    }
}

/// The settings of a snapshot that has none: strata's defaults.
fn default_settings() -> AllocatorSettings {
    AllocatorSettings {
        conf: String::new(),
        backend: "native".to_owned(),
        max_split_size: -1,
        garbage_collection_threshold: 0.0,
        expandable_segments: false,
        roundup_power2_divisions: (0..ROUNDUP_INTERVALS)
            .map(|i| ((1u64 << i).to_string(), 0))
            .collect(),
        memory_limit: None,
        ties_by_address: true,
    }
}

fn segments(v: &PyValue, path: &str, notes: &mut ReadNotes) -> Result<Vec<SegmentSnapshot>> {
    to_list(path, v)?
        .iter()
        .enumerate()
        .map(|(i, s)| segment(s, format!("{path}[{i}]"), format!("{path}[]"), notes))
        .collect()
}

fn frames(d: &Dict<'_>, notes: &mut ReadNotes) -> Result<Vec<Frame>> {
    frame_list(
        d.list("frames")?,
        &d.at("frames"),
        &join(&d.generic, "frames[]"),
        notes,
    )
}

/// The frames of a stack at `path` (`generic`: the path without indices).
fn frame_list(
    items: &[PyValue],
    path: &str,
    generic: &str,
    notes: &mut ReadNotes,
) -> Result<Vec<Frame>> {
    items
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let f = Dict::of(f, format!("{path}[{i}]"), generic)?;
            f.note_unknown(&["filename", "line", "name"], notes);
            let line = match f.present("line") {
                None => 0,
                Some(v) => {
                    let line = to_i64(&f.at("line"), v)?;
                    u32::try_from(line).map_err(|_| wrong(&f.at("line"), "a line number", v))?
                }
            };
            Ok(Frame {
                filename: f.str("filename")?.to_owned(),
                line,
                name: f.str("name")?.to_owned(),
            })
        })
        .collect()
}

fn segment(
    v: &PyValue,
    path: String,
    generic: String,
    notes: &mut ReadNotes,
) -> Result<SegmentSnapshot> {
    let s = Dict::of(v, path, generic)?;
    s.note_unknown(
        &[
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
        ],
        notes,
    );
    let address = s.u64("address")?;
    let total_size = s.u64("total_size")?;
    let segment_type = match s.present("segment_type") {
        Some(t) => {
            let name = to_str(&s.at("segment_type"), t)?;
            variant::<PoolKind>(name).ok_or_else(|| SnapshotReadError::WrongType {
                path: s.at("segment_type"),
                expected: "\"small\" or \"large\"".to_owned(),
                found: describe(t),
            })?
        }
        // Small-pool segments are 2 MiB.
        None if total_size <= SMALL_BUFFER as u64 => PoolKind::Small,
        None => PoolKind::Large,
    };
    let segment_pool_id = match s.present("segment_pool_id") {
        None => (0, 0),
        Some(id) => {
            let path = s.at("segment_pool_id");
            match to_list(&path, id)? {
                [a, b] => (
                    to_u64(&format!("{path}[0]"), a)?,
                    to_u64(&format!("{path}[1]"), b)?,
                ),
                _ => return Err(wrong(&path, "a tuple of two ints", id)),
            }
        }
    };
    let blocks_path = s.at("blocks");
    let blocks_generic = join(&s.generic, "blocks[]");
    let mut blocks = Vec::new();
    let mut next = address;
    for (i, b) in s.list("blocks")?.iter().enumerate() {
        let block = block(
            b,
            format!("{blocks_path}[{i}]"),
            blocks_generic.clone(),
            next,
            notes,
        )?;
        next = block.address.saturating_add(block.size);
        blocks.push(block);
    }
    let sum = |keep: fn(BlockState) -> bool, size: fn(&BlockSnapshot) -> u64| {
        blocks
            .iter()
            .filter(|b| keep(b.state))
            .map(size)
            .fold(0u64, u64::saturating_add)
    };
    let allocated = sum(|st| st == BlockState::ActiveAllocated, |b| b.size);
    let active = sum(|st| st != BlockState::Inactive, |b| b.size);
    let requested = sum(|st| st != BlockState::Inactive, |b| b.requested_size);
    Ok(SegmentSnapshot {
        device: s.i64_or("device", 0)?,
        address,
        total_size,
        allocated_size: s.opt_u64("allocated_size")?.unwrap_or(allocated),
        active_size: s.opt_u64("active_size")?.unwrap_or(active),
        requested_size: s.opt_u64("requested_size")?.unwrap_or(requested),
        stream: s.opt_u64("stream")?.unwrap_or(0),
        segment_type,
        segment_pool_id,
        is_expandable: s.bool_or("is_expandable", false)?,
        frames: frames(&s, notes)?,
        blocks,
    })
}

fn block(
    v: &PyValue,
    path: String,
    generic: String,
    next: u64,
    notes: &mut ReadNotes,
) -> Result<BlockSnapshot> {
    let b = Dict::of(v, path, generic)?;
    b.note_unknown(
        &[
            "address",
            "size",
            "requested_size",
            "state",
            "frames",
            "category",
        ],
        notes,
    );
    let size = b.u64("size")?;
    let state_value = b.req("state")?;
    let name = to_str(&b.at("state"), state_value)?;
    // PyTorch's docstring calls the middle state `active_awaiting_free`.
    let state = match name {
        "active_awaiting_free" => Some(BlockState::ActivePendingFree),
        _ => variant::<BlockState>(name),
    }
    .ok_or_else(|| SnapshotReadError::WrongType {
        path: b.at("state"),
        expected: "\"active_allocated\", \"active_pending_free\" or \"inactive\"".to_owned(),
        found: describe(state_value),
    })?;
    let default_requested = if state == BlockState::Inactive {
        0
    } else {
        size
    };
    Ok(BlockSnapshot {
        address: b.opt_u64("address")?.unwrap_or(next),
        size,
        requested_size: b.opt_u64("requested_size")?.unwrap_or(default_requested),
        state,
        frames: frames(&b, notes)?,
        category: b.category("category", notes)?,
    })
}

fn settings(v: &PyValue, notes: &mut ReadNotes) -> Result<AllocatorSettings> {
    let s = Dict::of(
        v,
        "allocator_settings".to_owned(),
        "allocator_settings".to_owned(),
    )?;
    s.note_unknown(
        &[
            "PYTORCH_CUDA_ALLOC_CONF",
            "PYTORCH_ALLOC_CONF",
            "STRATA_ALLOC_CONF",
            "backend",
            "max_split_size",
            "garbage_collection_threshold",
            "expandable_segments",
            "roundup_power2_divisions",
            "memory_limit",
            "ties_by_address",
            // PyTorch's pinned-memory and lock settings, which strata does not implement.
            "pinned_num_register_threads",
            "release_lock_on_cudamalloc",
            "pinned_use_cuda_host_register",
        ],
        notes,
    );
    let defaults = default_settings();
    let conf = [
        "PYTORCH_CUDA_ALLOC_CONF",
        "PYTORCH_ALLOC_CONF",
        "STRATA_ALLOC_CONF",
    ]
    .into_iter()
    .find_map(|k| s.present(k).map(|v| (k, v)))
    .map(|(k, v)| to_str(&s.at(k), v).map(str::to_owned))
    .transpose()?
    .unwrap_or_default();
    let backend = match s.present("backend") {
        Some(v) => to_str(&s.at("backend"), v)?.to_owned(),
        None => defaults.backend,
    };
    // PyTorch writes SIZE_MAX (unlimited) cast to int64, which is -1; a larger value is
    // unlimited too.
    let max_split_size = match s.present("max_split_size") {
        None => -1,
        Some(PyValue::Int(i)) => i64::try_from(*i).unwrap_or(-1),
        Some(v) => return Err(wrong(&s.at("max_split_size"), "an int", v)),
    };
    let garbage_collection_threshold = match s.present("garbage_collection_threshold") {
        None => 0.0,
        Some(PyValue::Float(f)) => *f,
        Some(PyValue::Int(i)) => *i as f64,
        Some(v) => return Err(wrong(&s.at("garbage_collection_threshold"), "a float", v)),
    };
    let roundup_path = s.at("roundup_power2_divisions");
    let roundup_power2_divisions = match s.present("roundup_power2_divisions") {
        None => defaults.roundup_power2_divisions,
        Some(PyValue::Dict(entries)) => entries
            .iter()
            .map(|(k, v)| Ok((k.clone(), to_u64(&format!("{roundup_path}.{k}"), v)?)))
            .collect::<Result<BTreeMap<_, _>>>()?,
        // A list of divisions per bucket, bucket `i` starting at 2**i MiB.
        Some(PyValue::List(items)) => items
            .iter()
            .enumerate()
            .map(|(i, v)| {
                let key = 1u64.checked_shl(i as u32).unwrap_or(0).to_string();
                Ok((key, to_u64(&format!("{roundup_path}[{i}]"), v)?))
            })
            .collect::<Result<BTreeMap<_, _>>>()?,
        Some(v) => return Err(wrong(&roundup_path, "a dict", v)),
    };
    Ok(AllocatorSettings {
        conf,
        backend,
        max_split_size,
        garbage_collection_threshold,
        expandable_segments: s.bool_or("expandable_segments", false)?,
        roundup_power2_divisions,
        memory_limit: s.opt_u64("memory_limit")?,
        ties_by_address: s.bool_or("ties_by_address", true)?,
    })
}
mod trace;

use trace::{trace, TraceTable};

#[cfg(test)]
mod tests;
