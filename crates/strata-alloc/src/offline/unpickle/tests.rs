//! Unit tests of the pickle machine: every opcode, the memo, and broken input.

use super::super::pickle::dumps;
use super::machine::long_from_bytes;
use super::*;

fn load(data: &[u8]) -> PyValue {
    match loads(data) {
        Ok(u) => u.value,
        Err(e) => panic!("{e}"),
    }
}

fn err(data: &[u8]) -> UnpickleError {
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
        assert!(matches!(e, UnpickleError::UnsupportedOpcode { .. }), "{e}");
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
        matches!(e, UnpickleError::Truncated { offset: 0, .. }),
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
            matches!(e, UnpickleError::Malformed { .. }),
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

#[test]
fn unsupported_opcode_message_shows_the_byte() {
    let unsupported = |opcode, name, offset| {
        UnpickleError::UnsupportedOpcode {
            opcode,
            name,
            offset,
        }
        .to_string()
    };
    let msg = unsupported(b'c', Some("GLOBAL"), 2);
    assert!(msg.starts_with(
        "unsupported pickle opcode 0x63 ('c', GLOBAL) at byte 2: a snapshot holds only \
         dicts, lists, strings and numbers"
    ));
    assert!(unsupported(0x93, Some("STACK_GLOBAL"), 9).contains("('\\x93', STACK"));
}
