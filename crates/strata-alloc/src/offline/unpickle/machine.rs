//! The machine: reads opcodes, keeps the stack, the marks, the memo and an arena of
//! objects, and turns the result into a [`PyValue`] tree.

use std::collections::HashMap;

use super::opcodes::*;
use super::*;

pub(super) struct Machine<'a, 'c> {
    pub(super) data: &'a [u8],
    /// The next byte to read.
    pub(super) pos: usize,
    pub(super) arena: Vec<Obj>,
    /// Per slot of the arena: whether the memo or a `DUP` refers to it, so that it may be
    /// referenced again and is never reused.
    pub(super) pinned: Vec<bool>,
    /// Slots of values a compacted trace entry held, free for new objects.
    pub(super) free: Vec<Id>,
    pub(super) stack: Vec<Id>,
    /// Stack lengths at each open `MARK`.
    pub(super) marks: Vec<usize>,
    pub(super) memo: Memo,
    pub(super) protocol: Option<u8>,
    /// Who takes trace entries over as they are read.
    pub(super) compactor: Option<&'c mut dyn Compactor>,
    /// The stacks mapped so far, by the frame dicts they list.
    pub(super) stacks: HashMap<Vec<Id>, Frames>,
    /// Told how far the machine has read, every [`PROGRESS_EVERY`] bytes.
    pub(super) progress: Option<&'c dyn Fn(usize)>,
    /// Where it is told next.
    pub(super) next_progress: usize,
}

