#!/usr/bin/env python3
"""Writes the conformance programs for `scaled_dot_product_attention` to
crates/strata-cli/tests/fixtures/conformance/attention.programs.json.

PyTorch's answers come from the conformance oracle, run where PyTorch is installed:

    python3 scripts/make-attention-programs.py
    python3 ORACLE crates/strata-cli/tests/fixtures/conformance/attention.programs.json \\
        > crates/strata-cli/tests/fixtures/conformance/attention.expected.json

Inputs are fixed pseudo-random values (no random ops), so the answers never change unless
the programs do. Programs without a `backend` argument let PyTorch choose its path (its
fused CPU kernel for 4-d and 3-d inputs without dropout), as strata does by the same rule;
`backend` restricts both to one path, as PyTorch's `sdpa_kernel` does.
"""
import json
import os

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "strata-cli", "tests", "fixtures",
                   "conformance", "attention.programs.json")

programs = []
state = [12345]


def noise(n):
    out = []
    for _ in range(n):
        state[0] = (state[0] * 1103515245 + 12345) % (1 << 31)
        out.append(round(state[0] / (1 << 30) - 1.0, 4))
    return out


def tensor(name, shape, dtype="f32", grad=False, data=None):
    n = 1
    for s in shape:
        n *= s
    steps = [{"op": "tensor", "args": {"data": data if data is not None else noise(n), "shape": shape,
                                       "dtype": dtype}, "let": name}]
    if grad:
        steps.append({"op": "requires_grad_", "in": [name], "let": name})
    return steps


def program(steps):
    programs.append({"id": f"attn-{len(programs):04d}", "steps": steps})


def sdpa(qs, ks, vs, args=None, mask=None, grad=False, dtype="f32"):
    steps = tensor("q", qs, dtype, grad) + tensor("k", ks, dtype, grad) + tensor("v", vs, dtype, grad)
    ins = ["q", "k", "v"]
    if mask is not None:
        steps += mask
        ins.append("m")
    steps.append({"op": "scaled_dot_product_attention", "in": ins, "args": args or {}, "let": "y"})
    if grad:
        n = 1
        out_shape = list(qs[:-1]) + [vs[-1]]
        for s in out_shape:
            n *= s
        steps += tensor("w", out_shape, dtype)
        steps += [{"op": "mul", "in": ["y", "w"], "let": "z"},
                  {"op": "sum", "in": ["z"], "let": "s"},
                  {"op": "backward", "in": ["s"]},
                  {"op": "observe", "in": ["q", "k", "v", "y"], "args": {"values_only": True}}]
    else:
        steps.append({"op": "observe", "in": ["y"], "args": {"values_only": True}})
    program(steps)


def bool_mask(shape, keep):
    n = 1
    for s in shape:
        n *= s
    return [{"op": "tensor", "args": {"data": [int(keep(i)) for i in range(n)], "shape": shape,
                                      "dtype": "bool"}, "let": "m"}]


# Shapes: 4-d (PyTorch's fused path), 3-d and 2-d (math), broadcast batch dims, Ev != E.
for backend in (None, "math"):
    args = {} if backend is None else {"backend": backend}
    sdpa([2, 3, 5, 8], [2, 3, 7, 8], [2, 3, 7, 8], args, grad=True)
    sdpa([2, 3, 5, 8], [2, 3, 5, 8], [2, 3, 5, 8], dict(args, is_causal=True), grad=True)
    sdpa([1, 2, 6, 4], [1, 2, 3, 4], [1, 2, 3, 4], dict(args, is_causal=True), grad=True)
    sdpa([1, 2, 3, 4], [1, 2, 6, 4], [1, 2, 6, 4], dict(args, is_causal=True))
    sdpa([1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8], dict(args, scale=0.3))
sdpa([3, 5, 8], [3, 7, 8], [3, 7, 6], grad=True)
sdpa([5, 8], [7, 8], [7, 3])
sdpa([2, 1, 4, 8], [1, 3, 6, 8], [1, 3, 6, 2], grad=True)
sdpa([2, 4, 8], [2, 6, 8], [2, 6, 5], {"is_causal": True})
# Masks: bool (true = attend) broadcast from [L, S] and [B, 1, L, S], float, a fully masked row.
sdpa([2, 2, 4, 8], [2, 2, 6, 8], [2, 2, 6, 8], mask=bool_mask([4, 6], lambda i: i % 3 != 1),
     grad=True)
sdpa([2, 2, 4, 8], [2, 2, 6, 8], [2, 2, 6, 8],
     mask=bool_mask([2, 1, 4, 6], lambda i: (i * 7) % 5 != 0))
