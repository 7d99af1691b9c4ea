"""PyTorch's `nn.MultiheadAttention` on fixed inputs, for strata-nn's tests.

    python3 scripts/mha-fixtures.py [DIR]    (needs torch and safetensors)

For each case it writes `mha-<case>.safetensors` (the module's state dict, PyTorch's keys)
and `mha-<case>.io.safetensors`: the inputs (`query`, `key`, `value`), the masks as u8
(`key_padding_mask`, `attn_mask_bool`) or f32 (`attn_mask`), the upstream gradient `w`, and
PyTorch's `output`, `weights` (when asked for), and the gradients of `(output * w).sum()`
for the inputs (`grad.query`, ...) and every parameter (`grad.<name>`). The module runs in
training mode with dropout 0, so the fused inference path is not taken. Cases:
- self: self-attention, [L, N, E] = [5, 2, 8], 2 heads, weights averaged over heads
- cross: batch_first, query [2, 4, 8], key/value [2, 6, 8], a key padding mask and a bool
  attention mask, need_weights=False (PyTorch's scaled_dot_product_attention path)
- kvdim: batch_first, kdim 5 and vdim 3 (separate projection weights), a float attention
  mask, per-head weights (average_attn_weights=False)
- nobias: no biases, an unbatched [4, 8] input, weights averaged
- mask3d: a [N * heads, L, S] bool mask, need_weights=False
"""
import os
import sys

import torch
from safetensors.torch import save_file

DEFAULT_DIR = os.path.join(os.path.dirname(__file__), "..", "crates", "strata-nn", "tests",
                           "fixtures", "torch")


def case(d, name, module, q, k, v, **kw):
    module.train()
    for t in (q, k, v):
        t.requires_grad_(True)
    out, weights = module(q, k, v, **kw)
    w = torch.randn(out.shape)
    (out * w).sum().backward()
    io = {"query": q.detach(), "key": k.detach(), "value": v.detach(), "w": w,
          "output": out.detach()}
    if weights is not None:
        io["weights"] = weights.detach()
    for n, t in (("query", q), ("key", k), ("value", v)):
        io[f"grad.{n}"] = t.grad
    for n, p in module.named_parameters():
        io[f"grad.{n}"] = p.grad
    kpm, mask = kw.get("key_padding_mask"), kw.get("attn_mask")
    if kpm is not None:
        io["key_padding_mask"] = kpm.to(torch.uint8)
    if mask is not None:
        if mask.dtype == torch.bool:
            io["attn_mask_bool"] = mask.to(torch.uint8)
        else:
            io["attn_mask"] = mask
    save_file({k: t.contiguous() for k, t in module.state_dict().items()},
              os.path.join(d, f"mha-{name}.safetensors"))
    save_file({k: t.contiguous() for k, t in io.items()},
              os.path.join(d, f"mha-{name}.io.safetensors"))


def main(d):
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention
    x = torch.randn(5, 2, 8)
    case(d, "self", mha(8, 2), x, x.clone(), x.clone())
    kpm = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    mask = torch.rand(4, 6) < 0.3
    mask[:, 0] = False
    case(d, "cross", mha(8, 4, batch_first=True), torch.randn(2, 4, 8), torch.randn(2, 6, 8),
         torch.randn(2, 6, 8), key_padding_mask=kpm, attn_mask=mask, need_weights=False)
    case(d, "kvdim", mha(8, 2, batch_first=True, kdim=5, vdim=3), torch.randn(2, 3, 8),
         torch.randn(2, 4, 5), torch.randn(2, 4, 3), attn_mask=torch.randn(3, 4),
         average_attn_weights=False)
    y = torch.randn(4, 8)
    case(d, "nobias", mha(8, 2, bias=False), y, y.clone(), y.clone())
    mask3 = torch.rand(2 * 2, 3, 5) < 0.3
    mask3[..., 0] = False
    case(d, "mask3d", mha(8, 2), torch.randn(3, 2, 8), torch.randn(5, 2, 8),
         torch.randn(5, 2, 8), attn_mask=mask3, need_weights=False)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DIR)
