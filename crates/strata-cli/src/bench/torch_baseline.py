"""PyTorch's figures for `strata bench`: the same shapes, the same thread count.

Prints one JSON object {row name: figure} with the same units as strata's rows.
"""
import json
import sys
import time

import torch
import torch.utils.checkpoint

threads = int(sys.argv[1]) if len(sys.argv) > 1 else 1
quick = len(sys.argv) > 2 and sys.argv[2] == "quick"
torch.set_num_threads(threads)
REPS = 3 if quick else 10


WARM_UP = 0.0 if quick else 0.1  # seconds, as strata's own warm-up


def median(f, reps=REPS):
    until = time.perf_counter() + WARM_UP
    f()
    while time.perf_counter() < until:
        f()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


out = {}
one_a, one_b = torch.ones(1), torch.ones(1)
n = 20000
t = time.perf_counter()
for _ in range(n):
    torch.add(one_a, one_b)
out["add 1 element (per op)"] = (time.perf_counter() - t) / n * 1e9

N = 1 << 24
a, b = torch.rand(N), torch.rand(N)
out["add 16M f32, new output"] = 3 * 4 * N / median(lambda: torch.add(a, b)) / 1e9
dst = torch.empty(N)
out["add 16M f32, out="] = 3 * 4 * N / median(lambda: torch.add(a, b, out=dst)) / 1e9
out["add_ 16M f32, in place"] = 3 * 4 * N / median(lambda: a.add_(b)) / 1e9
m = torch.rand(4096, 4096)
mt = torch.rand(4096, 4096).t()
out["add 4096² f32, one operand transposed"] = 3 * 4 * N / median(lambda: torch.add(m, mt)) / 1e9
out["transpose copy 4096² f32"] = 2 * 4 * N / median(lambda: mt.contiguous()) / 1e9
out["sum 4096² f32 over last dim"] = 4 * N / median(lambda: m.sum(1)) / 1e9
out["sum 4096² f32 over first dim"] = 4 * N / median(lambda: m.sum(0)) / 1e9
s = torch.rand(4096, 1024)
out["softmax [4096, 1024] f32"] = 2 * 4 * s.numel() / median(lambda: torch.softmax(s, 1)) / 1e9
for k in (512, 1024, 2048):
    x, y = torch.rand(k, k), torch.rand(k, k)
    out[f"sgemm {k}"] = 2 * k ** 3 / median(lambda: torch.mm(x, y)) / 1e9


# A training step through 8 residual MLP blocks, plain and with every block checkpointed.
D, BLOCKS, BATCH = 256, 8, 1024
ws = [(torch.randn(4 * D, D, requires_grad=True), torch.randn(D, 4 * D, requires_grad=True))
      for _ in range(BLOCKS)]
for w1, w2 in ws:
    with torch.no_grad():
        w1.mul_(D ** -0.5)
        w2.mul_((4 * D) ** -0.5)
xb = torch.randn(BATCH, D)


def block(x, w1, w2):
    h = torch.nn.functional.gelu(torch.nn.functional.linear(
        torch.nn.functional.layer_norm(x, [D]), w1))
    return x + torch.nn.functional.linear(h, w2)


def step(checkpointed):
    h = xb
    for w1, w2 in ws:
        if checkpointed:
            h = torch.utils.checkpoint.checkpoint(block, h, w1, w2, use_reentrant=False)
        else:
            h = block(h, w1, w2)
    h.mean().backward()
    for w1, w2 in ws:
        w1.grad = None
        w2.grad = None


STEP_REPS = 1 if quick else 5
plain = median(lambda: step(False), STEP_REPS) * 1e3
ckpt = median(lambda: step(True), STEP_REPS) * 1e3
out["8 residual blocks: training step"] = plain
out["8 residual blocks: training step, checkpointed"] = ckpt
out["8 residual blocks: checkpointed / plain step time"] = ckpt / plain
# A training step of a small CNN on 256 images of 1x28x28, and its peak allocated bytes
# above what the model and the batch hold (the CPU allocator's total from the profiler's
# memory events).
class Cnn(torch.nn.Module):
    def __init__(self):
        super().__init__()
        layers, c_in = [], 1
        for c in (32, 64):
            layers += [torch.nn.Conv2d(c_in, c, 3, padding=1), torch.nn.BatchNorm2d(c),
                       torch.nn.ReLU(), torch.nn.MaxPool2d(2)]
            c_in = c
        self.features = torch.nn.Sequential(*layers)
        self.head = torch.nn.Linear(64 * 7 * 7, 10)

    def forward(self, x):
        return self.head(self.features(x).flatten(1))


