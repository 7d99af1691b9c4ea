#!/usr/bin/env python3
"""Writes the seed corpora of the fuzz targets (fuzz/seeds/<target>/), which AFL++ mutates
from: small valid inputs of each format, so that a campaign starts inside the reader's
paths instead of at its first check.

- safetensors: the valid files of tests/corpus/safetensors, and state dicts written by
  PyTorch's `safetensors.torch.save` (f32, f16, bf16, i64 and bool tensors, metadata),
  when torch and safetensors can be imported (the committed seeds came from PyTorch 2.15).
- pickle: the snapshot pickles of crates/strata-alloc/tests/fixtures up to 8 KiB, most of
  them written by PyTorch's `_dump_snapshot`.
- idx: the valid files of tests/corpus/idx (raw and gzip).
- checkpoint: the valid file of tests/corpus/checkpoint.
- conformance: the ten smallest programs of each conformance suite, one document each.

Usage: scripts/make-fuzz-seeds.py (run from anywhere; rerun scripts/make-reader-corpus.py
first when the corpora change).
"""

import json
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "fuzz" / "seeds"
CORPUS = ROOT / "tests" / "corpus"


def put(target, name, data):
    (SEEDS / target).mkdir(parents=True, exist_ok=True)
    (SEEDS / target / name).write_bytes(data)


def valid_of(reader, target):
    for f in sorted((CORPUS / reader).glob("valid-*")):
        put(target, f.name, f.read_bytes())


def pytorch_state_dicts():
    try:
        import torch
        from safetensors.torch import save
    except ImportError:
        print("torch and safetensors are not importable: keeping the committed PyTorch seeds")
        return False
    torch.manual_seed(0)
    dicts = {
        "pytorch-linear": {"weight": torch.randn(3, 4), "bias": torch.randn(3)},
        "pytorch-dtypes": {
            "h": torch.randn(2, 2).half(),
            "b": torch.randn(3).bfloat16(),
            "i": torch.arange(4),
            "m": torch.tensor([True, False]),
            "s": torch.tensor(2.5),
        },
    }
    for name, d in dicts.items():
        put("safetensors", f"{name}.safetensors", save(d, metadata={"written_by": "pytorch"}))
    return True


def conformance_programs():
    suites = sorted((ROOT / "crates/strata-cli/tests/fixtures/conformance").glob("*.programs.json"))
    for suite in suites:
        programs = json.loads(suite.read_text())["programs"]
        smallest = sorted(programs, key=lambda p: len(json.dumps(p)))[:10]
        for p in smallest:
            doc = json.dumps({"programs": [p]}, separators=(",", ":"))
            put("conformance", f"{p['id']}.json", doc.encode())


def main():
    kept = {}
    pytorch = sorted((SEEDS / "safetensors").glob("pytorch-*")) if SEEDS.exists() else []
    for f in pytorch:
        kept[f.name] = f.read_bytes()
    shutil.rmtree(SEEDS, ignore_errors=True)
    valid_of("safetensors", "safetensors")
    if not pytorch_state_dicts():
        for name, data in kept.items():
            put("safetensors", name, data)
    for f in sorted((ROOT / "crates/strata-alloc/tests/fixtures").rglob("*.pickle")):
        if f.stat().st_size <= 8192 and f.name not in ("foreign.pickle", "truncated.pickle"):
            put("pickle", f"{f.parent.name}-{f.name}", f.read_bytes())
    valid_of("idx", "idx")
    valid_of("checkpoint", "checkpoint")
    conformance_programs()
    for t in sorted(SEEDS.iterdir()):
        files = list(t.iterdir())
        print(f"{t.name}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")


if __name__ == "__main__":
    main()
