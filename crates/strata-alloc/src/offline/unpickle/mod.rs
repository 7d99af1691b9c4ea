//! Reading pickles: a small pickle virtual machine for the data a memory snapshot holds.
//!
//! It reads what CPython's pickler writes for dicts, lists, tuples, sets, strings, bytes,
//! ints, floats, booleans and `None`, at every protocol from 0 to 5 (`pickle.dump(snapshot,
//! f)`, as `torch.cuda.memory._dump_snapshot()` does, writes protocol 4 or 5 depending on the
//! Python version; strata's own writer in `pickle.rs` writes protocol 4). Everything that
//! builds a Python object from code (`GLOBAL`, `STACK_GLOBAL`, `REDUCE`, `BUILD`, `NEWOBJ`,
//! `INST`, `OBJ`, `PERSID`, extension codes, out-of-band buffers) is refused: a snapshot holds
//! no objects, and running such opcodes is how a pickle runs code.
//!
//! The machine keeps Python's reference semantics: containers live in an arena and the stack
//! and the memo hold their indices, so a dict that CPython memoizes while still empty and
//! fills afterwards reads back filled wherever it is referenced again (`BINGET`). Shared
//! objects are copied when the result is turned into a [`PyValue`] tree, within a budget
//! ([`expansion_budget`]) so that a few bytes of nested references cannot expand without
//! bound, and nesting is limited to [`MAX_DEPTH`] levels.
//!
//! Every read is bounds-checked: a length larger than the bytes left is a truncation error,
//! never an allocation, and no input makes the reader panic.

use std::collections::HashMap;

use super::pickle::PyValue;

/// The deepest nesting of containers accepted (a snapshot nests 8 levels).
pub(crate) const MAX_DEPTH: usize = 128;

/// Values the result may hold for `input_len` bytes of pickle: shared (memoized) objects are
/// copied at every reference, so this bounds the expansion. A snapshot shares its stack
/// frames and strings; 64 values per byte of input leaves room for deep shared stacks.
pub(crate) fn expansion_budget(input_len: usize) -> usize {
    input_len.saturating_mul(64).saturating_add(1 << 20)
}

/// The highest protocol this reader knows.
const HIGHEST_PROTOCOL: u8 = 5;

mod compact;
mod error;
mod machine;
mod memo;
mod opcodes;

pub use error::UnpickleError;
use machine::Machine;
use memo::Memo;

use crate::caching::Frames;

/// Takes trace entries over while the pickle is read, so that a long trace never exists as
/// a tree of Python values: each dict with an `action` key is offered as its list receives
/// it (with its `frames` mapped once per distinct stack), and one the compactor keeps reads
/// back as [`PyValue::Mapped`]. What it declines stays a dict, for the caller to map (and to
/// report, with the value's path, whatever is wrong with it).
///
/// A stack is mapped when the first entry holding it is read: a frame dict changed after
/// that (which no snapshot writer does) keeps its first contents for later entries.
pub(crate) trait Compactor {
    /// Maps one distinct stack (a list of frame dicts); `None` declines the entries holding
    /// it.
    fn stack(&mut self, frames: &PyValue) -> Option<Frames>;
    /// Takes an entry (its items other than `frames`, all plain values) with its stack;
    /// `Some(index)` when it keeps it, at that index of its table.
    fn entry(&mut self, items: &[(&str, &PyValue)], frames: Frames) -> Option<usize>;
}

/// What [`loads`] found besides the value.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Unpickled {
    /// The value the pickle holds.
    pub value: PyValue,
    /// The protocol announced by `PROTO`; `None` for protocol 0 and 1 pickles, which have no
    /// `PROTO` opcode.
    pub protocol: Option<u8>,
}

/// Reads one pickled value from the start of `data` (bytes after its `STOP` are ignored, as
/// `pickle.loads` ignores them).
#[cfg(test)]
pub(crate) fn loads(data: &[u8]) -> Result<Unpickled, UnpickleError> {
    loads_compacting(data, None, None)
}

/// How far the machine reads between two calls of its progress callback.
pub(crate) const PROGRESS_EVERY: usize = 64 << 20;

