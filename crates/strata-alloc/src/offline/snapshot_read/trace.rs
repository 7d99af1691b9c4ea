//! Trace entries: the table the pickle reader fills as it reads (a [`unpickle::Compactor`]),
//! and the mapping of each entry, shared by that table and by the generic reading of a value
//! tree.

use std::borrow::Cow;
use std::collections::HashSet;

use super::*;

/// The generic path of a trace entry, for [`ReadNotes::ignored_keys`].
const ENTRY: &str = "device_traces[][]";

/// Trace entries mapped while the pickle was read (see [`unpickle::Compactor`]): a long
/// trace goes from the pickle's bytes to entries without a tree of Python values between.
#[derive(Default)]
pub(super) struct TraceTable {
    /// The entries, in the order they were read; `None` once moved into the snapshot.
    entries: Option<Vec<TraceEntrySnapshot>>,
    /// What mapping them noted.
    notes: ReadNotes,
    /// Every distinct stack, so that equal ones are one allocation even when the pickle
    /// repeats their frames rather than referencing them.
    stacks: HashSet<Frames>,
}

impl unpickle::Compactor for TraceTable {
    fn stack(&mut self, frames: &PyValue) -> Option<Frames> {
        let path = format!("{ENTRY}.frames");
        let items = to_list(&path, frames).ok()?;
        let generic = format!("{ENTRY}.frames[]");
        let frames = frame_list(items, &path, &generic, &mut self.notes).ok()?;
        if let Some(same) = self.stacks.get(frames.as_slice()) {
            return Some(same.clone());
        }
        let frames = Frames::from(frames);
        self.stacks.insert(frames.clone());
        Some(frames)
    }

    fn entry(&mut self, items: &[(&str, &PyValue)], frames: Frames) -> Option<usize> {
        let d = Dict {
            path: Cow::Borrowed(ENTRY),
            generic: Cow::Borrowed(ENTRY),
            entries: Items::Read(items),
        };
        let entry = trace_entry(&d, Some(frames), &mut self.notes).ok()??;
        let entries = self.entries.get_or_insert_with(Vec::new);
        entries.push(entry);
        Some(entries.len() - 1)
    }
}

impl TraceTable {
    /// Entries `first..first + len`: moved out when they are the whole table (a snapshot's
    /// one trace), else copied.
    pub(super) fn take(
        &mut self,
        first: usize,
        len: usize,
        path: &str,
    ) -> Result<Vec<TraceEntrySnapshot>> {
        let whole = first == 0 && self.entries.as_ref().is_some_and(|e| e.len() == len);
        if whole {
            return Ok(self.entries.take().unwrap_or_default());
        }
        self.entries
            .as_ref()
            .and_then(|e| e.get(first..first.checked_add(len)?))
            .map(<[TraceEntrySnapshot]>::to_vec)
            .ok_or_else(|| SnapshotReadError::WrongType {
                path: path.to_owned(),
                expected: "a trace read once".to_owned(),
                found: "a trace another device's list shares".to_owned(),
            })
    }

    /// Adds what mapping the entries noted to `notes`. Entries of unknown actions were
    /// declined, left to the snapshot's mapping, which counts them.
    pub(super) fn merge_notes(self, notes: &mut ReadNotes) {
        notes.ignored_keys.extend(self.notes.ignored_keys);
        for (name, n) in self.notes.unknown_categories {
            *notes.unknown_categories.entry(name).or_default() += n;
        }
    }
}

pub(super) fn trace(
    v: &PyValue,
    device: usize,
    notes: &mut ReadNotes,
    table: &mut TraceTable,
) -> Result<Vec<TraceEntrySnapshot>> {
    let path = format!("device_traces[{device}]");
    let entries = match v {
        PyValue::None => &[][..],
        PyValue::Mapped { first, len } => return table.take(*first, *len, &path),
        _ => to_list(&path, v)?,
    };
    let mut out = Vec::with_capacity(entries.len());
    for (i, e) in entries.iter().enumerate() {
        let at = format!("{path}[{i}]");
        if let PyValue::Mapped { first, len } = e {
            out.extend(table.take(*first, *len, &at)?);
            continue;
        }
        let e = Dict::of(e, at, ENTRY)?;
        if let Some(entry) = trace_entry(&e, None, notes)? {
            out.push(entry);
        }
    }
    Ok(out)
}

/// One trace entry, with its stack when it is already mapped; `None` for an action strata
/// does not know (counted in `notes`).
fn trace_entry(
    e: &Dict<'_>,
    stack: Option<Frames>,
    notes: &mut ReadNotes,
) -> Result<Option<TraceEntrySnapshot>> {
    let name = e.str("action")?;
    let Some(action) = variant::<TraceAction>(name) else {
        *notes.skipped_actions.entry(name.to_owned()).or_default() += 1;
        return Ok(None);
    };
    e.note_unknown(
        &[
            "action",
            "addr",
            "device_free",
            "size",
            "stream",
            "time_us",
            "frames",
            "category",
        ],
        notes,
    );
    let (addr, device_free) = if action == TraceAction::Oom {
        // Older writers put the free bytes under `addr`.
        let free = match e.opt_u64("device_free")? {
            Some(f) => Some(f),
            None => e.opt_u64("addr")?,
        };
        (None, free)
    } else {
        (Some(e.u64("addr")?), e.opt_u64("device_free")?)
    };
    let size = e.u64("size")?;
    let stream = e.opt_u64("stream")?.unwrap_or(0);
    let time_us = e.i64_or("time_us", 0)?;
    let frames = match stack {
        Some(f) => f,
        None => frames(e, notes)?.into(),
    };
    Ok(Some(TraceEntrySnapshot {
        action,
        addr,
        device_free,
        size,
        stream,
        time_us,
        frames,
        category: e.category("category", notes)?,
    }))
}
