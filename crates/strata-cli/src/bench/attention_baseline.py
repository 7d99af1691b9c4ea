"""PyTorch's figure for strata bench's attention row: one forward and backward of
scaled_dot_product_attention on [1, 4, L, 32] f32 (PyTorch takes its fused CPU path), the
median of REPS runs after a warm-up, on the given thread count.

Usage: python3 -c "$(cat attention_baseline.py)" THREADS L REPS   (prints milliseconds)
"""
import sys
import time

import torch
import torch.nn.functional as F

threads, length, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads)
torch.manual_seed(0)
q, k, v = (torch.randn(1, 4, length, 32, requires_grad=True) for _ in range(3))
g = torch.randn(1, 4, length, 32)


def step():
    y = F.scaled_dot_product_attention(q, k, v)
    y.backward(g)
    for t in (q, k, v):
        t.grad = None


assert "Flash" in type(F.scaled_dot_product_attention(q, k, v).grad_fn).__name__
step()
until = time.perf_counter() + 0.1
while time.perf_counter() < until:
    step()
ts = []
for _ in range(reps):
    t = time.perf_counter()
    step()
    ts.append(time.perf_counter() - t)
ts.sort()
print(ts[len(ts) // 2] * 1e3)