cnn = Cnn().train()
images = torch.randn(256, 1, 28, 28)
labels = torch.arange(256) * 7 % 10


def cnn_step():
    torch.nn.functional.cross_entropy(cnn(images), labels).backward()
    cnn.zero_grad(set_to_none=True)


out["small CNN, batch 256: training step"] = median(cnn_step, STEP_REPS) * 1e3


def step_peak(step):
    """Peak allocated MiB above the start of one call of `step`, from the profiler's memory
    events (the CPU allocator's total)."""
    import os
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "trace.json")
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = json.load(f)["traceEvents"]
    memory = [e["args"] for e in events if e.get("name") == "[memory]"]
    if not memory:
        return None
    base = memory[0]["Total Allocated"] - memory[0]["Bytes"]
    return (max(m["Total Allocated"] for m in memory) - base) / (1 << 20)


def put_peak(name, step):
    peak = step_peak(step)
    if peak is not None:
        out[name] = peak


put_peak("small CNN, batch 256: peak allocated in the step", cnn_step)

# The main job's layers alone at batch 128 (as `strata train`), forward and backward with
# a given output gradient; the names are strata's rows' (bench/layers.rs).
B = 128
for c_in, c_out, size, input_grad in ((1, 32, 28, False), (32, 64, 14, True)):
    conv = torch.nn.Conv2d(c_in, c_out, 3, padding=1)
    cx = torch.randn(B, c_in, size, size, requires_grad=input_grad)
    cg = torch.randn(B, c_out, size, size)

    def conv_step():
        conv(cx).backward(cg)
        conv.zero_grad(set_to_none=True)
        cx.grad = None

    name = f"conv {c_in}->{c_out} 3x3 on [{B},{c_in},{size},{size}]: forward + backward"
    out[name] = median(conv_step) * 1e3
px = torch.randn(B, 32, 28, 28, requires_grad=True)
pg = torch.randn(B, 32, 14, 14)


def pool_step():
    torch.nn.functional.max_pool2d(px, 2).backward(pg)
    px.grad = None


out[f"max pool 2 on [{B},32,28,28]: forward + backward"] = median(pool_step) * 1e3
lstm = torch.nn.LSTM(28, 128, batch_first=True)
lx = torch.randn(B, 28, 28)
lg = torch.randn(B, 28, 128)


def lstm_step():
    lstm(lx)[0].backward(lg)
    lstm.zero_grad(set_to_none=True)


out[f"LSTM 28->128, 28 steps, batch {B}: forward + backward"] = median(lstm_step) * 1e3
gru = torch.nn.GRU(28, 128, batch_first=True)


def gru_step():
    gru(lx)[0].backward(lg)
    gru.zero_grad(set_to_none=True)


out[f"GRU 28->128, 28 steps, batch {B}: forward + backward"] = median(gru_step) * 1e3
aa, ab = torch.rand(1 << 16), torch.rand(1 << 16)
out["add 64Ki f32"] = median(lambda: torch.add(aa, ab), 3 if quick else 200) * 1e6

# Training steps of an MLP 784-1024-1024-10 on a batch of 256: forward, loss, backward,
# optimizer step, gradients set to None; the peak is measured on a step after the first
# (the optimizer's state exists).
MLP = "MLP 784-1024-1024-10, batch 256"
torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(784, 1024), torch.nn.ReLU(),
                          torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                          torch.nn.Linear(1024, 10))
mx = torch.randn(256, 784)
my = torch.arange(256) * 7 % 10
for label, make, autocast in (
        ("SGD", lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9), False),
        ("Adam", lambda p: torch.optim.Adam(p, lr=1e-3), False),
        ("Adam, bf16 autocast", lambda p: torch.optim.Adam(p, lr=1e-3), True)):
    opt = make(mlp.parameters())

    def mlp_step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = torch.nn.functional.cross_entropy(mlp(mx), my)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    out[f"{MLP}, {label}: training step"] = median(mlp_step, STEP_REPS) * 1e3
    put_peak(f"{MLP}, {label}: peak allocated in the step", mlp_step)
print(json.dumps(out))
