#!/usr/bin/env python3
"""Writes the corpora of damaged and hostile files that strata's readers of outside bytes are
tested on (`cargo test`, through crates/strata-corpus): safetensors state dicts, snapshot
pickles, IDX datasets (raw and gzip), training checkpoints and conformance program documents.

Each reader gets a folder under tests/corpus/. Files named valid-* must read, bad-* must be
refused with an error, any-* (random byte flips, which may or may not matter) may do either;
none may panic or ask for a large allocation. The files are small and the output is the same
on every run (seeded), so the corpus is committed and this script only needs rerunning when a
format changes. Python's standard library only.

Usage: scripts/make-reader-corpus.py
"""

import gzip
import hashlib
import json
import random
import shutil
import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "corpus"
PICKLES = ROOT / "crates" / "strata-alloc" / "tests" / "fixtures" / "snapshots"


def write(folder, name, data):
    (OUT / folder).mkdir(parents=True, exist_ok=True)
    (OUT / folder / name).write_bytes(data)


def damage(folder, stem, data, rng, flips_are="any", flips=12):
    """Truncations of `data` (always errors) and single-byte flips (`flips_are`-*)."""
    n = len(data)
    for cut in sorted({0, 1, 7, 8, 12, 16, n // 4, n // 2, n - 33, n - 1}):
        if 0 <= cut < n:
            write(folder, f"bad-{stem}-cut-{cut}", data[:cut])
    for _ in range(flips):
        at = rng.randrange(n)
        flipped = bytearray(data)
        flipped[at] ^= 1 << rng.randrange(8)
        write(folder, f"{flips_are}-{stem}-flip-{at}", bytes(flipped))


# --- safetensors ---------------------------------------------------------------------------

def safetensors(tensors, metadata=None, raw_header=None):
    """A safetensors file of (name, dtype, shape, bytes), laid out in the given order."""
    header = {"__metadata__": {"format": "pt", **(metadata or {})}}
    at, data = 0, b""
    for name, dtype, shape, payload in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + len(payload)]}
        at += len(payload)
        data += payload
    text = raw_header if raw_header is not None else json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def make_safetensors(rng):
    f32 = struct.pack("<6f", 1, 2, 3, 4, 5, 6)
    good = [
        ("a", "F32", [2, 3], f32),
        ("b", "I64", [2], struct.pack("<2q", -1, 7)),
        ("c", "BF16", [2], b"\x80\x3f\x00\x40"),
        ("d", "BOOL", [3], b"\x01\x00\x01"),
    ]
    valid = safetensors(good, {"note": "corpus"})
    write("safetensors", "valid-four-dtypes.safetensors", valid)
    write("safetensors", "valid-empty.safetensors", safetensors([]))
    damage("safetensors", "four-dtypes", valid, rng)
    one = lambda dtype, shape, payload, offsets=None: safetensors_one(dtype, shape, payload, offsets)
    bad = {
        "header-length-max": struct.pack("<Q", 2**64 - 1) + b"{}      ",
        "header-length-past-end": struct.pack("<Q", 4096) + b"{}      ",
        "header-not-utf8": safetensors([], raw_header=b"{\"\xff\xfe\": 1}"),
        "header-not-json": safetensors([], raw_header=b"{not json"),
        "header-not-object": safetensors([], raw_header=b"[1, 2]"),
        "offsets-past-end": one("F32", [2], b"\x00" * 8, [0, 2**40]),
        "offsets-reversed": one("F32", [2], b"\x00" * 8, [8, 0]),
        "shape-overflow": one("F32", [2**40, 2**40], b"\x00" * 8, [0, 8]),
        "shape-mismatch": one("F32", [3], b"\x00" * 8),
        "unknown-dtype": one("X9", [2], b"\x00" * 8),
        "bool-byte-2": one("BOOL", [2], b"\x01\x02"),
        "trailing-bytes": valid + b"\x00" * 8,
        "gap": safetensors([], raw_header=json.dumps({
            "a": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}}).encode()) + b"\x00\x00",
        "overlap": safetensors([], raw_header=json.dumps({
            "a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
            "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}).encode()) + b"\x00" * 3,
        "metadata-not-string": safetensors([], raw_header=b"{\"__metadata__\": {\"a\": 1}}"),
    }
    for name, data in bad.items():
        write("safetensors", f"bad-{name}.safetensors", data)


def safetensors_one(dtype, shape, payload, offsets=None):
    header = {"t": {"dtype": dtype, "shape": shape,
                    "data_offsets": offsets or [0, len(payload)]}}
    return safetensors([], raw_header=json.dumps(header).encode()) + payload


# --- IDX -------------------------------------------------------------------------------------

def idx(kind, dims, body):
    return bytes([0, 0, kind, len(dims)]) + b"".join(struct.pack(">I", d) for d in dims) + body


def gz(data):
    return gzip.compress(data, mtime=0)


def make_idx(rng):
    u8 = idx(0x08, [3, 4], bytes(range(12)))
    write("idx", "valid-u8.idx", u8)
    write("idx", "valid-u8.idx.gz", gz(u8))
    write("idx", "valid-i32.idx", idx(0x0C, [2], struct.pack(">2i", -5, 7)))
    write("idx", "valid-f32.idx", idx(0x0D, [2], struct.pack(">2f", 0.5, -2)))
    write("idx", "valid-f64.idx", idx(0x0E, [1, 1], struct.pack(">d", 3.25)))
    write("idx", "valid-empty.idx", idx(0x08, [0, 28], b""))
    damage("idx", "u8", u8, rng)
    damage("idx", "u8-gz", gz(u8), rng, flips=8)
    compressed = gz(u8)
    crc = bytearray(compressed)
    crc[-6] ^= 0xFF
    bad = {
        # 2^32 elements: refused from the header alone.
        "dims-past-2-31.idx": idx(0x08, [65536, 65536], b""),
        "dims-past-2-31.idx.gz": gz(idx(0x08, [65536, 65536], b"\x00" * 1024)),
        # 10^9 elements claimed, 1 MiB inflated: the buffer follows what is inflated.
        "gzip-claims-more.idx.gz": gz(idx(0x08, [1000, 1000, 1000], b"\x00" * (1 << 20))),
        # 4 elements claimed, 16 MiB of zeros follow: reading stops one byte past the end.
        "gzip-trailing-bomb.idx.gz": gz(idx(0x08, [4], b"\x00" * (16 << 20))),
        "gzip-bad-crc.idx.gz": bytes(crc),
        "gzip-truncated.idx.gz": compressed[: len(compressed) // 2],
        "magic.idx": b"\x01\x00\x08\x01" + struct.pack(">I", 1) + b"\x00",
        "signed-type.idx": idx(0x09, [1], b"\x00"),
        "unknown-type.idx": idx(0x42, [1], b"\x00"),
        "ndim-255.idx": bytes([0, 0, 0x08, 255]) + b"\x00" * 16,
        "trailing.idx": u8 + b"\x00",
    }
    for name, data in bad.items():
        write("idx", f"bad-{name}", data)


# --- snapshot pickles -----------------------------------------------------------------------

def make_snapshot(rng):
    for base in ["pytorch-p4.pickle", "pytorch-shared-frames.pickle"]:
        data = (PICKLES / base).read_bytes()
        write("snapshot", f"valid-{base}", data)
        damage("snapshot", base.removesuffix(".pickle"), data, rng)
    proto = b"\x80\x04"
    bad = {
        "empty.pickle": b"",
        "not-a-pickle.pickle": b"hello, world\n",
        # Length fields far past the end of the input.
        "binunicode-4g.pickle": proto + b"X" + struct.pack("<I", 2**32 - 1) + b"ab.",
        "binbytes8-huge.pickle": proto + b"\x8e" + struct.pack("<Q", 2**63) + b"ab.",
        "long4-huge.pickle": proto + b"\x8b" + struct.pack("<i", 2**31 - 1) + b"ab.",
        "frame-huge.pickle": proto + b"\x95" + struct.pack("<Q", 2**62) + b"}.",
        # Memo indices far beyond the others.
        "long-binput-4g.pickle": proto + b"}r" + struct.pack("<I", 2**32 - 1) + b"0j"
        + struct.pack("<I", 2**32 - 2) + b".",
        # A list nested 100,000 deep.
        "nested-lists.pickle": proto + b"]" * 100_000 + b"a" * 99_999 + b".",
        # 100,000 marks never closed.
        "marks.pickle": proto + b"(" * 100_000 + b".",
        "no-stop.pickle": proto + b"}",
    }
    for name, data in bad.items():
        write("snapshot", f"bad-{name}", data)


# --- checkpoints ----------------------------------------------------------------------------

def frame(payload, version=1, length=None):
    head = b"STRATACK" + struct.pack("<II", version, 0)
    head += struct.pack("<Q", len(payload) if length is None else length)
    body = head + payload
    return body + hashlib.sha256(body).digest()


MANIFEST = {
    "run": {"--model": "mlp", "--lr": "0.001"},
    "data": {"training data": "64 samples, digest 00"},
    "step": 7,
    "generator": "00" * 24,
    "scaler": None,
    "figures": {
        "train_loss": [], "round_seconds": [], "accuracy": [], "test_loss": None,
        "evaluations": [], "data_wait": 0, "samples": 0, "split_steps": 0, "findings": [],
        "measured": None, "round_loss_sum": 0, "round_samples": 0, "round_elapsed": 0,
    },
}


def checkpoint_payload(manifest=MANIFEST, extra=()):
    tensors = [("model/0.weight", "F32", [2, 2], struct.pack("<4f", 1, 2, 3, 4)),
               ("optimizer/state.0.exp_avg", "F32", [2, 2], b"\x00" * 16), *extra]
    meta = {"optimizer/optimizer": "adam"}
    if manifest is not None:
        meta["strata.manifest"] = manifest if isinstance(manifest, str) else json.dumps(manifest)
    return safetensors(tensors, meta)


def make_checkpoint(rng):
    payload = checkpoint_payload()
    valid = frame(payload)
    write("checkpoint", "valid-step-00000007.ckpt", valid)
    # Every flip breaks the checksum, the framing or the payload.
    damage("checkpoint", "step", valid, rng, flips_are="bad")
    bad = {
        "magic.ckpt": b"STRATAXX" + valid[8:],
        "version-2.ckpt": frame(payload, version=2),
        "length-max.ckpt": frame(payload, length=2**64 - 1),
        "length-short.ckpt": frame(payload, length=len(payload) - 1),
        "not-safetensors.ckpt": frame(b"not a safetensors payload"),
        "no-manifest.ckpt": frame(checkpoint_payload(manifest=None)),
        "manifest-not-json.ckpt": frame(checkpoint_payload(manifest="{step: 7")),
        "manifest-no-step.ckpt": frame(checkpoint_payload(
            manifest={k: v for k, v in MANIFEST.items() if k != "step"})),
        "tensor-of-neither-part.ckpt": frame(checkpoint_payload(
            extra=[("other/x", "U8", [1], b"\x00")])),
    }
    for name, data in bad.items():
        write("checkpoint", f"bad-{name}", data)


# --- conformance program documents ---------------------------------------------------------

def make_conformance(rng):
    tensor = {"op": "tensor", "args": {"data": [1.5, -2.0], "shape": [2], "dtype": "f32"},
              "let": "a"}
    doc = lambda *steps: json.dumps({"programs": [{"id": "p", "steps": list(steps)}]}).encode()
    valid = doc(tensor, {"op": "neg", "in": ["a"], "let": "b"}, {"op": "observe", "in": ["b"]})
    write("conformance", "valid-neg.json", valid)
    write("conformance", "valid-no-programs.json", b'{"programs": []}')
    damage("conformance", "neg", valid, rng)
    bad = {
        "not-json.json": b"programs: []",
        "not-utf8.json": b'{"programs": ["\xff"]}'.replace(b"\\xff", b"\xff"),
        "nested-arrays.json": b"[" * 100_000 + b"]" * 100_000,
        "programs-not-a-list.json": b'{"programs": 7}',
    }
    for name, data in bad.items():
        write("conformance", f"bad-{name}", data)
    # Programs that must fail inside the runner without running away: reported per program.
    hostile = {
        "huge-shape.json": doc({"op": "zeros", "args": {"shape": [1 << 40, 1 << 40],
                                                        "dtype": "f32"}, "let": "z"}),
        "unknown-op.json": doc({"op": "no_such_op", "let": "x"}),
        "undefined-input.json": doc({"op": "neg", "in": ["nothing"], "let": "x"}),
        "negative-shape.json": doc({"op": "zeros", "args": {"shape": [-3], "dtype": "f32"},
                                    "let": "z"}),
    }
    for name, data in hostile.items():
        write("conformance", f"any-{name}", data)


def main():
    for folder in ["safetensors", "idx", "snapshot", "checkpoint", "conformance"]:
        shutil.rmtree(OUT / folder, ignore_errors=True)
    rng = random.Random(38)
    make_safetensors(rng)
    make_idx(rng)
    make_snapshot(rng)
    make_checkpoint(rng)
    make_conformance(rng)
    total = sum(f.stat().st_size for f in OUT.rglob("*") if f.is_file())
    print(f"wrote {sum(1 for f in OUT.rglob('*') if f.is_file())} files, {total} bytes")


if __name__ == "__main__":
    main()
