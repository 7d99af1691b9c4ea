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
use super::snapshot_read::SnapshotReadError;

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

// Opcodes (CPython's `Lib/pickle.py` names).
const MARK: u8 = b'(';
const STOP: u8 = b'.';
const POP: u8 = b'0';
const POP_MARK: u8 = b'1';
const DUP: u8 = b'2';
const FLOAT: u8 = b'F';
const INT: u8 = b'I';
const BININT: u8 = b'J';
const BININT1: u8 = b'K';
const LONG: u8 = b'L';
const BININT2: u8 = b'M';
const NONE: u8 = b'N';
const PERSID: u8 = b'P';
const BINPERSID: u8 = b'Q';
const REDUCE: u8 = b'R';
const STRING: u8 = b'S';
const BINSTRING: u8 = b'T';
const SHORT_BINSTRING: u8 = b'U';
const UNICODE: u8 = b'V';
const BINUNICODE: u8 = b'X';
const APPEND: u8 = b'a';
const BUILD: u8 = b'b';
const GLOBAL: u8 = b'c';
const DICT: u8 = b'd';
const EMPTY_DICT: u8 = b'}';
const APPENDS: u8 = b'e';
const GET: u8 = b'g';
const BINGET: u8 = b'h';
const INST: u8 = b'i';
const LONG_BINGET: u8 = b'j';
const LIST: u8 = b'l';
const EMPTY_LIST: u8 = b']';
const OBJ: u8 = b'o';
const PUT: u8 = b'p';
const BINPUT: u8 = b'q';
const LONG_BINPUT: u8 = b'r';
const SETITEM: u8 = b's';
const TUPLE: u8 = b't';
const EMPTY_TUPLE: u8 = b')';
const SETITEMS: u8 = b'u';
const BINFLOAT: u8 = b'G';
const PROTO: u8 = 0x80;
const NEWOBJ: u8 = 0x81;
const EXT1: u8 = 0x82;
const EXT2: u8 = 0x83;
const EXT4: u8 = 0x84;
const TUPLE1: u8 = 0x85;
const TUPLE2: u8 = 0x86;
const TUPLE3: u8 = 0x87;
const NEWTRUE: u8 = 0x88;
const NEWFALSE: u8 = 0x89;
const LONG1: u8 = 0x8a;
const LONG4: u8 = 0x8b;
const BINBYTES: u8 = b'B';
const SHORT_BINBYTES: u8 = b'C';
const SHORT_BINUNICODE: u8 = 0x8c;
const BINUNICODE8: u8 = 0x8d;
const BINBYTES8: u8 = 0x8e;
const EMPTY_SET: u8 = 0x8f;
const ADDITEMS: u8 = 0x90;
const FROZENSET: u8 = 0x91;
const NEWOBJ_EX: u8 = 0x92;
const STACK_GLOBAL: u8 = 0x93;
const MEMOIZE: u8 = 0x94;
const FRAME: u8 = 0x95;
const BYTEARRAY8: u8 = 0x96;
const NEXT_BUFFER: u8 = 0x97;
const READONLY_BUFFER: u8 = 0x98;