/// [`loads`], handing trace entries to `compactor` as they are read (see [`Compactor`]), and
/// telling `progress` every [`PROGRESS_EVERY`] bytes how far it has read (no byte before
/// that is read again).
pub(crate) fn loads_compacting<'c>(
    data: &[u8],
    compactor: Option<&'c mut dyn Compactor>,
    progress: Option<&'c dyn Fn(usize)>,
) -> Result<Unpickled, UnpickleError> {
    let mut m = Machine {
        data,
        pos: 0,
        arena: Vec::new(),
        pinned: Vec::new(),
        free: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: Memo::default(),
        protocol: None,
        compactor,
        stacks: HashMap::new(),
        progress,
        next_progress: PROGRESS_EVERY,
    };
    let (root, stop_at) = m.run()?;
    let mut budget = expansion_budget(data.len());
    let value = m.build(root, 0, &mut budget, stop_at)?;
    Ok(Unpickled {
        value,
        protocol: m.protocol,
    })
}

/// Index of an object in the arena.
pub(super) type Id = usize;

/// A Python object while the pickle is being read. Containers hold arena indices, so that
/// every reference to a container sees what is added to it later.
pub(super) enum Obj {
    /// `None`, a bool, an int, a float, a str or bytes.
    Atom(PyValue),
    List(Vec<Id>),
    Tuple(Vec<Id>),
    /// Keys (the ids of str atoms) are checked to be strings when the item is set.
    Dict(Vec<(Id, Id)>),
    /// A `set` or `frozenset`; read as a list.
    Set(Vec<Id>),
    /// A trace entry the [`Compactor`] took over: the index in its table.
    Mapped(usize),
    /// A list of frame dicts already mapped into a stack (it reads back as that list).
    Frames(Frames),
}

impl Obj {
    pub(super) fn kind(&self) -> &'static str {
        match self {
            Obj::Atom(v) => type_name(v),
            Obj::List(_) => "a list",
            Obj::Tuple(_) => "a tuple",
            Obj::Dict(_) => "a dict",
            Obj::Set(_) => "a set",
            Obj::Mapped(_) => "a trace entry already read",
            Obj::Frames(_) => "a stack already read",
        }
    }
}

/// "an int", "a str", ...: the Python type of `v`, with its article.
pub(crate) fn type_name(v: &PyValue) -> &'static str {
    match v {
        PyValue::None => "None",
        PyValue::Bool(_) => "a bool",
        PyValue::Int(_) => "an int",
        PyValue::Float(_) => "a float",
        PyValue::Str(_) => "a str",
        PyValue::Bytes(_) => "bytes",
        PyValue::List(_) => "a list",
        PyValue::Tuple(_) => "a tuple",
        PyValue::Dict(_) => "a dict",
        PyValue::Mapped { .. } => "trace entries",
    }
}

/// A short description of a value for error messages: its type and, for scalars, the value
/// (`a str ("abc")`, `an int (5)`, `a list of 3 items`).
pub(crate) fn describe(v: &PyValue) -> String {
    fn short(s: &str) -> String {
        let mut out: String = s.chars().take(40).collect();
        if out.len() < s.len() {
            out.push_str("...");
        }
        format!("{out:?}")
    }
    match v {
        PyValue::None => "None".to_owned(),
        PyValue::Bool(b) => format!("a bool ({})", if *b { "True" } else { "False" }),
        PyValue::Int(i) => format!("an int ({i})"),
        PyValue::Float(f) => format!("a float ({f})"),
        PyValue::Str(s) => format!("a str ({})", short(s)),
        PyValue::Bytes(b) => format!("bytes ({} bytes)", b.len()),
        PyValue::List(items) => format!("a list of {} items", items.len()),
        PyValue::Tuple(items) => format!("a tuple of {} items", items.len()),
        PyValue::Dict(entries) => {
            let keys: Vec<&str> = entries.iter().take(8).map(|(k, _)| k.as_str()).collect();
            let more = if entries.len() > keys.len() {
                ", ..."
            } else {
                ""
            };
            format!("a dict with keys {}{more}", keys.join(", "))
        }
        PyValue::Mapped { len, .. } => format!("{len} trace entries"),
    }
}

#[cfg(test)]
mod tests;
