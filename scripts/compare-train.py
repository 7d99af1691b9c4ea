#!/usr/bin/env python3
"""Trains mlp, cnn and lstm on Fashion-MNIST with strata (`strata train`) and with PyTorch,
same recipe, data pipeline and thread count, and prints a Markdown table of test accuracy,
time per epoch and the training step's peak allocated memory. With gpt among --models it
also trains nanoGPT's character model on the Shakespeare corpus both ways and prints a
second table: validation loss, time per step and the step's peak.

The recipe (both sides): Adam, lr 1e-3, batch 128, shuffled, 2 loader workers with a
prefetch factor of 2, inputs scaled to [0, 1] and normalised with mean 0.2860 and std
0.3530, cross-entropy loss, 5 epochs, 2 threads, seed 0.

PyTorch's step peak is measured as strata's: after the first optimizer step, one step
(forward, loss, backward, optimizer step, zero_grad) is run under torch.profiler with
profile_memory=True, and the peak is the largest running sum of its `[memory]` records
(unrounded bytes, as PyTorch's profiler records them); compare it with strata's
`step_peak_requested`.

The gpt (scripts/gpt_reference.py): PyTorch initialises the model (seed 0) and both sides
start from that state dict; both train on the same windows (strata's draws for loader seed
0, which the reference repeats), with nanoGPT's shakespeare_char CPU recipe (batch 12,
AdamW (0.9, 0.99), decay 0.1 on 2-d parameters, clipping at 1, warm-up and cosine
schedule), batches made on the training thread (strata --workers 0), 2 threads, --steps
steps, evaluated every --eval-every steps with the validation protocol. Its time per step
is the training time (evaluations excluded) over the steps. PyTorch's trained weights are
then evaluated by `strata eval`, which should give PyTorch's validation loss.

With --repeat N (N > 1), each classifier is trained N times on each side, the two sides
alternating (strata, PyTorch, strata, ...), so that a slow moment of the machine falls on
both; the table then gives the median time per epoch of each side, the ratio of the medians
and the spread of the N paired ratios. Accuracy and step peak are the first run's (both
sides are seeded, so repeats agree to within PyTorch's thread scheduling).

Usage: scripts/compare-train.py [--epochs N] [--models mlp,cnn,lstm,gpt] [--repeat N]
       [--steps N] [--eval-every N] [--strata PATH]
Needs python3 with torch, numpy and safetensors (see the README), and for the gpt the
corpus of scripts/fetch-shakespeare.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
from torch import nn

DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530


def idx(name):
    for cand in (name, name + ".gz"):
        path = os.path.join(DATA, cand)
        if os.path.exists(path):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                data = f.read()
            ndim = data[3]
            dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
            return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    sys.exit(f"{name} not found under {DATA}: apt-get install -y dataset-fashion-mnist")


class Images(torch.utils.data.Dataset):
    def __init__(self, split):
        prefix = "train" if split == "train" else "t10k"
        self.x = idx(f"{prefix}-images-idx3-ubyte")
        self.y = idx(f"{prefix}-labels-idx1-ubyte")

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        x = torch.from_numpy(self.x[i].astype(np.float32) / 255.0)
        return ((x - MEAN) / STD).unsqueeze(0), int(self.y[i])


class LstmClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(28, 128, batch_first=True)
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        out, _ = self.lstm(x.reshape(x.shape[0], 28, 28))
        return self.head(out[:, 27])


def model(name):
    if name == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(),
                             nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    if name == "cnn":
        return nn.Sequential(
            nn.Conv2d(1, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
            nn.Flatten(), nn.Linear(3136, 10))
    return LstmClassifier()


def step_peak(m, opt, x, y, step=None):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        if step is None:
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            del loss
        else:
            step()
    # The profiler's allocation and free records (its "[memory]" records, one per call to
    # the allocator, with signed unrounded bytes), in time order.
    records = sorted((e.start_ns(), e.nbytes())
                     for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    running = peak = 0
    for _, nbytes in records:
        running += nbytes
        peak = max(peak, running)
    return peak


def torch_run(name, epochs):
    torch.manual_seed(0)
    torch.set_num_threads(2)
    train = torch.utils.data.DataLoader(Images("train"), batch_size=128, shuffle=True,
                                        num_workers=2, prefetch_factor=2)
    test = torch.utils.data.DataLoader(Images("test"), batch_size=128, num_workers=2,
                                       prefetch_factor=2)
    m = model(name)
    opt = torch.optim.Adam(m.parameters(), lr=1e-3)
    seconds, peak, step = [], None, 0
    for _ in range(epochs):
        m.train()
        start = time.perf_counter()
        for x, y in train:
            if step == 1:
                peak = step_peak(m, opt, x, y)
            else:
                loss = nn.functional.cross_entropy(m(x), y)
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            step += 1
        seconds.append(time.perf_counter() - start)
    m.eval()
    correct = total = 0
    with torch.inference_mode():
        for x, y in test:
            correct += (m(x).argmax(1) == y).sum().item()
            total += len(y)
    return {"test_accuracy": correct / total, "epoch_seconds": seconds,
            "step_peak_requested": peak}


def strata_run(binary, name, epochs):
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "report.json")
        env = dict(os.environ, STRATA_NUM_THREADS="2")
        subprocess.run([binary, "train", "--model", name, "--epochs", str(epochs),
                        "--batch-size", "128", "--workers", "2", "--prefetch", "2",
                        "--lr", "1e-3", "--optimizer", "adam", "--seed", "0",
                        "--report-json", report],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        with open(report) as f:
            return json.load(f)


def torch_gpt_run(steps, eval_every, init):
    import gpt_reference as g
    from safetensors.torch import save_file
    torch.manual_seed(0)
    torch.set_num_threads(2)
    vocab, tokens, split = g.corpus(g.default_dir())
    train, val = tokens[:split], tokens[split:]
    m = g.GPT(len(vocab))
    save_file(m.state_dict_for_strata(), init)
    opt = g.optimizer(m)
    room = len(train) - g.BLOCK
    seconds, peak, evals = 0.0, None, []
    for it in range(steps):
        x, y = g.batch(train, [g.window_start(0, it * 12 + j, room) for j in range(12)])
        start = time.perf_counter()
        if it == 1:
            peak = step_peak(m, opt, x, y, step=lambda: g.train_step(m, opt, it, x, y))
        else:
            g.train_step(m, opt, it, x, y)
        seconds += time.perf_counter() - start
        if (it + 1) % eval_every == 0 or it + 1 == steps:
            evals.append((it + 1, g.val_loss(m, val, 12)))
    save_file(m.state_dict_for_strata(), os.path.join(os.path.dirname(init), "trained.safetensors"))
    return {"val_loss": evals[-1][1], "evaluations": evals, "step_seconds": seconds / steps,
            "step_peak_requested": peak}


def strata_eval(binary, weights):
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "eval.json")
        subprocess.run([binary, "eval", "--model", "gpt", "--load", weights,
                        "--report-json", report], check=True, stdout=subprocess.DEVNULL)
        with open(report) as f:
            return json.load(f)["val_loss"]


def strata_gpt_run(binary, steps, eval_every, init):
    with tempfile.TemporaryDirectory() as d:
        report = os.path.join(d, "report.json")
        env = dict(os.environ, STRATA_NUM_THREADS="2")
        subprocess.run([binary, "train", "--model", "gpt", "--steps", str(steps),
                        "--eval-every", str(eval_every), "--workers", "0", "--seed", "0",
                        "--load", init, "--report-json", report],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        with open(report) as f:
            r = json.load(f)
    r["step_seconds"] = sum(r["epoch_seconds"]) / steps
    return r


def compare_gpt(binary, steps, eval_every):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    with tempfile.TemporaryDirectory() as d:
        init = os.path.join(d, "init.safetensors")
        t = torch_gpt_run(steps, eval_every, init)
        s = strata_gpt_run(binary, steps, eval_every, init)
        evaluated = strata_eval(binary, os.path.join(d, "trained.safetensors"))
    print(f"\ngpt: {steps} steps from the same initial weights and windows, 2 threads\n")
    print("| model | strata val loss | PyTorch val loss | strata ms/step | PyTorch ms/step "
          "| time ratio | strata step peak | PyTorch step peak |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| gpt | {s['val_loss']:.4f} | {t['val_loss']:.4f} | {1e3 * s['step_seconds']:.1f} "
          f"| {1e3 * t['step_seconds']:.1f} | {t['step_seconds'] / s['step_seconds']:.2f}× "
          f"| {mib(s['step_peak_requested'])} | {mib(t['step_peak_requested'])} |")
    print(f"\nstrata eval of PyTorch's trained weights: val loss {evaluated:.6f} "
          f"(PyTorch: {t['val_loss']:.6f})")
    print("\nvalidation loss by step (strata, PyTorch):")
    for e, (step, loss) in zip(s["evaluations"], t["evaluations"]):
        print(f"  step {step}: {e['val_loss']:.4f}, {loss:.4f}")


def mean(xs):
    return sum(xs) / len(xs)


def median(xs):
    xs = sorted(xs)
    mid = len(xs) // 2
    return xs[mid] if len(xs) % 2 else (xs[mid - 1] + xs[mid]) / 2


def mib(b):
    return f"{b / 2**20:.2f} MiB" if b is not None else "n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--models", default="mlp,cnn,lstm")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--eval-every", type=int, default=250)
    ap.add_argument("--repeat", type=int, default=1,
                    help="train each classifier this many times per side, alternating, "
                         "and report medians")
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    ap.add_argument("--strata", default=os.path.join(target, "release", "strata"))
    args = ap.parse_args()
    if args.repeat < 1:
        ap.error("--repeat must be at least 1")
    models = args.models.split(",")
    if "gpt" in models:
        models.remove("gpt")
        compare_gpt(args.strata, args.steps, args.eval_every)
    if not models:
        return
    runs = "" if args.repeat == 1 else f", medians of {args.repeat} alternating runs"
    print(f"PyTorch {torch.__version__}, {args.epochs} epochs, 2 threads{runs}\n")
    print("| model | strata accuracy | PyTorch accuracy | strata s/epoch | PyTorch s/epoch "
          "| time ratio | strata step peak | PyTorch step peak |")
    print("|---|---|---|---|---|---|---|---|")
    for name in models:
        pairs = []
        for _ in range(args.repeat):
            s = strata_run(args.strata, name, args.epochs)
            t = torch_run(name, args.epochs)
            pairs.append((s, t))
        s, t = pairs[0]
        s_epoch = median([mean(p[0]["epoch_seconds"]) for p in pairs])
        t_epoch = median([mean(p[1]["epoch_seconds"]) for p in pairs])
        ratio = f"{t_epoch / s_epoch:.2f}×"
        if args.repeat > 1:
            each = sorted(mean(b["epoch_seconds"]) / mean(a["epoch_seconds"]) for a, b in pairs)
            ratio += f" ({each[0]:.2f}–{each[-1]:.2f})"
        print(f"| {name} | {100 * s['test_accuracy']:.2f}% | {100 * t['test_accuracy']:.2f}% "
              f"| {s_epoch:.1f} | {t_epoch:.1f} | {ratio} "
              f"| {mib(s['step_peak_requested'])} | {mib(t['step_peak_requested'])} |",
              flush=True)


if __name__ == "__main__":
    main()
