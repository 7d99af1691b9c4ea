"""Unpacks the PyTorch CUDA goldens into strata-alloc's test fixtures.

    python3 scripts/unpack-cuda-goldens.py GOLDENS.tar.gz SUMMARY.json [DIR]

GOLDENS.tar.gz and SUMMARY.json are what the harvest program writes on a GPU machine with
PyTorch: for each of six fixed programs (mixed, frag, streams, mlp, gpt, oom) and two allocator
settings (default, expandable), `torch.cuda.memory._dump_snapshot`'s pickle and a JSON of
`torch.cuda.memory_stats()`, the phases' peaks, the settings and the memory limit.

Writes DIR/<program>.<setting>.{pickle,json} (default
crates/strata-alloc/tests/fixtures/pytorch-cuda/), drops the logs, and strips the stack frames
from every pickle except the mlp program's (standard library pickle, protocol 4), so the
fixtures stay small; the JSON files are copied unchanged. It refuses an archive in which a
program failed, and checks that the fixtures total at most 3 MiB.
"""
import io
import json
import os
import pickle
import sys
import tarfile

DEFAULT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates",
                           "strata-alloc", "tests", "fixtures", "pytorch-cuda")
KEEP_FRAMES = "mlp"
LIMIT = 3 << 20


def strip_frames(snapshot):
    """Empties every block's and trace entry's frame list, in place."""
    for segment in snapshot.get("segments", []):
        for block in segment.get("blocks", []):
            block["frames"] = []
    for trace in snapshot.get("device_traces", []):
        for entry in trace:
            entry["frames"] = []


def main():
    if len(sys.argv) not in (3, 4):
        raise SystemExit(__doc__)
    archive, summary_path = sys.argv[1], sys.argv[2]
    out = sys.argv[3] if len(sys.argv) == 4 else DEFAULT_DIR
    summary = json.load(open(summary_path))
    failed = [k for k, v in summary.items() if "failed" in v]
    if failed:
        raise SystemExit(f"these programs failed in the harvest: {', '.join(sorted(failed))}")
    os.makedirs(out, exist_ok=True)
    written = []
    with tarfile.open(archive, "r:gz") as tf:
        for member in tf.getmembers():
            name = os.path.basename(member.name)
            if not member.isfile() or not name.endswith((".pickle", ".json")):
                continue
            data = tf.extractfile(member).read()
            if name.endswith(".pickle") and not name.startswith(KEEP_FRAMES + "."):
                snapshot = pickle.load(io.BytesIO(data))
                strip_frames(snapshot)
                data = pickle.dumps(snapshot, protocol=4)
            with open(os.path.join(out, name), "wb") as f:
                f.write(data)
            written.append((name, len(data)))
    total = sum(size for _, size in written)
    for name, size in sorted(written):
        print(f"{name:28} {size:8} bytes")
    print(f"{len(written)} files, {total} bytes")
    if total > LIMIT:
        raise SystemExit(f"the fixtures total {total} bytes, over the {LIMIT}-byte limit")


if __name__ == "__main__":
    main()
