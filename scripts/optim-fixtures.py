"""Training-parity fixtures made with PyTorch, for strata-nn's optimizer tests.

    python3 scripts/optim-fixtures.py make [DIR]    writes DIR/optim.safetensors (needs torch,
                                                    safetensors); DIR defaults to
                                                    crates/strata-nn/tests/fixtures/torch

The file holds an MLP's initial weights (`init.0.weight`, `init.0.bias`, `init.2.weight`,
`init.2.bias`: Linear(20, 32) -> ReLU -> Linear(32, 5)), 20 batches (`x` [20, 16, 20] f32,
`y` [20, 16] i64), and for each configuration below the first 20 cross-entropy losses of
training from those weights on those batches (`losses.<name>`, f64): forward, loss,
zero_grad, backward, (clip), step, (scheduler step).
"""
import os
import sys

import torch
from safetensors.torch import save_file

DEFAULT_DIR = os.path.join(os.path.dirname(__file__), "..", "crates", "strata-nn", "tests",
                           "fixtures", "torch")
STEPS = 20


def configs():
    """name -> (optimizer factory, scheduler factory or None, clip max_norm or None)."""
    O, S = torch.optim, torch.optim.lr_scheduler
    return {
        "sgd_momentum": (lambda p: O.SGD(p, lr=0.05, momentum=0.9, weight_decay=1e-4), None, None),
        "sgd_nesterov": (lambda p: O.SGD(p, lr=0.05, momentum=0.9, nesterov=True), None, None),
        "adam": (lambda p: O.Adam(p, lr=1e-3), None, None),
        "adamw": (lambda p: O.AdamW(p, lr=1e-3, weight_decay=0.01), None, None),
        "amsgrad": (lambda p: O.Adam(p, lr=1e-3, amsgrad=True, weight_decay=1e-4), None, None),
        "sgd_cosine_clipped": (
            lambda p: O.SGD(p, lr=0.1, momentum=0.5, dampening=0.1),
            lambda o: S.CosineAnnealingLR(o, T_max=10, eta_min=0.001),
            0.5),
        "adamw_warmup_then_step": (
            lambda p: O.AdamW(p, lr=3e-3, betas=(0.8, 0.99)),
            lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.25, total_iters=4),
                                         S.StepLR(o, step_size=5, gamma=0.5)], milestones=[4]),
            None),
    }


def model():
    return torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 5))


def make(out_dir):
    torch.manual_seed(0)
    init = model()
    x = torch.randn(STEPS, 16, 20)
    y = torch.randint(0, 5, (STEPS, 16))
    tensors = {f"init.{k}": v.detach().clone() for k, v in init.state_dict().items()}
    tensors["x"], tensors["y"] = x, y
    for name, (make_opt, make_sched, clip) in configs().items():
        m = model()
        m.load_state_dict(init.state_dict())
        opt = make_opt(m.parameters())
        sched = make_sched(opt) if make_sched else None
        losses = []
        for i in range(STEPS):
            loss = torch.nn.functional.cross_entropy(m(x[i]), y[i])
            losses.append(loss.item())
            opt.zero_grad()
            loss.backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
            opt.step()
            if sched is not None:
                sched.step()
        tensors[f"losses.{name}"] = torch.tensor(losses, dtype=torch.float64)
    os.makedirs(out_dir, exist_ok=True)
    save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(out_dir, "optim.safetensors"))


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "make":
        sys.exit(__doc__)
    make(sys.argv[2] if len(sys.argv) > 2 else DEFAULT_DIR)
