"""Pickled memory-snapshot fixtures for strata-alloc's snapshot reader.

    python3 scripts/make-snapshot-fixtures.py [DIR]

Writes, with CPython's own `pickle` (standard library only, no torch), dicts shaped like
`torch.cuda.memory._snapshot()` (shared/reference/pytorch-memory-spec.md section 2.3) into DIR
(default crates/strata-alloc/tests/fixtures/snapshots/):

- pytorch-p0.pickle ... pytorch-p5.pickle: one realistic snapshot at every protocol: two
  segments (one of them expandable), blocks in all three states with frames from Python
  files, a trace of 21 entries covering every action strata knows (an oom entry with
  device_free) plus one "annotate" entry strata skips, PyTorch's allocator_settings keys, and
  keys strata does not know at the top level (external_annotations, host_segments), in a
  segment, in a block, in a frame, in a trace entry and in the settings;
- pytorch-high-addresses.pickle: addresses above 2**63 (LONG1 with 9 bytes);
- pytorch-shared-frames.pickle: blocks and trace entries share the same frame dicts and
  frame lists (CPython memoizes them when empty and fills them afterwards: BINGET);
- truncated.pickle: pytorch-p4.pickle cut in the middle;
- foreign.pickle: a pickled list of ints;
- object.pickle: a snapshot-shaped dict holding a collections.OrderedDict (GLOBAL, REDUCE);
- expected.json: the figures the tests check, per file.

The output is deterministic: every number is fixed, nothing comes from the clock.
"""
import collections
import copy
import json
import os
import pickle
import sys

DEFAULT_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates",
                           "strata-alloc", "tests", "fixtures", "snapshots")

MIB = 1 << 20
KNOWN_ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
                 "segment_map", "segment_unmap", "oom", "snapshot"}
STREAM = 0
T0 = 1_700_000_000_000_000  # microseconds since the epoch, fixed


def frame(filename, line, name):
    return {"filename": filename, "line": line, "name": name}


def train_stack(line, op):
    return [
        frame("/home/user/project/model.py", line, op),
        frame("/home/user/project/train.py", 88, "train_step"),
        frame("/home/user/project/train.py", 131, "<module>"),
    ]


def block(address, size, requested, state, frames):
    return {"address": address, "size": size, "requested_size": requested, "state": state,
            "frames": frames}


