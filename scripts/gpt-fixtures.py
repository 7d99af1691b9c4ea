#!/usr/bin/env python3
"""Writes the gpt's PyTorch fixture (crates/strata-cli/tests/fixtures/gpt/): nanoGPT's
model (scripts/gpt_reference.py) initialised by PyTorch over the vocabulary of the sample
text in crates/strata-cli/tests/fixtures/text, its state dict (init.safetensors, the tied
weight under both names), and in expected.json the window starts of the first five
batches of 12 (strata's own draws for loader seed 0, so both sides train on the same
windows), the loss of each of the five training steps of the recipe, and the validation
loss of the protocol after them.

Usage: scripts/gpt-fixtures.py (with torch, numpy and safetensors; see the README).
"""

import json
import os
import sys

import torch
from safetensors.torch import save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import gpt_reference as g  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TEXT = os.path.join(ROOT, "crates/strata-cli/tests/fixtures/text")
OUT = os.path.join(ROOT, "crates/strata-cli/tests/fixtures/gpt")
BATCH, STEPS, SEED = 12, 5, 0


def main():
    torch.manual_seed(1234)
    torch.set_num_threads(2)
    vocab, tokens, split = g.corpus(TEXT)
    train, val = tokens[:split], tokens[split:]
    model = g.GPT(len(vocab))
    os.makedirs(OUT, exist_ok=True)
    save_file(model.state_dict_for_strata(), os.path.join(OUT, "init.safetensors"))
    opt = g.optimizer(model)
    room = len(train) - g.BLOCK
    starts, losses = [], []
    for it in range(STEPS):
        batch = [g.window_start(SEED, it * BATCH + j, room) for j in range(BATCH)]
        starts.append(batch)
        x, y = g.batch(train, batch)
        losses.append(g.train_step(model, opt, it, x, y))
    expected = {
        "vocab_size": len(vocab),
        "batch_size": BATCH,
        "seed": SEED,
        "starts": starts,
        "losses": losses,
        "val_loss_after": g.val_loss(model, val, BATCH),
        "torch": torch.__version__,
    }
    with open(os.path.join(OUT, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1)
    print(json.dumps({k: v for k, v in expected.items() if k != "starts"}))


if __name__ == "__main__":
    main()
