"""The PyTorch twins of examples/train/models.h and examples/gpt/model.h
(ember-gpt's GPT, which gpt_train and dp_vs_ddp train), which the PyTorch
scripts beside ember's benchmarks (train_step_torch.py, dp_vs_ddp_torch.py,
gpt_train_torch.py) train: the same layers in the same order, the CNN's
convolutions without bias.

    make_mlp()         Flatten, Linear 784-1024, ReLU, Linear 1024-1024, ReLU,
                       Linear 1024-10 (ember's make_mlp({1024, 1024}, 0))
    make_cnn(dropout)  2 x [Conv2d 3x3 pad 1 (32, then 64), BatchNorm2d, ReLU,
                       MaxPool2d(2)], Flatten, Linear(64*7*7, 128), ReLU,
                       Dropout, Linear(128, 10) (ember's make_cnn(dropout))
    Gpt(layers, width, heads, context, vocab, gpt2=False)
                       ember's gpt::Gpt, parameter names included: tok, pos,
                       blocks.<i> (ln1; attn_qkv, causal attention on
                       (B, H, T, D) views of its output, attn_proj; ln2;
                       mlp = Linear, GELU, Linear), ln_f and a bias-free
                       head; no dropout (ember's Dropout layers at 0 return
                       their input, and have no parameters). gpt2=False is
                       dp_vs_ddp's (ember's dp_vs_ddp_gpt()): head untied,
                       exact GELU, PyTorch's default initialization.
                       gpt2=True is GPT-2's (GptConfig::gpt2_small(),
                       gpt_train): head.weight IS tok.weight, GELU tanh,
                       GPT-2's initialization (model.h says which). ember
                       runs mlp's first Linear and GELU as one linear_gelu
                       (the same values); torch runs them as two ops.
                       Attention is F.scaled_dot_product_attention(
                       is_causal=True), or a softmax of masked scores where
                       torch has no SDPA (torch 1.x, see HAS_SDPA).
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
    def __init__(self, width, heads, gelu):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(width)
        self.attn_qkv = nn.Linear(width, 3 * width)
        self.attn_proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate=gelu), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attention(self.ln1(x))
        return x + self.mlp(self.ln2(x))

    def attention(self, h):
        b, t, width = h.shape
        # (B, H, T, D) views of the three thirds (nanoGPT's split, as ember's model)
        q, k, v = (x.view(b, t, self.heads, -1).transpose(1, 2) for x in self.attn_qkv(h).split(width, dim=2))
        return self.attn_proj(causal_attention(q, k, v).transpose(1, 2).reshape(b, t, width))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads, context, vocab, gpt2=False):
        super().__init__()
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList([GptBlock(width, heads, "tanh" if gpt2 else "none") for _ in range(layers)])
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        if gpt2:
            self.head.weight = self.tok.weight
            self.init_gpt2(layers)

    def init_gpt2(self, layers):
        """GPT-2's initialization, as examples/gpt/model.cpp's init_gpt2."""
        residual_std = 0.02 / math.sqrt(2 * layers)
        nn.init.normal_(self.tok.weight, 0.0, 0.02)
        nn.init.normal_(self.pos.weight, 0.0, 0.02)
        for block in self.blocks:
            for linear in (block.attn_qkv, block.attn_proj, block.mlp[0], block.mlp[2]):
                residual = linear is block.attn_proj or linear is block.mlp[2]
                nn.init.normal_(linear.weight, 0.0, residual_std if residual else 0.02)
                nn.init.zeros_(linear.bias)

    def forward(self, ids):
        t = ids.size(1)
        x = self.tok(ids) + self.pos(torch.arange(t, device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))
