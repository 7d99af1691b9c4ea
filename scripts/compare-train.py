#!/usr/bin/env python3
"""Trains mlp, cnn and lstm on Fashion-MNIST with strata (`strata train`) and with PyTorch,
same recipe, data pipeline and thread count, and prints a Markdown table of test accuracy,
time per epoch and the training step's peak allocated memory.

The recipe (both sides): Adam, lr 1e-3, batch 128, shuffled, 2 loader workers with a
prefetch factor of 2, inputs scaled to [0, 1] and normalised with mean 0.2860 and std
0.3530, cross-entropy loss, 5 epochs, 2 threads, seed 0.

PyTorch's step peak is measured as strata's: after the first optimizer step, one step
(forward, loss, backward, optimizer step, zero_grad) is run under torch.profiler with
profile_memory=True, and the peak is the largest running sum of its `[memory]` records
(unrounded bytes, as PyTorch's profiler records them); compare it with strata's
`step_peak_requested`.

Usage: scripts/compare-train.py [--epochs N] [--models mlp,cnn,lstm] [--strata PATH]
Needs python3 with torch and numpy (see the README).
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


def step_peak(m, opt, x, y):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        del loss
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


def mib(b):
    return f"{b / 2**20:.2f} MiB" if b is not None else "n/a"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--models", default="mlp,cnn,lstm")
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    ap.add_argument("--strata", default=os.path.join(target, "release", "strata"))
    args = ap.parse_args()
    print(f"PyTorch {torch.__version__}, {args.epochs} epochs, 2 threads\n")
    print("| model | strata accuracy | PyTorch accuracy | strata s/epoch | PyTorch s/epoch "
          "| time ratio | strata step peak | PyTorch step peak |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        s = strata_run(args.strata, name, args.epochs)
        t = torch_run(name, args.epochs)
        s_epoch = sum(s["epoch_seconds"]) / len(s["epoch_seconds"])
        t_epoch = sum(t["epoch_seconds"]) / len(t["epoch_seconds"])
        print(f"| {name} | {100 * s['test_accuracy']:.2f}% | {100 * t['test_accuracy']:.2f}% "
              f"| {s_epoch:.1f} | {t_epoch:.1f} | {t_epoch / s_epoch:.2f}× "
              f"| {mib(s['step_peak_requested'])} | {mib(t['step_peak_requested'])} |",
              flush=True)


if __name__ == "__main__":
    main()