/// The name of a pickle opcode, `None` for a byte that is not one.
pub(crate) fn opcode_name(op: u8) -> Option<&'static str> {
    Some(match op {
        MARK => "MARK",
        STOP => "STOP",
        POP => "POP",
        POP_MARK => "POP_MARK",
        DUP => "DUP",
        FLOAT => "FLOAT",
        INT => "INT",
        BININT => "BININT",
        BININT1 => "BININT1",
        LONG => "LONG",
        BININT2 => "BININT2",
        NONE => "NONE",
        PERSID => "PERSID",
        BINPERSID => "BINPERSID",
        REDUCE => "REDUCE",
        STRING => "STRING",
        BINSTRING => "BINSTRING",
        SHORT_BINSTRING => "SHORT_BINSTRING",
        UNICODE => "UNICODE",
        BINUNICODE => "BINUNICODE",
        APPEND => "APPEND",
        BUILD => "BUILD",
        GLOBAL => "GLOBAL",
        DICT => "DICT",
        EMPTY_DICT => "EMPTY_DICT",
        APPENDS => "APPENDS",
        GET => "GET",
        BINGET => "BINGET",
        INST => "INST",
        LONG_BINGET => "LONG_BINGET",
        LIST => "LIST",
        EMPTY_LIST => "EMPTY_LIST",
        OBJ => "OBJ",
        PUT => "PUT",
        BINPUT => "BINPUT",
        LONG_BINPUT => "LONG_BINPUT",
        SETITEM => "SETITEM",
        TUPLE => "TUPLE",
        EMPTY_TUPLE => "EMPTY_TUPLE",
        SETITEMS => "SETITEMS",
        BINFLOAT => "BINFLOAT",
        PROTO => "PROTO",
        NEWOBJ => "NEWOBJ",
        EXT1 => "EXT1",
        EXT2 => "EXT2",
        EXT4 => "EXT4",
        TUPLE1 => "TUPLE1",
        TUPLE2 => "TUPLE2",
        TUPLE3 => "TUPLE3",
        NEWTRUE => "NEWTRUE",
        NEWFALSE => "NEWFALSE",
        LONG1 => "LONG1",
        LONG4 => "LONG4",
        BINBYTES => "BINBYTES",
        SHORT_BINBYTES => "SHORT_BINBYTES",
        SHORT_BINUNICODE => "SHORT_BINUNICODE",
        BINUNICODE8 => "BINUNICODE8",
        BINBYTES8 => "BINBYTES8",
        EMPTY_SET => "EMPTY_SET",
        ADDITEMS => "ADDITEMS",
        FROZENSET => "FROZENSET",
        NEWOBJ_EX => "NEWOBJ_EX",
        STACK_GLOBAL => "STACK_GLOBAL",
        MEMOIZE => "MEMOIZE",
        FRAME => "FRAME",
        BYTEARRAY8 => "BYTEARRAY8",
        NEXT_BUFFER => "NEXT_BUFFER",
        READONLY_BUFFER => "READONLY_BUFFER",
        _ => return None,
    })
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
pub(crate) fn loads(data: &[u8]) -> Result<Unpickled, SnapshotReadError> {
    let mut m = Machine {
        data,
        pos: 0,
        arena: Vec::new(),
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        protocol: None,
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
type Id = usize;

/// A Python object while the pickle is being read. Containers hold arena indices, so that
/// every reference to a container sees what is added to it later.
enum Obj {
    /// `None`, a bool, an int, a float, a str or bytes.
    Atom(PyValue),
    List(Vec<Id>),
    Tuple(Vec<Id>),
    /// Keys are checked to be strings when the item is set.
    Dict(Vec<(String, Id)>),
    /// A `set` or `frozenset`; read as a list.
    Set(Vec<Id>),
}

impl Obj {
    fn kind(&self) -> &'static str {
        match self {
            Obj::Atom(v) => type_name(v),
            Obj::List(_) => "a list",
            Obj::Tuple(_) => "a tuple",
            Obj::Dict(_) => "a dict",
            Obj::Set(_) => "a set",
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
    }
}

struct Machine<'a> {
    data: &'a [u8],
    /// The next byte to read.
    pos: usize,
    arena: Vec<Obj>,
    stack: Vec<Id>,
    /// Stack lengths at each open `MARK`.
    marks: Vec<usize>,
    memo: HashMap<u64, Id>,
    protocol: Option<u8>,
}

impl<'a> Machine<'a> {
    fn truncated(&self, reading: String) -> SnapshotReadError {
        SnapshotReadError::Truncated {
            offset: self.data.len(),
            reading,
        }
    }

    fn malformed(at: usize, message: String) -> SnapshotReadError {
        SnapshotReadError::Malformed {
            offset: at,
            message,
        }
    }

    /// The next `n` bytes; `what` names them for the truncation error.
    fn take(
        &mut self,
        n: u64,
        what: impl FnOnce() -> String,
    ) -> Result<&'a [u8], SnapshotReadError> {
        let left = self.data.len().saturating_sub(self.pos);
        match usize::try_from(n) {
            Ok(n) if n <= left => {
                let bytes = self.data.get(self.pos..self.pos + n).unwrap_or_default();
                self.pos += n;
                Ok(bytes)
            }
            _ => Err(self.truncated(what())),
        }
    }

    fn take_array<const N: usize>(
        &mut self,
        what: impl FnOnce() -> String,
    ) -> Result<[u8; N], SnapshotReadError> {
        let bytes = self.take(N as u64, what)?;
        <[u8; N]>::try_from(bytes).map_err(|_| Self::malformed(self.pos, "short read".to_owned()))
    }

    /// The argument of a text opcode: the bytes up to the next `\n` (which is consumed).
    fn line(&mut self, name: &str, at: usize) -> Result<&'a [u8], SnapshotReadError> {
        let rest = self.data.get(self.pos..).unwrap_or_default();
        match rest.iter().position(|&b| b == b'\n') {
            Some(n) => {
                let line = rest.get(..n).unwrap_or_default();
                self.pos += n + 1;
                Ok(line)
            }
            None => Err(self.truncated(format!(
                "the text argument of {name} at byte {at} (a line ending in a newline)"
            ))),
        }
    }

    /// A length field of `size` bytes (1, 4 or 8, little-endian, unsigned).
    fn length(&mut self, size: usize, name: &str, at: usize) -> Result<u64, SnapshotReadError> {
        let what = || format!("the {size}-byte length of {name} at byte {at}");
        Ok(match size {
            1 => u64::from(self.take_array::<1>(what)?[0]),
            4 => u64::from(u32::from_le_bytes(self.take_array::<4>(what)?)),
            _ => u64::from_le_bytes(self.take_array::<8>(what)?),
        })
    }

    /// A length-prefixed payload: the length field, then that many bytes.
    fn counted(
        &mut self,
        size: usize,
        name: &str,
        at: usize,
    ) -> Result<&'a [u8], SnapshotReadError> {
        let n = self.length(size, name, at)?;
        self.take(n, || {
            format!("the {n} bytes of data of {name} at byte {at}")
        })
    }

    fn new_obj(&mut self, obj: Obj) -> Id {
        self.arena.push(obj);
        self.arena.len() - 1
    }

    fn push(&mut self, obj: Obj) {
        let id = self.new_obj(obj);
        self.stack.push(id);
    }

    fn push_atom(&mut self, v: PyValue) {
        self.push(Obj::Atom(v));
    }

    /// The stack length below which the current mark hides items.
    fn base(&self) -> usize {
        self.marks.last().copied().unwrap_or(0)
    }

    fn pop(&mut self, name: &str, at: usize) -> Result<Id, SnapshotReadError> {
        if self.stack.len() > self.base() {
            if let Some(id) = self.stack.pop() {
                return Ok(id);
            }
        }
        Err(Self::malformed(
            at,
            format!("{name} needs a value, but the stack is empty (stack underflow)"),
        ))
    }

    fn top(&self, name: &str, at: usize) -> Result<Id, SnapshotReadError> {
        match self.stack.last() {
            Some(&id) if self.stack.len() > self.base() => Ok(id),
            _ => Err(Self::malformed(
                at,
                format!("{name} needs a value, but the stack is empty (stack underflow)"),
            )),
        }
    }

    /// The items pushed since the last `MARK`, which is removed.
    fn pop_mark(&mut self, name: &str, at: usize) -> Result<Vec<Id>, SnapshotReadError> {
        let Some(mark) = self.marks.pop() else {
            return Err(Self::malformed(
                at,
                format!("{name} takes the items after a MARK, but there is no MARK before it"),
            ));
        };
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    fn str_key(&self, key: Id, name: &str, at: usize) -> Result<String, SnapshotReadError> {
        match self.arena.get(key) {
            Some(Obj::Atom(PyValue::Str(s))) => Ok(s.clone()),
            Some(Obj::Atom(v)) => Err(Self::malformed(
                at,
                format!(
                    "{name} sets a dict key that is {}, not a str: snapshot dicts have \
                     string keys only",
                    describe(v)
                ),
            )),
            Some(other) => Err(Self::malformed(
                at,
                format!(
                    "{name} sets a dict key that is {}, not a str: snapshot dicts have \
                     string keys only",
                    other.kind()
                ),
            )),
            None => Err(Self::malformed(at, format!("{name}: dangling reference"))),
        }
    }

    fn pairs(
        &self,
        items: &[Id],
        name: &str,
        at: usize,
    ) -> Result<Vec<(String, Id)>, SnapshotReadError> {
        if !items.len().is_multiple_of(2) {
            return Err(Self::malformed(
                at,
                format!(
                    "{name} takes key-value pairs after its MARK, but there are {} items \
                     (an odd number)",
                    items.len()
                ),
            ));
        }
        items
            .chunks_exact(2)
            .map(|kv| match kv {
                [k, v] => Ok((self.str_key(*k, name, at)?, *v)),
                _ => Err(Self::malformed(at, format!("{name}: odd item count"))),
            })
            .collect()
    }

    fn dict_mut(
        &mut self,
        id: Id,
        name: &str,
        at: usize,
    ) -> Result<&mut Vec<(String, Id)>, SnapshotReadError> {
        match self.arena.get_mut(id) {
            Some(Obj::Dict(entries)) => Ok(entries),
            Some(other) => {
                let kind = other.kind();
                Err(Self::malformed(
                    at,
                    format!("{name} sets items on {kind}, which is not a dict"),
                ))
            }
            None => Err(Self::malformed(at, format!("{name}: dangling reference"))),
        }
    }

    fn memo_put(&mut self, index: u64, name: &str, at: usize) -> Result<(), SnapshotReadError> {
        let id = self.top(name, at)?;
        self.memo.insert(index, id);
        Ok(())
    }

    fn memo_get(&mut self, index: u64, name: &str, at: usize) -> Result<(), SnapshotReadError> {
        match self.memo.get(&index) {
            Some(&id) => {
                self.stack.push(id);
                Ok(())
            }
            None => Err(Self::malformed(
                at,
                format!("{name} fetches memo entry {index}, which no PUT or MEMOIZE stored"),
            )),
        }
    }

    /// A decimal argument of a text opcode (`PUT`, `GET`).
    fn decimal(&mut self, name: &str, at: usize) -> Result<u64, SnapshotReadError> {
        let line = self.line(name, at)?;
        std::str::from_utf8(line)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                Self::malformed(
                    at,
                    format!(
                        "{name} expects a decimal memo index, found {:?}",
                        String::from_utf8_lossy(line)
                    ),
                )
            })
    }

    fn text_int(&mut self, name: &str, at: usize) -> Result<(), SnapshotReadError> {
        let line = self.line(name, at)?;
        if name == "INT" && (line == b"00" || line == b"01") {
            self.push_atom(PyValue::Bool(line == b"01"));
            return Ok(());
        }
        let text = String::from_utf8_lossy(line);
        let digits = text.trim();
        let digits = if name == "LONG" {
            digits.strip_suffix('L').unwrap_or(digits)
        } else {
            digits
        };
        match digits.parse::<i128>() {
            Ok(v) => {
                self.push_atom(PyValue::Int(v));
                Ok(())
            }
            Err(_) => Err(Self::malformed(
                at,
                format!(
                    "{name} expects a decimal int that fits in 128 bits, found {:?}",
                    text.as_ref()
                ),
            )),
        }
    }

    /// Runs the opcodes up to `STOP`; returns the value on top of the stack and where the
    /// `STOP` was.
    fn run(&mut self) -> Result<(Id, usize), SnapshotReadError> {
        loop {
            let at = self.pos;
            let Some(&op) = self.data.get(at) else {
                let reading = if at == 0 {
                    "the first opcode (the input is empty)".to_owned()
                } else {
                    "the next opcode (the pickle has no STOP opcode: it was cut short)".to_owned()
                };
                return Err(self.truncated(reading));
            };
            self.pos += 1;
            match op {
                PROTO => {
                    let [p] = self
                        .take_array::<1>(|| format!("the protocol number of PROTO at byte {at}"))?;
                    if p > HIGHEST_PROTOCOL {
                        return Err(Self::malformed(
                            at,
                            format!(
                                "the pickle announces protocol {p}; this reader knows \
                                 protocols 0 to {HIGHEST_PROTOCOL} (pickle with \
                                 protocol={HIGHEST_PROTOCOL} or lower)"
                            ),
                        ));
                    }
                    self.protocol = Some(p);
                }
                FRAME => {
                    let n = self.length(8, "FRAME", at)?;
                    let start = self.pos;
                    let left = self.data.len().saturating_sub(start);
                    if usize::try_from(n).map_or(true, |n| n > left) {
                        return Err(self.truncated(format!(
                            "a frame of {n} bytes that starts at byte {start} (only {left} \
                             bytes are left)"
                        )));
                    }
                }
                STOP => {
                    let root = self.pop("STOP", at)?;
                    return Ok((root, at));
                }
                MARK => self.marks.push(self.stack.len()),
                POP => {
                    if self.stack.len() > self.base() {
                        self.stack.pop();
                    } else {
                        // As CPython: POP with nothing above the mark drops the mark.
                        self.pop_mark("POP", at)?;
                    }
                }
                POP_MARK => {
                    self.pop_mark("POP_MARK", at)?;
                }
                DUP => {
                    let id = self.top("DUP", at)?;
                    self.stack.push(id);
                }
                NONE => self.push_atom(PyValue::None),
                NEWTRUE => self.push_atom(PyValue::Bool(true)),
                NEWFALSE => self.push_atom(PyValue::Bool(false)),
                BININT => {
                    let b =
                        self.take_array::<4>(|| format!("the 4 bytes of BININT at byte {at}"))?;
                    self.push_atom(PyValue::Int(i128::from(i32::from_le_bytes(b))));
                }
                BININT1 => {
                    let [b] =
                        self.take_array::<1>(|| format!("the 1 byte of BININT1 at byte {at}"))?;
                    self.push_atom(PyValue::Int(i128::from(b)));
                }
                BININT2 => {
                    let b =
                        self.take_array::<2>(|| format!("the 2 bytes of BININT2 at byte {at}"))?;
                    self.push_atom(PyValue::Int(i128::from(u16::from_le_bytes(b))));
                }
                LONG1 => {
                    let bytes = self.counted(1, "LONG1", at)?;
                    let v = long_from_bytes(bytes).ok_or_else(|| too_big("LONG1", at, bytes))?;
                    self.push_atom(PyValue::Int(v));
                }
                LONG4 => {
                    let b = self
                        .take_array::<4>(|| format!("the 4-byte length of LONG4 at byte {at}"))?;
                    let n = i32::from_le_bytes(b);
                    let Ok(n) = u64::try_from(n) else {
                        return Err(Self::malformed(
                            at,
                            format!("LONG4 has a negative length ({n})"),
                        ));
                    };
                    let bytes =
                        self.take(n, || format!("the {n} bytes of data of LONG4 at byte {at}"))?;
                    let v = long_from_bytes(bytes).ok_or_else(|| too_big("LONG4", at, bytes))?;
                    self.push_atom(PyValue::Int(v));
                }
                INT => self.text_int("INT", at)?,
                LONG => self.text_int("LONG", at)?,
                BINFLOAT => {
                    let b =
                        self.take_array::<8>(|| format!("the 8 bytes of BINFLOAT at byte {at}"))?;
                    self.push_atom(PyValue::Float(f64::from_be_bytes(b)));
                }
                FLOAT => {
                    let line = self.line("FLOAT", at)?;
                    let text = String::from_utf8_lossy(line);
                    let Ok(f) = text.trim().parse::<f64>() else {
                        return Err(Self::malformed(
                            at,
                            format!("FLOAT expects a decimal number, found {:?}", text.as_ref()),
                        ));
                    };
                    self.push_atom(PyValue::Float(f));
                }
                SHORT_BINUNICODE | BINUNICODE | BINUNICODE8 => {
                    let (size, name) = match op {
                        SHORT_BINUNICODE => (1, "SHORT_BINUNICODE"),
                        BINUNICODE => (4, "BINUNICODE"),
                        _ => (8, "BINUNICODE8"),
                    };
                    let bytes = self.counted(size, name, at)?;
                    // CPython writes lone surrogates (undecodable file names) with
                    // `surrogatepass`; those read as U+FFFD rather than failing the snapshot.
                    let s = String::from_utf8_lossy(bytes).into_owned();
                    self.push_atom(PyValue::Str(s));
                }
                UNICODE => {
                    let line = self.line("UNICODE", at)?;
                    self.push_atom(PyValue::Str(raw_unicode_escape(line)));
                }
                SHORT_BINSTRING | BINSTRING => {
                    // Python 2 `str`: Python 3 reads it as text.
                    let bytes = if op == SHORT_BINSTRING {
                        self.counted(1, "SHORT_BINSTRING", at)?
                    } else {
                        let b = self.take_array::<4>(|| {
                            format!("the 4-byte length of BINSTRING at byte {at}")
                        })?;
                        let n = i32::from_le_bytes(b);
                        let Ok(n) = u64::try_from(n) else {
                            return Err(Self::malformed(
                                at,
                                format!("BINSTRING has a negative length ({n})"),
                            ));
                        };
                        self.take(n, || {
                            format!("the {n} bytes of data of BINSTRING at byte {at}")
                        })?
                    };
                    self.push_atom(PyValue::Str(String::from_utf8_lossy(bytes).into_owned()));
                }
                SHORT_BINBYTES | BINBYTES | BINBYTES8 | BYTEARRAY8 => {
                    let (size, name) = match op {
                        SHORT_BINBYTES => (1, "SHORT_BINBYTES"),
                        BINBYTES => (4, "BINBYTES"),
                        BINBYTES8 => (8, "BINBYTES8"),
                        _ => (8, "BYTEARRAY8"),
                    };
                    let bytes = self.counted(size, name, at)?;
                    self.push_atom(PyValue::Bytes(bytes.to_vec()));
                }
                EMPTY_DICT => self.push(Obj::Dict(Vec::new())),
                EMPTY_LIST => self.push(Obj::List(Vec::new())),
                EMPTY_TUPLE => self.push(Obj::Tuple(Vec::new())),
                EMPTY_SET => self.push(Obj::Set(Vec::new())),
                TUPLE => {
                    let items = self.pop_mark("TUPLE", at)?;
                    self.push(Obj::Tuple(items));
                }
                TUPLE1 | TUPLE2 | TUPLE3 => {
                    let (n, name) = match op {
                        TUPLE1 => (1, "TUPLE1"),
                        TUPLE2 => (2, "TUPLE2"),
                        _ => (3, "TUPLE3"),
                    };
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop(name, at)?);
                    }
                    items.reverse();
                    self.push(Obj::Tuple(items));
                }
                LIST => {
                    let items = self.pop_mark("LIST", at)?;
                    self.push(Obj::List(items));
                }
                FROZENSET => {
                    let items = self.pop_mark("FROZENSET", at)?;
                    self.push(Obj::Set(items));
                }
                DICT => {
                    let items = self.pop_mark("DICT", at)?;
                    let pairs = self.pairs(&items, "DICT", at)?;
                    self.push(Obj::Dict(pairs));
                }
                APPEND => {
                    let item = self.pop("APPEND", at)?;
                    let target = self.top("APPEND", at)?;
                    self.extend(target, vec![item], "APPEND", at)?;
                }
                APPENDS | ADDITEMS => {
                    let name = if op == APPENDS { "APPENDS" } else { "ADDITEMS" };
                    let items = self.pop_mark(name, at)?;
                    let target = self.top(name, at)?;
                    self.extend(target, items, name, at)?;
                }
                SETITEM => {
                    let value = self.pop("SETITEM", at)?;
                    let key = self.pop("SETITEM", at)?;
                    let key = self.str_key(key, "SETITEM", at)?;
                    let target = self.top("SETITEM", at)?;
                    self.dict_mut(target, "SETITEM", at)?.push((key, value));
                }
                SETITEMS => {
                    let items = self.pop_mark("SETITEMS", at)?;
                    let pairs = self.pairs(&items, "SETITEMS", at)?;
                    let target = self.top("SETITEMS", at)?;
                    self.dict_mut(target, "SETITEMS", at)?.extend(pairs);
                }
                BINPUT => {
                    let [i] =
                        self.take_array::<1>(|| format!("the memo index of BINPUT at byte {at}"))?;
                    self.memo_put(u64::from(i), "BINPUT", at)?;
                }
                LONG_BINPUT => {
                    let b = self.take_array::<4>(|| {
                        format!("the memo index of LONG_BINPUT at byte {at}")
                    })?;
                    self.memo_put(u64::from(u32::from_le_bytes(b)), "LONG_BINPUT", at)?;
                }
                PUT => {
                    let i = self.decimal("PUT", at)?;
                    self.memo_put(i, "PUT", at)?;
                }
                MEMOIZE => {
                    let i = self.memo.len() as u64;
                    self.memo_put(i, "MEMOIZE", at)?;
                }
                BINGET => {
                    let [i] =
                        self.take_array::<1>(|| format!("the memo index of BINGET at byte {at}"))?;
                    self.memo_get(u64::from(i), "BINGET", at)?;
                }
                LONG_BINGET => {
                    let b = self.take_array::<4>(|| {
                        format!("the memo index of LONG_BINGET at byte {at}")
                    })?;
                    self.memo_get(u64::from(u32::from_le_bytes(b)), "LONG_BINGET", at)?;
                }
                GET => {
                    let i = self.decimal("GET", at)?;
                    self.memo_get(i, "GET", at)?;
                }
                _ => {
                    return Err(SnapshotReadError::UnsupportedOpcode {
                        opcode: op,
                        name: opcode_name(op),
                        offset: at,
                    })
                }
            }
        }
    }

    fn extend(
        &mut self,
        target: Id,
        items: Vec<Id>,
        name: &str,
        at: usize,
    ) -> Result<(), SnapshotReadError> {
        let want_set = name == "ADDITEMS";
        match self.arena.get_mut(target) {
            Some(Obj::List(list)) if !want_set => {
                list.extend(items);
                Ok(())
            }
            Some(Obj::Set(set)) if want_set => {
                set.extend(items);
                Ok(())
            }
            Some(other) => {
                let kind = other.kind();
                let wants = if want_set { "a set" } else { "a list" };
                Err(Self::malformed(
                    at,
                    format!("{name} adds items to {kind}, which is not {wants}"),
                ))
            }
            None => Err(Self::malformed(at, format!("{name}: dangling reference"))),
        }
    }

    /// The [`PyValue`] tree of `id`, copying shared objects at each reference.
    fn build(
        &self,
        id: Id,
        depth: usize,
        budget: &mut usize,
        stop_at: usize,
    ) -> Result<PyValue, SnapshotReadError> {
        if depth > MAX_DEPTH {
            return Err(Self::malformed(
                stop_at,
                format!(
                    "the pickled value nests containers more than {MAX_DEPTH} levels deep (or \
                     contains itself); a memory snapshot nests 8 levels"
                ),
            ));
        }
        if *budget == 0 {
            return Err(Self::malformed(
                stop_at,
                format!(
                    "the pickled value expands to more than {} values through shared \
                     references ({} bytes of input); a memory snapshot shares only frames and \
                     strings, so this pickle is corrupt or hostile",
                    expansion_budget(self.data.len()),
                    self.data.len()
                ),
            ));
        }
        *budget -= 1;
        let Some(obj) = self.arena.get(id) else {
            return Err(Self::malformed(stop_at, "dangling reference".to_owned()));
        };
        let items = |ids: &[Id], budget: &mut usize| {
            ids.iter()
                .map(|&i| self.build(i, depth + 1, budget, stop_at))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(match obj {
            Obj::Atom(v) => v.clone(),
            Obj::List(ids) | Obj::Set(ids) => PyValue::List(items(ids, budget)?),
            Obj::Tuple(ids) => PyValue::Tuple(items(ids, budget)?),
            Obj::Dict(entries) => {
                let mut out: Vec<(String, PyValue)> = Vec::with_capacity(entries.len());
                // A key set twice keeps its first position and its last value, as in Python.
                // Small dicts (frames, blocks) are searched; large ones indexed.
                let mut index: Option<HashMap<&str, usize>> =
                    (entries.len() > 16).then(HashMap::new);
                for (k, v) in entries {
                    let v = self.build(*v, depth + 1, budget, stop_at)?;
                    let slot = match &index {
                        Some(ix) => ix.get(k.as_str()).copied(),
                        None => out.iter().position(|(seen, _)| seen == k),
                    };
                    match slot.and_then(|i| out.get_mut(i)) {
                        Some(existing) => existing.1 = v,
                        None => {
                            if let Some(ix) = &mut index {
                                ix.insert(k.as_str(), out.len());
                            }
                            out.push((k.clone(), v));
                        }
                    }
                }
                PyValue::Dict(out)
            }
        })
    }
}

