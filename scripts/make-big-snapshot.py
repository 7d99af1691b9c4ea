"""A synthetic PyTorch-format memory snapshot of any size, for the scale tests and benchmark.

    python3 scripts/make-big-snapshot.py OUT.pickle --entries N [--oom]

Writes, with CPython's own `pickle` (protocol 4, as `torch.cuda.memory._dump_snapshot()`
does), a dict shaped like `torch.cuda.memory._snapshot()` with N trace entries of a training
loop: 50 weights allocated once, then steps of 60 activations from 4 KiB to 48 MiB allocated
in order and freed in reverse (`alloc`, `free_requested`, `free_completed`), each entry with
the keys PyTorch 2.11 writes (`compile_context`, `user_metadata`) and its own list of stack
frames (16 C++ frames, as `stacks="all"` records them, then Python's) drawn from a few dozen
frame dicts that entries share, as PyTorch's traceback symbolizer shares them. Segments are allocated (`segment_alloc`) the first time a slot needs
one, at the addresses the blocks then keep. With `--oom` the last step's largest request
runs out of memory on a device of the peak reserved bytes plus 8 MiB. The snapshot's own
segments are the state at the end. Every number is fixed: equal arguments give equal files.

About 190 bytes of pickle per entry: 5 million entries make roughly 1 GB.
"""
import argparse
import pickle

MIB = 1 << 20
BASE = 0x7F00_0000_0000
T0 = 1_790_000_000_000_000
SITE = "/opt/venv/lib/python3.12/site-packages/torch"


def frames_pool():
    """Shared frame dicts: PyTorch's C++ and Python frames, the user's model, the loop."""
    lib = [{"name": n, "filename": f"{SITE}/{f}", "line": l} for n, f, l in [
        ("forward", "nn/modules/linear.py", 125), ("_call_impl", "nn/modules/module.py", 1762),
        ("_wrapped_call_impl", "nn/modules/module.py", 1751), ("relu", "nn/functional.py", 1704),
        ("layer_norm", "nn/functional.py", 2910), ("backward", "_tensor.py", 648),
        ("_engine_run_backward", "autograd/graph.py", 829), ("step", "optim/adamw.py", 243),
    ]]
    user = [{"name": "forward", "filename": "/home/user/project/model.py", "line": 20 + 3 * i}
            for i in range(24)]
    cpp = [{"name": f"at::native::kernel_{i}", "filename": f"/pytorch/aten/src/ATen/native/op{i}.cpp",
            "line": 100 + i} for i in range(32)]
    lib = cpp + lib
    loop = [{"name": "train_step", "filename": "/home/user/project/train.py", "line": 88},
            {"name": "main", "filename": "/home/user/project/train.py", "line": 131},
            {"name": "<module>", "filename": "/home/user/project/train.py", "line": 140}]
    return lib, user, loop


def stack(k, lib, user, loop):
    """16 C++ frames (as `stacks="all"` records them), two of PyTorch's Python frames, the
    user's frame and the loop's."""
    cpp = [lib[(k + i) % 32] for i in range(16)]
    return cpp + [lib[32 + k % 3], lib[32 + (k % 5) + 3], user[k % len(user)]] + loop


def rounded(size):
    return (size + 511) // 512 * 512


def segment_size(size):
    if size <= MIB:
        return 2 * MIB
    if size < 10 * MIB:
        return 20 * MIB
    return (size + 2 * MIB - 1) // (2 * MIB) * (2 * MIB)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--entries", type=int, required=True)
    p.add_argument("--oom", action="store_true")
    a = p.parse_args()
    lib, user, loop = frames_pool()
    trace, time = [], [T0]

    def entry(action, addr, size, frames, **extra):
        time[0] += 7
        e = {"action": action, "addr": addr, "size": size, "stream": 0, "time_us": time[0],
             "compile_context": "N/A", "user_metadata": ""}
        e.update(extra)
        e["frames"] = frames
        trace.append(e)

    segments = {}  # slot -> (address, size)
    live = {}  # address -> (size, frames)
    reserved = [0]

    def alloc(slot, size, k):
        size = rounded(size)
        frames = stack(k, lib, user, loop)
        if slot not in segments:
            addr = BASE + slot * 64 * MIB
            segments[slot] = (addr, max(segment_size(size), 2 * MIB))
            reserved[0] += segments[slot][1]
            entry("segment_alloc", addr, segments[slot][1], list(frames))
        addr = segments[slot][0]
        entry("alloc", addr, size, frames)
        live[addr] = (size, frames)
        return addr

    def free(addr):
        size, frames = live.pop(addr)
        entry("free_requested", addr, size, list(frames))
        entry("free_completed", addr, size, list(frames))

    for w in range(50):
        alloc(w, [4096, 3 * MIB, 12 * MIB][w % 3], w)
    sizes = [4096 * (1 + i % 7) if i % 4 == 0 else (i * 797 * 1024) % (48 * MIB) + MIB
             for i in range(60)]
    step = 0
    while len(trace) + 180 <= a.entries:
        addrs = [alloc(50 + i, s, step + i) for i, s in enumerate(sizes)]
        for addr in reversed(addrs):
            free(addr)
        step += 1
    if a.oom:
        request = rounded(max(sizes)) * 2
        time[0] += 7
        trace.append({"action": "oom", "device_free": 8 * MIB, "size": request, "stream": 0,
                      "time_us": time[0], "compile_context": "N/A", "user_metadata": "",
                      "frames": stack(7, lib, user, loop)})
    snapshot_segments = []
    for slot, (addr, total) in sorted(segments.items()):
        blocks, used = [], 0
        if addr in live:
            size, frames = live[addr]
            blocks.append({"address": addr, "size": size, "requested_size": size,
                           "state": "active_allocated", "frames": frames})
            used = size
        if used < total:
            blocks.append({"address": addr + used, "size": total - used, "requested_size": 0,
                           "state": "inactive", "frames": []})
        snapshot_segments.append({
            "device": 0, "address": addr, "total_size": total, "allocated_size": used,
            "active_size": used, "requested_size": used, "stream": 0,
            "segment_type": "small" if total == 2 * MIB else "large",
            "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
            "blocks": blocks})
    snap = {
        "segments": snapshot_segments,
        "device_traces": [trace],
        "allocator_settings": {
            "PYTORCH_CUDA_ALLOC_CONF": "", "max_split_size": -1,
            "garbage_collection_threshold": 0.0, "expandable_segments": False,
            "roundup_power2_divisions": {str(1 << i): 0 for i in range(16)},
        },
        "external_annotations": [],
    }
    with open(a.out, "wb") as f:
        pickle.dump(snap, f, protocol=4)
    print(f"wrote {a.out}: {len(trace)} trace entries, {step} steps, "
          f"{len(snapshot_segments)} segments")


if __name__ == "__main__":
    main()