sdpa([2, 2, 4, 8], [2, 2, 6, 8], [2, 2, 6, 8], mask=tensor("m", [4, 6]), grad=True)
sdpa([3, 4, 8], [3, 6, 8], [3, 6, 8], mask=bool_mask([4, 6], lambda i: i // 6 != 2), grad=True)
sdpa([3, 4, 8], [3, 6, 8], [3, 6, 8], {"backend": "math"},
     mask=bool_mask([4, 6], lambda i: i // 6 != 2))
sdpa([2, 4, 8], [2, 6, 8], [2, 6, 8], mask=tensor("m", [2, 4, 6], "f64"), dtype="f64")
# Grouped-query heads.
sdpa([1, 6, 4, 8], [1, 2, 5, 8], [1, 3, 5, 8], {"enable_gqa": True}, grad=True)
sdpa([1, 4, 4, 8], [1, 2, 4, 8], [1, 2, 4, 8], {"enable_gqa": True, "is_causal": True})
# f64 and its gradients.
sdpa([2, 2, 3, 4], [2, 2, 5, 4], [2, 2, 5, 4], {"is_causal": True}, grad=True, dtype="f64")
# Half precision, and f32 inputs inside a bf16 autocast region (cast to bf16 at the op). Under
# autocast the leaf's gradient is f32, compared tightly: on its fused path PyTorch's backward
# rounds its bf16 output before using it, which a math path cannot reproduce to the bit, so
# that program asks PyTorch for its math path.
sdpa([1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8], grad=True, dtype="bf16")
sdpa([2, 4, 8], [2, 4, 8], [2, 4, 8], {"is_causal": True}, grad=True, dtype="bf16")
sdpa([2, 4, 8], [2, 6, 8], [2, 6, 8], dtype="f16")
program(tensor("q", [2, 3, 8], grad=True) + tensor("kv", [2, 5, 8]) + [
    {"op": "autocast", "args": {"dtype": "bf16"}},
    {"op": "scaled_dot_product_attention", "in": ["q", "kv", "kv"], "args": {"backend": "math"},
     "let": "y"},
    {"op": "autocast_exit"},
    {"op": "sum", "in": ["y"], "let": "s"},
    {"op": "backward", "in": ["s"]},
    {"op": "observe", "in": ["q", "y"], "args": {"values_only": True}}])
# Errors.
sdpa([1, 2, 4, 8], [1, 2, 4, 8], [1, 2, 4, 8], {"is_causal": True},
     mask=bool_mask([4, 4], lambda i: True))
sdpa([1, 2, 4, 8], [1, 2, 4, 8], [1, 2, 4, 8], mask=tensor("m", [4, 4], "i64", data=[0] * 16))
sdpa([1, 2, 4, 8], [1, 2, 4, 8], [1, 2, 4, 8], mask=tensor("m", [4, 4], "f64"))
sdpa([1, 3, 4, 8], [1, 2, 4, 8], [1, 2, 4, 8], {"enable_gqa": True})
sdpa([1, 3, 4, 8], [1, 2, 4, 8], [1, 2, 4, 8])
sdpa([4, 8], [4, 6], [4, 8])
sdpa([8], [8], [8])
sdpa([2, 4], [2, 4], [2, 4], dtype="i64")
# The flash path asked for by name (as PyTorch's sdpa_kernel): several blocks of 32 query
# rows and of 512 keys, causal masking with L > S and L < S, a mask with a dead row, an
# additive mask broadcast over heads and rows, grouped and shared key/value heads, 3-d
# inputs with a 3-d mask, a negative scale (also on the math path), every floating dtype,
# and autocast taking PyTorch's fused path.
flash = {"backend": "flash"}
sdpa([1, 2, 40, 4], [1, 2, 520, 4], [1, 2, 520, 4], flash, grad=True)
sdpa([1, 2, 70, 4], [1, 2, 40, 4], [1, 2, 40, 4], dict(flash, is_causal=True), grad=True)
sdpa([1, 2, 40, 4], [1, 2, 70, 4], [1, 2, 70, 4], dict(flash, is_causal=True), grad=True)
sdpa([2, 2, 4, 8], [2, 2, 6, 8], [2, 2, 6, 8], flash,
     mask=bool_mask([4, 6], lambda i: i // 6 != 2 and i % 5 != 1), grad=True)
sdpa([2, 2, 4, 8], [2, 2, 6, 8], [2, 2, 6, 8], flash, mask=tensor("m", [2, 1, 1, 6]), grad=True)
sdpa([1, 6, 5, 8], [1, 2, 7, 8], [1, 2, 7, 8], dict(flash, enable_gqa=True, is_causal=True),
     grad=True)
sdpa([2, 4, 3, 8], [2, 1, 6, 8], [2, 1, 6, 8], flash, grad=True)
sdpa([3, 5, 8], [3, 7, 8], [3, 7, 8], flash, mask=tensor("m", [3, 5, 7]), grad=True)
for backend in ("flash", "math"):
    sdpa([1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8], {"backend": backend, "scale": -0.4}, grad=True)
sdpa([2, 2, 3, 4], [2, 2, 5, 4], [2, 2, 5, 4], dict(flash, is_causal=True), grad=True, dtype="f64")
sdpa([1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8], flash, grad=True, dtype="bf16")
sdpa([1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8], flash, grad=True, dtype="f16")
program(tensor("q", [1, 2, 3, 8], grad=True) + tensor("kv", [1, 2, 5, 8]) + [
    {"op": "autocast", "args": {"dtype": "bf16"}},
    {"op": "scaled_dot_product_attention", "in": ["q", "kv", "kv"], "args": {}, "let": "y"},
    {"op": "autocast_exit"},
    {"op": "sum", "in": ["y"], "let": "s"},
    {"op": "backward", "in": ["s"]},
    # The leaf's f32 gradient holds bf16 values that may differ from PyTorch's in the last
    # bf16 bit (f32 sums in another order), beyond f32's tolerance: the bf16 program above
    # checks the fused gradients at bf16's.
    {"op": "observe", "in": ["y"], "args": {"values_only": True}}])
# Errors: flash alone where it cannot run (Ev != E, dropout, 2-d inputs).
sdpa([1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 4], flash)
sdpa([1, 2, 4, 8], [1, 2, 6, 8], [1, 2, 6, 8], dict(flash, dropout_p=0.5))
sdpa([5, 8], [7, 8], [7, 8], flash)

with open(OUT, "w") as f:
    json.dump({"programs": programs}, f)
    f.write("\n")
print(f"{len(programs)} programs written to {os.path.normpath(OUT)}")
