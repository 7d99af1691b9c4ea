#!/usr/bin/env python3
"""Writes the conformance programs for the ops a transformer reaches for (`triu`, `tril`,
`roll`, `gelu_tanh`) to crates/strata-cli/tests/fixtures/conformance/transformer_ops.programs.json.

PyTorch's answers come from the conformance oracle, run where PyTorch is installed:

    python3 scripts/make-transformer-op-programs.py
    python3 ORACLE crates/strata-cli/tests/fixtures/conformance/transformer_ops.programs.json \
        > crates/strata-cli/tests/fixtures/conformance/transformer_ops.expected.json

The programs are deterministic (no random values), so the expected file never changes unless
the programs do.
"""
import json
import os

OUT = os.path.join(os.path.dirname(__file__), "..", "crates", "strata-cli", "tests", "fixtures",
                   "conformance", "transformer_ops.programs.json")

programs = []


def program(steps):
    programs.append({"id": f"tops-{len(programs):04d}", "steps": steps})


def values(n, scale=0.37, shift=-2.0):
    return [round(shift + scale * i, 4) for i in range(n)]


def leaf(name, shape, dtype="f32", grad=False):
    n = 1
    for s in shape:
        n *= s
    data = values(n) if dtype in ("f32", "f64", "bf16", "f16") else list(range(n))
    steps = [{"op": "tensor", "args": {"data": data, "shape": shape, "dtype": dtype}, "let": name}]
    if grad:
        steps.append({"op": "requires_grad_", "in": [name], "let": name})
    return steps


# triu / tril: diagonals, batches, strided inputs, dtypes, gradients, in place, errors.
for op in ("triu", "tril"):
    for diagonal in (-5, -2, -1, 0, 1, 2, 4):
        program(leaf("x", [3, 4]) + [
            {"op": op, "in": ["x"], "args": {"diagonal": diagonal}, "let": "y"},
            {"op": "observe", "in": ["x", "y"]}])
    program(leaf("x", [2, 3, 4]) + [
        {"op": op, "in": ["x"], "let": "y"}, {"op": "observe", "in": ["y"]}])
    program([{"op": "strided", "args": {"shape": [4, 3], "strides": [1, 4]}, "let": "x"},
             {"op": op, "in": ["x"], "args": {"diagonal": 1}, "let": "y"},
             {"op": "observe", "in": ["x", "y"]}])
    program([{"op": "strided", "args": {"shape": [2, 3, 3], "strides": [1, 6, 2]}, "let": "x"},
             {"op": op, "in": ["x"], "args": {"diagonal": -1}, "let": "y"},
             {"op": "observe", "in": ["y"]}])
    for dtype in ("i64", "bool", "f64", "bf16"):
        steps = ([{"op": "ones", "args": {"shape": [3, 3], "dtype": dtype}, "let": "x"}]
                 if dtype == "bool" else leaf("x", [3, 3], dtype))
        program(steps + [{"op": op, "in": ["x"], "args": {"diagonal": 1}, "let": "y"},
                         {"op": "observe", "in": ["y"]}])
    program(leaf("x", [3, 4], grad=True) + [
        {"op": op, "in": ["x"], "args": {"diagonal": -1}, "let": "y"},
        {"op": "mul", "in": ["y", "y"], "let": "z"},
        {"op": "sum", "in": ["z"], "let": "s"},
        {"op": "backward", "in": ["s"]},
        {"op": "observe", "in": ["x", "y"]}])
    program(leaf("x", [5, 0]) + [
        {"op": op, "in": ["x"], "let": "y"}, {"op": "observe", "in": ["y"]}])
    program(leaf("x", [4]) + [
        {"op": op, "in": ["x"], "let": "y"}, {"op": "observe", "in": ["y"]}])

# roll: one dim, several dims, negative and large shifts, no dims (flattened), strided
# inputs, empty tensors, gradients, errors.
for shifts, dims in ((1, 0), (-1, 0), (2, 1), (7, 1), (-8, -1), ([1, 2], [0, 1]),
                     ([2, -1], [1, 0]), ([1, 1], [0, 0]), (3, None), (-5, None), (0, 1)):
    args = {"shifts": shifts}
    if dims is not None:
        args["dims"] = dims
    program(leaf("x", [3, 4]) + [
        {"op": "roll", "in": ["x"], "args": args, "let": "y"},
        {"op": "observe", "in": ["x", "y"]}])
program([{"op": "strided", "args": {"shape": [4, 3], "strides": [1, 4]}, "let": "x"},
         {"op": "roll", "in": ["x"], "args": {"shifts": 1, "dims": 0}, "let": "y"},
         {"op": "roll", "in": ["x"], "args": {"shifts": 2}, "let": "z"},
         {"op": "observe", "in": ["y", "z"]}])
program(leaf("x", [0, 3]) + [
    {"op": "roll", "in": ["x"], "args": {"shifts": 1, "dims": 0}, "let": "y"},
    {"op": "observe", "in": ["y"]}])
program(leaf("x", [2, 3, 4], grad=True) + [
    {"op": "roll", "in": ["x"], "args": {"shifts": [1, -2], "dims": [2, 0]}, "let": "y"},
    {"op": "arange", "args": {"n": 24}, "let": "w"},
    {"op": "view", "in": ["w"], "args": {"shape": [2, 3, 4]}, "let": "w"},
    {"op": "mul", "in": ["y", "w"], "let": "z"},
    {"op": "sum", "in": ["z"], "let": "s"},
    {"op": "backward", "in": ["s"]},
    {"op": "observe", "in": ["x", "y"]}])
program(leaf("x", [2, 3], grad=True) + [
    {"op": "roll", "in": ["x"], "args": {"shifts": 4}, "let": "y"},
    {"op": "arange", "args": {"n": 6}, "let": "w"},
    {"op": "view", "in": ["w"], "args": {"shape": [2, 3]}, "let": "w"},
    {"op": "mul", "in": ["y", "w"], "let": "z"},
    {"op": "sum", "in": ["z"], "let": "s"},
    {"op": "backward", "in": ["s"]},
    {"op": "observe", "in": ["x"]}])
for args in ({"shifts": [1, 2], "dims": [0]}, {"shifts": [1, 2]}, {"shifts": 1, "dims": 2},
             {"shifts": [], "dims": []}):
    program(leaf("x", [3, 4]) + [
        {"op": "roll", "in": ["x"], "args": args, "let": "y"},
        {"op": "observe", "in": ["y"]}])

# gelu with approximate="tanh": values over a wide range, dtypes, gradients, an integer input.
for dtype in ("f32", "f64", "bf16"):
    program(leaf("x", [4, 6], dtype, grad=True) + [
        {"op": "gelu_tanh", "in": ["x"], "let": "y"},
        {"op": "sum", "in": ["y"], "let": "s"},
        {"op": "backward", "in": ["s"]},
        {"op": "observe", "in": ["x", "y"]}])
program([{"op": "tensor", "args": {"data": [-30.0, -6.0, -0.5, 0.0, 1e-4, 0.5, 6.0, 30.0],
                                   "shape": [8]}, "let": "x"},
         {"op": "gelu_tanh", "in": ["x"], "let": "y"},
         {"op": "gelu", "in": ["x"], "let": "z"},
         {"op": "observe", "in": ["y", "z"]}])
program(leaf("x", [3], "i64") + [
    {"op": "gelu_tanh", "in": ["x"], "let": "y"}, {"op": "observe", "in": ["y"]}])

with open(OUT, "w") as f:
    json.dump({"programs": programs}, f)
    f.write("\n")
print(f"{len(programs)} programs written to {os.path.normpath(OUT)}")