def pytorch_snapshot(base_large=0x7F3A_2000_0000, base_exp=0x7F3B_0000_0000):
    """A realistic `_snapshot()` dict."""
    # Segment 0: a 20 MiB large-pool segment from cudaMalloc.
    seg0_blocks = [
        block(base_large, 8 * MIB, 8 * MIB - 100, "active_allocated",
              train_stack(41, "linear")),
        block(base_large + 8 * MIB, 4 * MIB, 4 * MIB, "active_pending_free",
              train_stack(57, "matmul")),
        block(base_large + 12 * MIB, 8 * MIB, 0, "inactive", []),
    ]
    seg0 = {
        "device": 0,
        "address": base_large,
        "total_size": 20 * MIB,
        "allocated_size": 8 * MIB,
        "active_size": 12 * MIB,
        "requested_size": 12 * MIB - 100,
        "stream": STREAM,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "frames": train_stack(41, "linear"),
        "blocks": seg0_blocks,
    }
    # Segment 1: the mapped range (two 20 MiB pages) of an expandable segment.
    seg1_blocks = [
        block(base_exp, 24 * MIB, 24 * MIB - 512, "active_allocated",
              train_stack(63, "conv2d")),
        block(base_exp + 24 * MIB, 2 * MIB, 2 * MIB, "active_allocated",
              train_stack(70, "relu")),
        block(base_exp + 26 * MIB, 14 * MIB, 0, "inactive", []),
    ]
    seg1 = {
        "device": 0,
        "address": base_exp,
        "total_size": 40 * MIB,
        "allocated_size": 26 * MIB,
        "active_size": 26 * MIB,
        "requested_size": 26 * MIB - 512,
        "stream": STREAM,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": True,
        "frames": train_stack(63, "conv2d"),
        "blocks": seg1_blocks,
        # A key newer PyTorch might add.
        "memory_pool_name": "default",
    }
    # Keys strata does not know, in a frame and a block.
    seg0_blocks[0]["frames"][0]["fx_node_op"] = "call_function"
    seg0_blocks[0]["frames"][0]["fx_node_name"] = "linear_1"
    seg1_blocks[1]["stream_uses"] = []

    t = [0]

    def entry(action, size, addr=None, device_free=None, frames=None):
        t[0] += 1000
        e = {"action": action}
        if action == "oom":
            e["device_free"] = device_free
        else:
            e["addr"] = addr
        e.update({"size": size, "stream": STREAM, "time_us": T0 + t[0],
                  "frames": frames if frames is not None else []})
        return e

    scratch = base_large + 12 * MIB
    trace = [
        entry("segment_alloc", 20 * MIB, base_large, frames=train_stack(41, "linear")),
        entry("alloc", 8 * MIB - 100, base_large, frames=train_stack(41, "linear")),
        entry("alloc", 4 * MIB, base_large + 8 * MIB, frames=train_stack(57, "matmul")),
        entry("alloc", 6 * MIB, scratch, frames=train_stack(60, "softmax")),
        entry("free_requested", 6 * MIB, scratch, frames=train_stack(60, "softmax")),
        entry("free_completed", 6 * MIB, scratch, frames=train_stack(60, "softmax")),
        entry("segment_map", 40 * MIB, base_exp, frames=train_stack(63, "conv2d")),
        entry("alloc", 24 * MIB - 512, base_exp, frames=train_stack(63, "conv2d")),
        entry("alloc", 2 * MIB, base_exp + 24 * MIB, frames=train_stack(70, "relu")),
        entry("alloc", 10 * MIB, base_exp + 26 * MIB, frames=train_stack(72, "dropout")),
        entry("free_requested", 10 * MIB, base_exp + 26 * MIB,
              frames=train_stack(72, "dropout")),
        entry("free_completed", 10 * MIB, base_exp + 26 * MIB,
              frames=train_stack(72, "dropout")),
        entry("segment_map", 20 * MIB, base_exp + 40 * MIB, frames=train_stack(75, "cat")),
        entry("segment_unmap", 20 * MIB, base_exp + 40 * MIB),
        entry("oom", 80 * MIB, device_free=3 * MIB, frames=train_stack(80, "bmm")),
        entry("segment_alloc", 2 * MIB, 0x7F3C_0000_0000, frames=train_stack(90, "add")),
        entry("segment_free", 2 * MIB, 0x7F3C_0000_0000),
        entry("annotate", 0, 0),
        entry("free_requested", 4 * MIB, base_large + 8 * MIB,
              frames=train_stack(57, "matmul")),
        entry("alloc", 256, 0x7F3C_0000_0000, frames=train_stack(95, "sum")),
        entry("free_requested", 256, 0x7F3C_0000_0000, frames=train_stack(95, "sum")),
        entry("snapshot", 38 * MIB, 0),
    ]
    trace[17]["name"] = "forward"  # the annotate entry's own key
    trace[1]["compile_context"] = "N/A"  # a key strata does not know in a known entry
    settings = {
        "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,roundup_power2_divisions:4",
        "max_split_size": -1,
        "garbage_collection_threshold": 0.0,
        "expandable_segments": True,
        "pinned_num_register_threads": 1,
        "release_lock_on_cudamalloc": False,
        "pinned_use_cuda_host_register": False,
        "roundup_power2_divisions": {str(1 << i): 4 for i in range(16)},
        "last_allocator_settings": "",
    }
    return {
        "segments": [seg0, seg1],
        "device_traces": [trace],
        "allocator_settings": settings,
        "external_annotations": [
            {"device": 0, "stage": "START", "name": "forward", "time_us": T0 + 500},
        ],
        "host_segments": [],
    }


def high_address_snapshot():
    base = (1 << 64) - 64 * MIB  # above 2**63: LONG1 with a ninth byte
    seg = {
        "device": 0,
        "address": base,
        "total_size": 2 * MIB,
        "allocated_size": 512,
        "active_size": 512,
        "requested_size": 500,
        "stream": (1 << 63) + 12345,
        "segment_type": "small",
        "segment_pool_id": (1 << 63, 7),
        "is_expandable": False,
        "frames": [],
        "blocks": [
            block(base, 512, 500, "active_allocated", train_stack(3, "empty")),
            block(base + 512, 2 * MIB - 512, 0, "inactive", []),
        ],
    }
    trace = [
        {"action": "segment_alloc", "addr": base, "size": 2 * MIB, "stream": (1 << 63) + 12345,
         "time_us": T0, "frames": []},
        {"action": "alloc", "addr": base, "size": 500, "stream": (1 << 63) + 12345,
         "time_us": T0 + 1, "frames": train_stack(3, "empty")},
        {"action": "alloc", "addr": (1 << 64) - 1, "size": 1, "stream": 0,
         "time_us": T0 + 2, "frames": []},
    ]
    return {"segments": [seg], "device_traces": [trace]}


