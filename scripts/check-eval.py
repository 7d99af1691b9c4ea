#!/usr/bin/env python3
"""Checks `strata eval` on weights trained by PyTorch: for each model, trains it with
PyTorch (the recipe of scripts/compare-train.py, for --steps steps), saves its state dict as
safetensors (PyTorch's keys, BatchNorm's num_batches_tracked included), evaluates it with
PyTorch and with `strata eval`, and prints both test accuracies.

Usage: scripts/check-eval.py [--steps N] [--models mlp,cnn,lstm] [--strata PATH]
Needs python3 with torch, numpy and safetensors.
"""

import argparse
import importlib.util
import json
import os
import subprocess
import tempfile

import torch
from safetensors.torch import save_file

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("compare_train",
                                              os.path.join(HERE, "compare-train.py"))
ct = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ct)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--models", default="mlp,cnn,lstm")
    target = os.environ.get("CARGO_TARGET_DIR", "target")
    ap.add_argument("--strata", default=os.path.join(target, "release", "strata"))
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(2)
    print("| model | PyTorch's accuracy | strata eval's accuracy | difference (points) |")
    print("|---|---|---|---|")
    for name in args.models.split(","):
        m = ct.model(name)
        opt = torch.optim.Adam(m.parameters(), lr=1e-3)
        train = torch.utils.data.DataLoader(ct.Images("train"), batch_size=128, shuffle=True)
        for i, (x, y) in enumerate(train):
            if i == args.steps:
                break
            torch.nn.functional.cross_entropy(m(x), y).backward()
            opt.step()
            opt.zero_grad()
        m.eval()
        correct = 0
        with torch.inference_mode():
            for x, y in torch.utils.data.DataLoader(ct.Images("test"), batch_size=128):
                correct += (m(x).argmax(1) == y).sum().item()
        with tempfile.TemporaryDirectory() as d:
            weights, report = os.path.join(d, "w.safetensors"), os.path.join(d, "r.json")
            save_file({k: v.contiguous() for k, v in m.state_dict().items()}, weights)
            subprocess.run([args.strata, "eval", "--model", name, "--load", weights,
                            "--report-json", report], check=True, stdout=subprocess.DEVNULL)
            with open(report) as f:
                ours = json.load(f)["test_accuracy"]
        theirs = correct / 10000
        print(f"| {name} | {100 * theirs:.2f}% | {100 * ours:.2f}% "
              f"| {100 * (ours - theirs):+.2f} |", flush=True)


if __name__ == "__main__":
    main()
