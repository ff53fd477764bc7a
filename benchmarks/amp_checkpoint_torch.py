"""PyTorch's figures for benchmarks/amp_checkpoint, on the same card.

The same model (depth x (Linear(width, width) + GELU), LayerNorm, Linear(width,
10)), AdamW with its defaults, cross-entropy on random inputs and labels made
on the GPU once; float32 and mixed precision (float16 autocast with a
GradScaler, or --dtype bf16 without one), each without and with
torch.utils.checkpoint.checkpoint_sequential(model, 4, x,
use_reentrant=False) (PyTorch's recommended mode; its last segment runs
normally, as ember's). Timing as ember's: the median over 20 steps after 3
warm-up steps between CUDA events; memory: the peak of
torch.cuda.max_memory_allocated during the timed steps above what was
allocated before them. TF32 off (ember's float32 default).

Run: python3 benchmarks/amp_checkpoint_torch.py [--dtype fp16|bf16] [--width N] [--depth N] [--batch N]
"""
import argparse

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint_sequential

from torch_bench import make_train_step, median, time_steps


def measure(a, low, ckpt):
    torch.manual_seed(0)
    dev = "cuda"
    layers = []
    for _ in range(a.depth):
        layers += [nn.Linear(a.width, a.width), nn.GELU()]
    model = nn.Sequential(*layers, nn.LayerNorm(a.width), nn.Linear(a.width, 10)).to(dev)
    opt = torch.optim.AdamW(model.parameters())
    x = torch.randn(a.batch, a.width, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    forward = (lambda inp: checkpoint_sequential(model, 4, inp, use_reentrant=False)) if ckpt else model
    step = make_train_step(forward, opt, nn.functional.cross_entropy, x, y, "cuda", low)
    time_steps(dev, 3, 0, step)
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    ms = median(time_steps(dev, 0, 20, step))
    return ms, (torch.cuda.max_memory_allocated() - base) / 2**20


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", choices=["fp16", "bf16"], default="fp16")
    parser.add_argument("--width", type=int, default=4096)
    parser.add_argument("--depth", type=int, default=16)
    parser.add_argument("--batch", type=int, default=4096)
    a = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    low = torch.float16 if a.dtype == "fp16" else torch.bfloat16
    print(f"torch amp_checkpoint: {a.depth} x (Linear {a.width}-{a.width} + GELU), batch {a.batch}, AdamW; "
          f"median of 20 steps on cuda:0, {torch.cuda.get_device_name(0)}, torch {torch.__version__}; "
          f"memory: peak memory_allocated in a step\n")
    print("| precision | checkpoint | ms/step | memory MiB |\n|---|---|---:|---:|")
    for mixed in (False, True):
        for ckpt in (False, True):
            ms, mib = measure(a, low if mixed else None, ckpt)
            precision = f"amp {'float16' if low == torch.float16 else 'bfloat16'}" if mixed else "float32"
            print(f"| {precision} | {'4 segments' if ckpt else 'none'} | {ms:.2f} | {mib:.1f} |", flush=True)


if __name__ == "__main__":
    main()
