"""State-dict fixtures shared with PyTorch, for strata-nn's interop tests.

    python3 scripts/nn-fixtures.py make [DIR]    writes the fixtures (needs torch, safetensors)
    python3 scripts/nn-fixtures.py check DIR     loads the files strata saved in DIR into the
                                                 same PyTorch models (strict) and checks that
                                                 they reproduce strata's recorded outputs

Each model is saved with `safetensors.torch.save_file(model.state_dict())` as
`<name>.safetensors`, with fixed inputs and PyTorch's outputs in `<name>.io.safetensors`.
The models:
- mlp:  Linear(12, 16) -> ReLU -> Linear(16, 5), input [3, 12]
- cnn:  Conv2d(1, 4, 3, padding=1) -> BatchNorm2d(4) -> ReLU -> MaxPool2d(2)
        -> Flatten -> Linear(4*4*4, 3), in eval mode after three training batches (so the
        running statistics and num_batches_tracked are not their initial values),
        input [2, 1, 8, 8]
- lstm: LSTM(4, 6, num_layers=2, batch_first=True), input [2, 5, 4], outputs output, h_n,
        c_n (no initial state)
"""
import os
import sys

import torch
from safetensors.torch import load_file, save_file

DEFAULT_DIR = os.path.join(os.path.dirname(__file__), "..", "crates", "strata-nn", "tests",
                           "fixtures", "torch")


def mlp():
    return torch.nn.Sequential(torch.nn.Linear(12, 16), torch.nn.ReLU(), torch.nn.Linear(16, 5))


def cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
        torch.nn.MaxPool2d(2), torch.nn.Flatten(), torch.nn.Linear(4 * 4 * 4, 3))


def lstm():
    return torch.nn.LSTM(4, 6, num_layers=2, batch_first=True)


def run(name, model, x):
    with torch.no_grad():
        if name == "lstm":
            out, (h, c) = model(x)
            return {"output": out, "h_n": h, "c_n": c}
        return {"output": model(x)}


def make(d):
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    inputs = {"mlp": torch.randn(3, 12), "cnn": torch.randn(2, 1, 8, 8),
              "lstm": torch.randn(2, 5, 4)}
    for name, build in [("mlp", mlp), ("cnn", cnn), ("lstm", lstm)]:
        model = build()
        if name == "cnn":
            model.train()
            with torch.no_grad():
                for _ in range(3):
                    model(torch.randn(4, 1, 8, 8))
        model.eval()
        x = inputs[name]
        save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                  os.path.join(d, f"{name}.safetensors"))
        io = {k: v.contiguous() for k, v in {"input": x, **run(name, model, x)}.items()}
        save_file(io, os.path.join(d, f"{name}.io.safetensors"))
        print(f"{name}: {len(model.state_dict())} tensors")


def check(d):
    failed = False
    for name, build in [("mlp", mlp), ("cnn", cnn), ("lstm", lstm)]:
        path = os.path.join(d, f"{name}.safetensors")
        if not os.path.exists(path):
            print(f"{name}: {path} missing")
            failed = True
            continue
        model = build()
        model.load_state_dict(load_file(path), strict=True)
        model.eval()
        io = load_file(os.path.join(d, f"{name}.io.safetensors"))
        got = run(name, model, io["input"])
        for k, v in got.items():
            ok = torch.allclose(v, io[k], rtol=1e-4, atol=1e-5)
            print(f"{name}.{k}: {'ok' if ok else 'DIFFERS'}")
            failed |= not ok
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "make":
        make(sys.argv[2] if len(sys.argv) > 2 else DEFAULT_DIR)
    elif len(sys.argv) == 3 and sys.argv[1] == "check":
        check(sys.argv[2])
    else:
        sys.exit(__doc__)