impl<'a> Machine<'a, '_> {
    fn truncated(&self, reading: String) -> UnpickleError {
        UnpickleError::Truncated {
            offset: self.data.len(),
            reading,
        }
    }

    fn malformed(at: usize, message: String) -> UnpickleError {
        UnpickleError::Malformed {
            offset: at,
            message,
        }
    }

    /// The next `n` bytes; `what` names them for the truncation error.
    fn take(&mut self, n: u64, what: impl FnOnce() -> String) -> Result<&'a [u8], UnpickleError> {
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
    ) -> Result<[u8; N], UnpickleError> {
        let bytes = self.take(N as u64, what)?;
        <[u8; N]>::try_from(bytes).map_err(|_| Self::malformed(self.pos, "short read".to_owned()))
    }

    /// The argument of a text opcode: the bytes up to the next `\n` (which is consumed).
    fn line(&mut self, name: &str, at: usize) -> Result<&'a [u8], UnpickleError> {
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
    fn length(&mut self, size: usize, name: &str, at: usize) -> Result<u64, UnpickleError> {
        let what = || format!("the {size}-byte length of {name} at byte {at}");
        Ok(match size {
            1 => u64::from(self.take_array::<1>(what)?[0]),
            4 => u64::from(u32::from_le_bytes(self.take_array::<4>(what)?)),
            _ => u64::from_le_bytes(self.take_array::<8>(what)?),
        })
    }

    /// A length-prefixed payload: the length field, then that many bytes.
    fn counted(&mut self, size: usize, name: &str, at: usize) -> Result<&'a [u8], UnpickleError> {
        let n = self.length(size, name, at)?;
        self.take(n, || {
            format!("the {n} bytes of data of {name} at byte {at}")
        })
    }

    fn new_obj(&mut self, obj: Obj) -> Id {
        if let Some(id) = self.free.pop() {
            if let Some(slot) = self.arena.get_mut(id) {
                *slot = obj;
                return id;
            }
        }
        self.arena.push(obj);
        self.pinned.push(false);
        self.arena.len() - 1
    }

    /// The text of a dict key (checked to be a str when it was set).
    pub(super) fn key(&self, id: Id) -> &str {
        match self.arena.get(id) {
            Some(Obj::Atom(PyValue::Str(s))) => s,
            _ => "",
        }
    }

    fn pin(&mut self, id: Id) {
        if let Some(p) = self.pinned.get_mut(id) {
            *p = true;
        }
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

    fn pop(&mut self, name: &str, at: usize) -> Result<Id, UnpickleError> {
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

    fn top(&self, name: &str, at: usize) -> Result<Id, UnpickleError> {
        match self.stack.last() {
            Some(&id) if self.stack.len() > self.base() => Ok(id),
            _ => Err(Self::malformed(
                at,
                format!("{name} needs a value, but the stack is empty (stack underflow)"),
            )),
        }
    }

    /// The items pushed since the last `MARK`, which is removed.
    fn pop_mark(&mut self, name: &str, at: usize) -> Result<Vec<Id>, UnpickleError> {
        let Some(mark) = self.marks.pop() else {
            return Err(Self::malformed(
                at,
                format!("{name} takes the items after a MARK, but there is no MARK before it"),
            ));
        };
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    /// `key`, checked to be a str.
    fn str_key(&self, key: Id, name: &str, at: usize) -> Result<Id, UnpickleError> {
        match self.arena.get(key) {
            Some(Obj::Atom(PyValue::Str(_))) => Ok(key),
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

    fn pairs(&self, items: &[Id], name: &str, at: usize) -> Result<Vec<(Id, Id)>, UnpickleError> {
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
    ) -> Result<&mut Vec<(Id, Id)>, UnpickleError> {
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

    fn memo_put(&mut self, index: u64, name: &str, at: usize) -> Result<(), UnpickleError> {
        let id = self.top(name, at)?;
        self.memo.put(index, id);
        self.pin(id);
        Ok(())
    }

    fn memo_get(&mut self, index: u64, name: &str, at: usize) -> Result<(), UnpickleError> {
        match self.memo.get(index) {
            Some(id) => {
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
    fn decimal(&mut self, name: &str, at: usize) -> Result<u64, UnpickleError> {
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

    fn text_int(&mut self, name: &str, at: usize) -> Result<(), UnpickleError> {
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
    pub(super) fn run(&mut self) -> Result<(Id, usize), UnpickleError> {
        loop {
            let at = self.pos;
            if at >= self.next_progress {
                if let Some(progress) = self.progress {
                    progress(at);
                }
                self.next_progress = at.saturating_add(PROGRESS_EVERY);
            }
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
                    self.pin(id);
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
                    return Err(UnpickleError::UnsupportedOpcode {
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
    ) -> Result<(), UnpickleError> {
        let want_set = name == "ADDITEMS";
        match self.arena.get_mut(target) {
            Some(Obj::List(list)) if !want_set => {
                list.extend(items.iter().copied());
                for item in items {
                    self.compact(item);
                }
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
    pub(super) fn build(
        &self,
        id: Id,
        depth: usize,
        budget: &mut usize,
        stop_at: usize,
    ) -> Result<PyValue, UnpickleError> {
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
            Obj::Mapped(first) => PyValue::Mapped {
                first: *first,
                len: 1,
            },
            Obj::Frames(frames) => frames_value(frames),
            Obj::List(ids) => match self.mapped_run(ids) {
                Some(run) => run,
                None => PyValue::List(items(ids, budget)?),
            },
            Obj::Set(ids) => PyValue::List(items(ids, budget)?),
            Obj::Tuple(ids) => PyValue::Tuple(items(ids, budget)?),
            Obj::Dict(entries) => {
                let mut out: Vec<(String, PyValue)> = Vec::with_capacity(entries.len());
                // A key set twice keeps its first position and its last value, as in Python.
                // Small dicts (frames, blocks) are searched; large ones indexed.
                let mut index: Option<HashMap<&str, usize>> =
                    (entries.len() > 16).then(HashMap::new);
                for (k, v) in entries {
                    let k = self.key(*k);
                    let v = self.build(*v, depth + 1, budget, stop_at)?;
                    let slot = match &index {
                        Some(ix) => ix.get(k).copied(),
                        None => out.iter().position(|(seen, _)| seen == k),
                    };
                    match slot.and_then(|i| out.get_mut(i)) {
                        Some(existing) => existing.1 = v,
                        None => {
                            if let Some(ix) = &mut index {
                                ix.insert(k, out.len());
                            }
                            out.push((k.to_owned(), v));
                        }
                    }
                }
                PyValue::Dict(out)
            }
        })
    }
}

fn too_big(name: &str, at: usize, bytes: &[u8]) -> UnpickleError {
    UnpickleError::Malformed {
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
pub(super) fn long_from_bytes(bytes: &[u8]) -> Option<i128> {
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

/// A mapped stack as the list of frame dicts it was read from.
fn frames_value(frames: &Frames) -> PyValue {
    PyValue::List(
        frames
            .iter()
            .map(|f| {
                PyValue::Dict(vec![
                    ("filename".to_owned(), PyValue::Str(f.filename.clone())),
                    ("line".to_owned(), PyValue::Int(i128::from(f.line))),
                    ("name".to_owned(), PyValue::Str(f.name.clone())),
                ])
            })
            .collect(),
    )
}
