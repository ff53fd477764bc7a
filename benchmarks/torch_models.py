"""The PyTorch twins of examples/train/models.h and benchmarks/gpt.h, which
the PyTorch scripts beside ember's benchmarks (train_step_torch.py,
dp_vs_ddp_torch.py, gpt_train_torch.py) train: the same layers in the same
order, the CNN's convolutions without bias.

    make_mlp()         Flatten, Linear 784-1024, ReLU, Linear 1024-1024, ReLU,
                       Linear 1024-10 (ember's make_mlp({1024, 1024}, 0))
    make_cnn(dropout)  2 x [Conv2d 3x3 pad 1 (32, then 64), BatchNorm2d, ReLU,
                       MaxPool2d(2)], Flatten, Linear(64*7*7, 128), ReLU,
                       Dropout, Linear(128, 10) (ember's make_cnn(dropout))
    Gpt(layers, width, heads, context, vocab, gpt2=False)
                       bench::Gpt: token and position embeddings, pre-LN
                       blocks (causal self-attention, Linear-GELU-Linear),
                       LayerNorm, a bias-free head; parameter names as
                       ember's. gpt2=False is dp_vs_ddp's: head untied, exact
                       GELU, PyTorch's initialization, attention through
                       nn.MultiheadAttention with a bool causal mask
                       (need_weights=False). gpt2=True is GPT-2's (gpt_train):
                       head.weight IS tok.weight, GELU tanh, GPT-2's
                       initialization (gpt.h says which), attention through
                       F.scaled_dot_product_attention(is_causal=True) on
                       (B, H, T, D) views of attn's own in_proj output (a
                       softmax of masked scores where torch has no SDPA:
                       torch 1.x, see HAS_SDPA).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

# torch >= 2.0 has F.scaled_dot_product_attention; 1.13 computes it by hand.
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")


def make_mlp():
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 10))


def make_cnn(dropout=0.25):
    layers = []
    cin = 1
    for cout in (32, 64):
        layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
        cin = cout
    layers += [nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(dropout), nn.Linear(128, 10)]
    return nn.Sequential(*layers)


def causal_attention(q, k, v):
    """Causal attention over (B, H, T, D): F.scaled_dot_product_attention, or
    its math where torch lacks it."""
    if HAS_SDPA:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    t = q.size(-2)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))
    blocked = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
    return scores.masked_fill(blocked, float("-inf")).softmax(-1) @ v


class GptBlock(nn.Module):
    def __init__(self, width, heads, layers, gpt2):
        super().__init__()
        self.heads, self.gpt2 = heads, gpt2
        self.ln1 = nn.LayerNorm(width)
        self.attn = nn.MultiheadAttention(width, heads, dropout=0.0, bias=True, batch_first=True)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh" if gpt2 else "none"),
                                 nn.Linear(4 * width, width))
        if gpt2:
            residual_std = 0.02 / math.sqrt(2 * layers)
            nn.init.normal_(self.attn.in_proj_weight, 0.0, 0.02)
            nn.init.normal_(self.attn.out_proj.weight, 0.0, residual_std)
            nn.init.normal_(self.mlp[0].weight, 0.0, 0.02)
            nn.init.zeros_(self.mlp[0].bias)
            nn.init.normal_(self.mlp[2].weight, 0.0, residual_std)
            nn.init.zeros_(self.mlp[2].bias)

    def forward(self, x, causal):
        h = self.ln1(x)
        if self.gpt2:
            x = x + self.self_attention(h)
        else:
            x = x + self.attn(h, h, h, attn_mask=causal, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))

    def self_attention(self, h):
        b, t, width = h.shape
        qkv = F.linear(h, self.attn.in_proj_weight, self.attn.in_proj_bias).view(b, t, 3, self.heads, -1)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))  # (B, H, T, D) views
        return self.attn.out_proj(causal_attention(q, k, v).transpose(1, 2).reshape(b, t, width))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads, context, vocab, gpt2=False):
        super().__init__()
        self.gpt2 = gpt2
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList([GptBlock(width, heads, layers, gpt2) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        if gpt2:
            self.head.weight = self.tok.weight
            nn.init.normal_(self.tok.weight, 0.0, 0.02)
            nn.init.normal_(self.pos.weight, 0.0, 0.02)

    def forward(self, ids):
        t = ids.size(1)
        causal = None if self.gpt2 else torch.ones(t, t, dtype=torch.bool, device=ids.device).triu(1)  # True: blocked
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x, causal)
        return self.head(self.ln_f(x))