def shared_frames_snapshot():
    """Blocks and trace entries share frame dicts and frame lists, as PyTorch's symbolised
    tracebacks do; the memo fetches them with BINGET."""
    snap = pytorch_snapshot()
    shared_frame = frame("/home/user/project/model.py", 12, "forward")
    shared_stack = [shared_frame, frame("/home/user/project/train.py", 88, "train_step")]
    for seg in snap["segments"]:
        seg["frames"] = shared_stack
        for b in seg["blocks"]:
            if b["state"] != "inactive":
                b["frames"] = shared_stack
    for e in snap["device_traces"][0]:
        if e["frames"]:
            e["frames"] = [shared_frame, shared_frame]
    return snap


def figures(snap):
    segments = snap["segments"]
    states = collections.Counter(b["state"] for s in segments for b in s["blocks"])
    traces = snap.get("device_traces", [])
    known = [[e for e in t if e["action"] in KNOWN_ACTIONS] for t in traces]
    addresses = [s["address"] for s in segments] + [b["address"] for s in segments
                                                    for b in s["blocks"]]
    frames = sum(len(b["frames"]) for s in segments for b in s["blocks"])
    return {
        "segments": len(segments),
        "total_size": sum(s["total_size"] for s in segments),
        "allocated_size": sum(s["allocated_size"] for s in segments),
        "blocks": {
            "active_allocated": states["active_allocated"],
            "active_pending_free": states["active_pending_free"],
            "inactive": states["inactive"],
        },
        "expandable_segments": sum(1 for s in segments if s["is_expandable"]),
        "block_frames": frames,
        "trace_lengths": [len(t) for t in known],
        "skipped_trace_entries": sum(len(t) for t in traces) - sum(len(t) for t in known),
        "first_action": known[0][0]["action"] if known and known[0] else None,
        "last_action": known[0][-1]["action"] if known and known[0] else None,
        "oom_device_free": [e["device_free"] for t in known for e in t
                            if e["action"] == "oom"],
        # Exact integers above 2**53 do not survive JSON readers that use doubles, so the
        # largest address is written as a decimal string.
        "max_address": str(max(addresses)),
        "settings_conf": snap.get("allocator_settings", {}).get("PYTORCH_CUDA_ALLOC_CONF", ""),
    }


def write(path, data):
    with open(path, "wb") as f:
        f.write(data)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR
    os.makedirs(out, exist_ok=True)
    expected = {}

    snap = pytorch_snapshot()
    for protocol in range(0, 6):
        name = f"pytorch-p{protocol}.pickle"
        write(os.path.join(out, name), pickle.dumps(copy.deepcopy(snap), protocol=protocol))
        expected[name] = figures(snap)

    high = high_address_snapshot()
    write(os.path.join(out, "pytorch-high-addresses.pickle"), pickle.dumps(high, protocol=4))
    expected["pytorch-high-addresses.pickle"] = figures(high)

    shared = shared_frames_snapshot()
    data = pickle.dumps(shared, protocol=4)
    assert b"h" in data  # BINGET
    write(os.path.join(out, "pytorch-shared-frames.pickle"), data)
    expected["pytorch-shared-frames.pickle"] = figures(shared)

    p4 = pickle.dumps(copy.deepcopy(snap), protocol=4)
    cut = len(p4) // 2
    write(os.path.join(out, "truncated.pickle"), p4[:cut])
    expected["truncated.pickle"] = {"length": cut, "full_length": len(p4)}

    write(os.path.join(out, "foreign.pickle"), pickle.dumps([1, 2, 3, 1000, 2 ** 40], protocol=4))

    obj = {"segments": [collections.OrderedDict([("address", 0), ("total_size", 512)])]}
    data = pickle.dumps(obj, protocol=2)
    write(os.path.join(out, "object.pickle"), data)
    expected["object.pickle"] = {"global_offset": data.index(b"ccollections\nOrderedDict\n")}

    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f, indent=2, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