fn too_big(name: &str, at: usize, bytes: &[u8]) -> SnapshotReadError {
    SnapshotReadError::Malformed {
        offset: at,
        message: format!(
            "{name} holds an int of {} bytes, which does not fit in 128 bits; a snapshot's \
             ints (addresses, sizes, times) fit in 64",
            bytes.len()
        ),
    }
}

/// Decodes CPython's `encode_long`: little-endian two's complement, empty for 0. `None` when
/// the value does not fit in an `i128`.
fn long_from_bytes(bytes: &[u8]) -> Option<i128> {
    let Some(&last) = bytes.last() else {
        return Some(0);
    };
    let negative = last & 0x80 != 0;
    let fill = if negative { 0xff } else { 0x00 };
    let (low, high) = bytes.split_at(bytes.len().min(16));
    // Bytes beyond the 16th must be sign extension, and must agree with bit 127.
    if !high.iter().all(|&b| b == fill) {
        return None;
    }
    let mut buf = [fill; 16];
    buf.get_mut(..low.len())?.copy_from_slice(low);
    let v = i128::from_le_bytes(buf);
    if (v < 0) != negative {
        return None;
    }
    Some(v)
}

/// Decodes Python's `raw-unicode-escape` (the argument of protocol 0's `UNICODE`): bytes are
/// Latin-1 characters except `\uXXXX` and `\UXXXXXXXX` escapes.
fn raw_unicode_escape(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'\\' {
            let width = match bytes.get(i + 1) {
                Some(b'u') => 4,
                Some(b'U') => 8,
                _ => 0,
            };
            if width > 0 {
                let hex = bytes
                    .get(i + 2..i + 2 + width)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u32::from_str_radix(h, 16).ok());
                if let Some(code) = hex {
                    out.push(char::from_u32(code).unwrap_or(char::REPLACEMENT_CHARACTER));
                    i += 2 + width;
                    continue;
                }
            }
        }
        out.push(char::from(b));
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::pickle::dumps;
    use super::*;

    fn load(data: &[u8]) -> PyValue {
        match loads(data) {
            Ok(u) => u.value,
            Err(e) => panic!("{e}"),
        }
    }

    fn err(data: &[u8]) -> SnapshotReadError {
        match loads(data) {
            Ok(u) => panic!("expected an error, read {:?}", u.value),
            Err(e) => e,
        }
    }

    fn s(v: &str) -> PyValue {
        PyValue::Str(v.to_owned())
    }

    #[test]
    fn scalars_of_every_protocol() {
        // pickle.dumps(None, 2), True/False at protocol 2 and 0.
        assert_eq!(load(b"\x80\x02N."), PyValue::None);
        assert_eq!(load(b"\x80\x02\x88."), PyValue::Bool(true));
        assert_eq!(load(b"\x80\x02\x89."), PyValue::Bool(false));
        assert_eq!(load(b"I01\n."), PyValue::Bool(true));
        assert_eq!(load(b"I00\n."), PyValue::Bool(false));
        // Ints: BININT1, BININT2, BININT (negative), LONG1, text INT and LONG.
        assert_eq!(load(b"\x80\x04K\x07."), PyValue::Int(7));
        assert_eq!(load(b"\x80\x04M\x00\x01."), PyValue::Int(256));
        assert_eq!(load(b"\x80\x04J\xff\xff\xff\xff."), PyValue::Int(-1));
        assert_eq!(
            load(b"\x80\x02\x8a\x05\x00\x00\x00\x80\x00."),
            PyValue::Int(1 << 31)
        );
        assert_eq!(load(b"I-42\n."), PyValue::Int(-42));
        assert_eq!(
            load(b"L18446744073709551615L\n."),
            PyValue::Int(u64::MAX.into())
        );
        // pickle.dumps(2**64, 2): LONG1 of 9 bytes.
        assert_eq!(
            load(b"\x80\x02\x8a\x09\x00\x00\x00\x00\x00\x00\x00\x00\x01."),
            PyValue::Int(1 << 64)
        );
        // LONG4 with 3 bytes: -2**23.
        assert_eq!(
            load(b"\x80\x02\x8b\x03\x00\x00\x00\x00\x00\x80."),
            PyValue::Int(-(1 << 23))
        );
        // LONG1 of length 0 is 0.
        assert_eq!(load(b"\x80\x02\x8a\x00."), PyValue::Int(0));
        // Floats: BINFLOAT and text FLOAT.
        assert_eq!(
            load(b"\x80\x04G\x3f\xf8\x00\x00\x00\x00\x00\x00."),
            PyValue::Float(1.5)
        );
        assert_eq!(load(b"F0.25\n."), PyValue::Float(0.25));
    }

    #[test]
    fn strings_and_bytes() {
        assert_eq!(load(b"\x80\x04\x8c\x02\xc3\xa9."), s("é"));
        assert_eq!(load(b"\x80\x02X\x03\x00\x00\x00abc."), s("abc"));
        assert_eq!(
            load(b"\x80\x04\x8d\x02\x00\x00\x00\x00\x00\x00\x00hi."),
            s("hi")
        );
        // Protocol 0: raw-unicode-escape with PUT.
        assert_eq!(load(b"Va\\u005cb\\u00e9\np0\n."), s("a\\bé"));
        assert_eq!(load(b"U\x02py."), s("py"));
        assert_eq!(load(b"T\x01\x00\x00\x00q."), s("q"));
        assert_eq!(
            load(b"\x80\x03C\x03\x01\x02\x03."),
            PyValue::Bytes(vec![1, 2, 3])
        );
        assert_eq!(
            load(b"\x80\x03B\x01\x00\x00\x00\xff."),
            PyValue::Bytes(vec![255])
        );
        assert_eq!(
            load(b"\x80\x04\x8e\x01\x00\x00\x00\x00\x00\x00\x00z."),
            PyValue::Bytes(vec![b'z'])
        );
        // Invalid UTF-8 (a lone surrogate written with surrogatepass) is replaced.
        assert_eq!(
            load(b"\x80\x04\x8c\x03\xed\xb3\xbf."),
            s("\u{fffd}\u{fffd}\u{fffd}")
        );
    }

    #[test]
    fn containers() {
        // pickle.dumps({'a': [1, 2], 'b': (3,)}, 2)
        let v = load(b"\x80\x02}q\x00(X\x01\x00\x00\x00aq\x01]q\x02(K\x01K\x02eX\x01\x00\x00\x00bq\x03K\x03\x85q\x04u.");
        assert_eq!(
            v,
            PyValue::Dict(vec![
                (
                    "a".into(),
                    PyValue::List(vec![PyValue::Int(1), PyValue::Int(2)])
                ),
                ("b".into(), PyValue::Tuple(vec![PyValue::Int(3)])),
            ])
        );
        // Protocol 0 dict, list and tuple: (dp0 / (lp1 / ( ... t.
        let v = load(b"(dp0\nVk\np1\n(lp2\nI1\naI2\nas.");
        assert_eq!(
            v,
            PyValue::Dict(vec![(
                "k".into(),
                PyValue::List(vec![PyValue::Int(1), PyValue::Int(2)])
            )])
        );
        // TUPLE2, TUPLE3, EMPTY_TUPLE, MARK ... TUPLE, LIST, DICT.
        assert_eq!(
            load(b"\x80\x02K\x01K\x02\x86."),
            PyValue::Tuple(vec![PyValue::Int(1), PyValue::Int(2)])
        );
        assert_eq!(
            load(b"\x80\x02NNN\x87."),
            PyValue::Tuple(vec![PyValue::None; 3])
        );
        assert_eq!(load(b"\x80\x02)."), PyValue::Tuple(vec![]));
        assert_eq!(load(b"(NNNNt."), PyValue::Tuple(vec![PyValue::None; 4]));
        assert_eq!(load(b"(NNl."), PyValue::List(vec![PyValue::None; 2]));
        assert_eq!(
            load(b"(Vx\nNd."),
            PyValue::Dict(vec![("x".into(), PyValue::None)])
        );
        // Sets and frozensets read as lists: EMPTY_SET MARK ... ADDITEMS; MARK ... FROZENSET.
        assert_eq!(
            load(b"\x80\x04\x8f(K\x01K\x02\x90."),
            PyValue::List(vec![PyValue::Int(1), PyValue::Int(2)])
        );
        assert_eq!(
            load(b"\x80\x04(K\x05\x91."),
            PyValue::List(vec![PyValue::Int(5)])
        );
        // A key set twice keeps its first place and its last value.
        assert_eq!(
            load(b"\x80\x04}(\x8c\x01aK\x01\x8c\x01bK\x02\x8c\x01aK\x03u."),
            PyValue::Dict(vec![
                ("a".into(), PyValue::Int(3)),
                ("b".into(), PyValue::Int(2))
            ])
        );
    }

    #[test]
    fn stack_opcodes() {
        // POP, DUP, POP_MARK, and POP of an empty mark (drops the mark).
        assert_eq!(load(b"\x80\x02K\x01K\x020."), PyValue::Int(1));
        assert_eq!(
            load(b"\x80\x02K\x012\x86."),
            PyValue::Tuple(vec![PyValue::Int(1), PyValue::Int(1)])
        );
        assert_eq!(load(b"\x80\x02K\x01(K\x02K\x031."), PyValue::Int(1));
        assert_eq!(load(b"\x80\x02K\x01(0."), PyValue::Int(1));
        // FRAME is skipped over; bytes after STOP are ignored.
        assert_eq!(
            load(b"\x80\x04\x95\x02\x00\x00\x00\x00\x00\x00\x00N.trailing"),
            PyValue::None
        );
    }

    #[test]
    fn memo_keeps_reference_semantics() {
        // d = {}; x = [d, d]; d['k'] = 1 -- pickled as a memoized empty dict that is filled
        // after its first use and fetched again with BINGET.
        let v = load(b"\x80\x04]\x94}\x94ah\x01\x8c\x01kK\x01s0h\x01a.");
        let d = PyValue::Dict(vec![("k".into(), PyValue::Int(1))]);
        assert_eq!(v, PyValue::List(vec![d.clone(), d]));
        // LONG_BINPUT / LONG_BINGET and text PUT / GET.
        assert_eq!(
            load(b"\x80\x02K\x07r\x05\x00\x00\x00j\x05\x00\x00\x00\x86."),
            PyValue::Tuple(vec![PyValue::Int(7), PyValue::Int(7)])
        );
        assert_eq!(
            load(b"I7\np9\ng9\n\x86."),
            PyValue::Tuple(vec![PyValue::Int(7), PyValue::Int(7)])
        );
    }

    #[test]
    fn round_trips_the_writer() {
        let v = PyValue::Dict(vec![
            ("none".into(), PyValue::None),
            ("big".into(), PyValue::Int(u64::MAX.into())),
            ("neg".into(), PyValue::Int(i64::MIN.into())),
            ("f".into(), PyValue::Float(-0.5)),
            ("s".into(), s(&"é".repeat(200))),
            ("b".into(), PyValue::Bytes(vec![0; 300])),
            ("short".into(), PyValue::Bytes(vec![1, 2])),
            (
                "l".into(),
                PyValue::List((0..2500).map(PyValue::Int).collect()),
            ),
            (
                "t".into(),
                PyValue::Tuple(vec![PyValue::Bool(true), PyValue::None, s("x"), s("y")]),
            ),
        ]);
        assert_eq!(load(&dumps(&v)), v);
    }

    #[test]
    fn unsupported_opcodes_are_named() {
        // pickle.dumps(collections.OrderedDict(), 2) starts with GLOBAL.
        let e = err(b"\x80\x02ccollections\nOrderedDict\nq\x00)Rq\x01.");
        let msg = e.to_string();
        assert!(
            msg.contains("unsupported pickle opcode 0x63 ('c', GLOBAL) at byte 2"),
            "{msg}"
        );
        assert!(msg.contains("a snapshot holds only dicts, lists, strings and numbers"));
        let msg = err(b"\x80\x04\x8c\x01a\x8c\x01b\x93.").to_string();
        assert!(
            msg.contains("0x93 ('\\x93', STACK_GLOBAL) at byte 8"),
            "{msg}"
        );
        for (data, name) in [
            (&b"\x80\x02)R."[..], "REDUCE"),
            (b"\x80\x02NNb.", "BUILD"),
            (b"\x80\x02)\x81.", "NEWOBJ"),
            (b"Pid\n.", "PERSID"),
            (b"\x80\x05\x97.", "NEXT_BUFFER"),
            (b"S'x'\n.", "STRING"),
        ] {
            let e = err(data);
            assert!(
                matches!(e, SnapshotReadError::UnsupportedOpcode { .. }),
                "{e}"
            );
            assert!(e.to_string().contains(name), "{e}");
        }
        let msg = err(b"\x80\x04\xff.").to_string();
        assert!(
            msg.contains("0xff") && msg.contains("not a pickle opcode"),
            "{msg}"
        );
    }

    #[test]
    fn truncation_names_the_byte_and_what_was_read() {
        let e = err(b"");
        assert!(
            matches!(e, SnapshotReadError::Truncated { offset: 0, .. }),
            "{e}"
        );
        let e = err(b"\x80\x04N");
        let msg = e.to_string();
        assert!(msg.contains("byte 3") && msg.contains("STOP"), "{msg}");
        // A string length far beyond the data: an error, not an allocation.
        let msg = err(b"\x80\x04\x8d\xff\xff\xff\xff\xff\xff\xff\xffab").to_string();
        assert!(
            msg.contains("truncated") && msg.contains("byte 13"),
            "{msg}"
        );
        assert!(msg.contains("BINUNICODE8 at byte 2"), "{msg}");
        let msg = err(b"\x80\x04\x95\x00\x10\x00\x00\x00\x00\x00\x00}").to_string();
        assert!(msg.contains("frame of 4096 bytes"), "{msg}");
        let msg = err(b"\x80\x02J\x01\x02").to_string();
        assert!(msg.contains("BININT at byte 2"), "{msg}");
        let msg = err(b"I12").to_string();
        assert!(msg.contains("INT at byte 0"), "{msg}");
        let msg = err(b"\x80\x02\x8b\xff\xff\xff\x7f").to_string();
        assert!(msg.contains("LONG4"), "{msg}");
    }

    #[test]
    fn malformed_streams_are_errors() {
        let cases: [(&[u8], &str); 12] = [
            (b"\x80\x02.", "stack underflow"),
            (b"\x80\x02a.", "stack underflow"),
            (b"\x80\x02Ne.", "no MARK"),
            (b"\x80\x02}Nu.", "no MARK"),
            (b"\x80\x02h\x03.", "memo entry 3"),
            (b"\x80\x02q\x00.", "stack underflow"),
            (b"\x80\x02}K\x01K\x02s.", "an int (1), not a str"),
            (b"\x80\x02}(\x8c\x01aK\x01\x8c\x01bu.", "odd number"),
            (b"\x80\x02NK\x01a.", "not a list"),
            (b"\x80\x02]\x8c\x01kK\x01s.", "not a dict"),
            (b"\x80\x06N.", "protocol 6"),
            (b"\x80\x02\x8b\xff\xff\xff\xffN.", "negative length"),
        ];
        for (data, want) in cases {
            let e = err(data);
            assert!(
                matches!(e, SnapshotReadError::Malformed { .. }),
                "{data:?}: {e}"
            );
            assert!(e.to_string().contains(want), "{data:?}: {e}");
        }
        // An int of 17 significant bytes does not fit.
        let mut big = b"\x80\x02\x8a\x11".to_vec();
        big.extend([0xff; 16]);
        big.extend([0x01, b'.']);
        assert!(err(&big).to_string().contains("128 bits"));
        // A non-string key in a DICT built from a MARK.
        let msg = err(b"(K\x01K\x02d.").to_string();
        assert!(msg.contains("not a str"), "{msg}");
    }

    #[test]
    fn deep_nesting_and_expansion_are_bounded() {
        // 10_000 nested lists: ]]]...]a a a ... -- rejected, no stack overflow.
        let mut deep = b"\x80\x04".to_vec();
        deep.extend(std::iter::repeat_n(b']', 10_000));
        deep.extend(std::iter::repeat_n(b'a', 9_999));
        deep.push(b'.');
        let msg = err(&deep).to_string();
        assert!(msg.contains("levels deep"), "{msg}");
        // A list containing itself.
        let msg = err(b"\x80\x04]\x94h\x00a.").to_string();
        assert!(msg.contains("levels deep"), "{msg}");
        // "Billion laughs": each level is a list holding the previous one twice.
        let mut laughs = b"\x80\x04N".to_vec();
        for _ in 0..100 {
            laughs.extend_from_slice(b"2\x86");
        }
        laughs.push(b'.');
        let msg = err(&laughs).to_string();
        assert!(msg.contains("shared references"), "{msg}");
    }

    #[test]
    fn long_bytes_decoding() {
        assert_eq!(long_from_bytes(&[]), Some(0));
        assert_eq!(long_from_bytes(&[0x80]), Some(-128));
        assert_eq!(long_from_bytes(&[0x80, 0x00]), Some(128));
        assert_eq!(long_from_bytes(&[0xff; 20]), Some(-1));
        let mut max = vec![0xff; 15];
        max.push(0x7f);
        assert_eq!(long_from_bytes(&max), Some(i128::MAX));
        max.push(0x00);
        assert_eq!(long_from_bytes(&max), Some(i128::MAX));
        // 2**127 needs 17 bytes and does not fit.
        let mut over = vec![0x00; 15];
        over.extend([0x80, 0x00]);
        assert_eq!(long_from_bytes(&over), None);
    }

    #[test]
    fn never_panics_on_arbitrary_bytes() {
        // Every prefix and single-byte corruption of a small pickle.
        let base = dumps(&PyValue::Dict(vec![
            (
                "a".into(),
                PyValue::List(vec![PyValue::Int(1 << 40), s("x")]),
            ),
            ("b".into(), PyValue::Tuple(vec![PyValue::Float(1.0)])),
        ]));
        for n in 0..base.len() {
            let _ = loads(&base[..n]);
        }
        for i in 0..base.len() {
            for b in 0..=255u8 {
                let mut d = base.clone();
                d[i] = b;
                let _ = loads(&d);
            }
        }
    }
}
