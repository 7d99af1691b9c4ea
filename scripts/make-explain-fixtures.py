"""PyTorch-format out-of-memory snapshots for `strata explain`'s tests.

    python3 scripts/make-explain-fixtures.py [DIR]

Writes, with CPython's own `pickle` (standard library only, no torch), two snapshots shaped
like `torch.cuda.memory._snapshot()` taken when a run on a 1000 MiB device ran out of memory,
each with the whole allocation history (`device_traces`), its segments and blocks as they were
at the out-of-memory, and Python stacks that pass through PyTorch's own files, into DIR
(default crates/strata-alloc/tests/fixtures/explain/):

- fragmented-oom.pickle: 30 buffers of 32 MiB (one segment each) are allocated and freed,
  then 30 activations of 20 MiB each take the head of one cached 32 MiB block, leaving 12 MiB
  free in every segment; a 64 MiB request then finds 360 MiB free but no block that fits, and
  no whole segment to release: out of memory. Expandable segments would pack the 20 MiB
  blocks into one mapping and fit it.
- full-oom.pickle: 30 weights and 18 activations of 20 MiB hold 960 MiB; the 64 MiB request
  cannot fit under any setting, only with less held.

The device's free bytes at the out-of-memory are written as PyTorch writes them (what the
device has left), so the capacity strata estimates from them is the 1000 MiB device. The
output is deterministic: every number is fixed, nothing comes from the clock.
"""
import os
import pickle
import sys

DEFAULT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates",
                           "strata-alloc", "tests", "fixtures", "explain")

MIB = 1 << 20
DEVICE = 1000 * MIB
BASE = 0x7F00_0000_0000
T0 = 1_700_000_000_000_000  # microseconds since the epoch, fixed
TORCH = "/opt/venv/lib/python3.12/site-packages/torch"


def stack(line, function, library=None):
    """Innermost first: an optional PyTorch frame, the user's frame, the training loop."""
    frames = []
    if library:
        frames.append({"filename": f"{TORCH}/{library[0]}", "line": library[1],
                       "name": library[2]})
    frames.append({"filename": "/home/user/project/model.py", "line": line, "name": function})
    frames.append({"filename": "/home/user/project/train.py", "line": 88, "name": "train_step"})
    return frames


BUFFERS = stack(20, "make_buffers", ("functional.py", 1702, "empty"))
ACTIVATIONS = stack(31, "forward", ("nn/modules/linear.py", 125, "forward"))
WEIGHTS = stack(12, "__init__", ("nn/modules/linear.py", 106, "reset_parameters"))
REQUEST = stack(47, "forward", ("nn/functional.py", 2380, "softmax"))


class Trace:
    """The history of one device, one entry at a time."""

    def __init__(self):
        self.entries = []

    def add(self, action, size, addr=None, frames=(), device_free=None):
        e = {"action": action}
        if action == "oom":
            e["device_free"] = device_free
        else:
            e["addr"] = addr
        e.update({"size": size, "stream": 0, "time_us": T0 + 1000 * len(self.entries),
                  "frames": list(frames)})
        self.entries.append(e)


def segment(address, blocks, frames):
    """A large-pool segment from cudaMalloc; `blocks` are (size, state, frames) in order."""
    out, at = [], address
    for size, state, fr in blocks:
        live = state == "active_allocated"
        out.append({"address": at, "size": size, "requested_size": size if live else 0,
                    "state": state, "frames": list(fr) if live else []})
        at += size
    allocated = sum(b["size"] for b in out if b["state"] == "active_allocated")
    return {"device": 0, "address": address, "total_size": at - address,
            "allocated_size": allocated, "active_size": allocated,
            "requested_size": allocated, "stream": 0, "segment_type": "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": list(frames),
            "blocks": out}


def settings():
    return {
        "PYTORCH_CUDA_ALLOC_CONF": "",
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": False,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
        "last_allocator_settings": "",
    }


def fragmented():
    t = Trace()
    bases = [BASE + i * 64 * MIB for i in range(30)]
    for b in bases:
        t.add("segment_alloc", 32 * MIB, b, BUFFERS)
        t.add("alloc", 32 * MIB, b, BUFFERS)
    for b in bases:
        t.add("free_requested", 32 * MIB, b, BUFFERS)
        t.add("free_completed", 32 * MIB, b, BUFFERS)
    # Best fit among equal blocks goes to the lowest address: one segment after another.
    for b in bases:
        t.add("alloc", 20 * MIB, b, ACTIVATIONS)
    reserved = 30 * 32 * MIB
    t.add("oom", 64 * MIB, frames=REQUEST, device_free=DEVICE - reserved)
    segments = [segment(b, [(20 * MIB, "active_allocated", ACTIVATIONS),
                            (12 * MIB, "inactive", ())], BUFFERS) for b in bases]
    return {"segments": segments, "device_traces": [t.entries],
            "allocator_settings": settings()}


def full():
    t = Trace()
    held = []
    for i in range(48):
        frames = WEIGHTS if i < 30 else ACTIVATIONS
        b = BASE + i * 32 * MIB
        t.add("segment_alloc", 20 * MIB, b, frames)
        t.add("alloc", 20 * MIB, b, frames)
        held.append((b, frames))
    t.add("oom", 64 * MIB, frames=REQUEST, device_free=DEVICE - 48 * 20 * MIB)
    segments = [segment(b, [(20 * MIB, "active_allocated", fr)], fr) for b, fr in held]
    return {"segments": segments, "device_traces": [t.entries],
            "allocator_settings": settings()}


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR
    os.makedirs(out, exist_ok=True)
    for name, snap in [("fragmented-oom", fragmented()), ("full-oom", full())]:
        with open(os.path.join(out, name + ".pickle"), "wb") as f:
            pickle.dump(snap, f, protocol=4)
        print(f"wrote {name}.pickle")


if __name__ == "__main__":
    main()
