"""PyTorch's figures for benchmarks/attention, on the same machine.

The same shapes (contiguous (B, H, T, D) q, k, v with B T = --tokens and
H D = --width), dtypes, inputs N(0, 1), measurement (forward under no_grad;
fwd+bwd: the op, then torch.autograd.grad of q, k and v for a random output
gradient), timing (median of --steps after --warmup, CUDA events waiting for
each run's end) and FLOP count (causal forward 4 B H T T D / 2, fwd+bwd 3.5x
the forward) as attention.cpp; its comment defines the columns.

The op is F.scaled_dot_product_attention(q, k, v, is_causal=True) held to
one backend on CUDA (torch.nn.attention.sdpa_kernel): --backend flash
(FlashAttention-2, the default) or cudnn (cuDNN's fused attention);
on the CPU torch picks its backend, and a torch without SDPA (1.x) runs its
math (torch_models.causal_attention), as the header line says. A shape that
runs out of memory reads "OOM", one that fails otherwise (e.g. float16 on
torch 1.13's CPU) "failed", with the error on stderr and exit status 1.

Run: python3 benchmarks/attention_torch.py [--tokens 16384,65536] [--width 2048] [--head-dims 64,128]
     [--contexts 1024,2048,4096] [--dtypes bf16,fp16] [--steps 20] [--warmup 5] [--device cuda|cpu]
     [--backend flash|cudnn]
"""
import argparse
import contextlib
import sys

import torch

from torch_bench import median, time_steps
from torch_models import HAS_SDPA, causal_attention

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


def one_backend(device, name):
    """The context that holds SDPA to backend `name` (CUDA), and its name."""
    if device != "cuda" or not HAS_SDPA:
        return contextlib.nullcontext, "torch's choice" if HAS_SDPA else "math (no SDPA in this torch)"
    from torch.nn.attention import SDPBackend, sdpa_kernel
    backend = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}[name]
    return (lambda: sdpa_kernel(backend)), name


def measure(a, b, h, t, d, dtype):
    """(forward ms, fwd+bwd ms)."""
    torch.manual_seed(0)
    q, k, v, grad_out = (torch.randn(b, h, t, d, device=a.device).to(dtype) for _ in range(4))
    backend, _ = one_backend(a.device, a.backend)
    with backend():
        with torch.no_grad():
            fwd = median(time_steps(a.device, a.warmup, a.steps, lambda: causal_attention(q, k, v)))
        for x in (q, k, v):
            x.requires_grad_()

        def both():
            torch.autograd.grad(causal_attention(q, k, v), (q, k, v), grad_out)
        return fwd, median(time_steps(a.device, a.warmup, a.steps, both))


def counts(text):
    return [int(x) for x in text.split(",")]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=counts, default=[16384, 65536])
    p.add_argument("--width", type=int, default=2048)
    p.add_argument("--head-dims", type=counts, default=[64, 128])
    p.add_argument("--contexts", type=counts, default=[1024, 2048, 4096])
    p.add_argument("--dtypes", default="bf16,fp16")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--backend", choices=["flash", "cudnn"], default="flash")
    a = p.parse_args()
    dtypes = a.dtypes.split(",")
    for name in dtypes:
        if name not in DTYPES:
            p.error(f"--dtypes: {name!r} is not bf16 or fp16")
    for d in a.head_dims:
        if a.width % d:
            p.error(f"--width {a.width} must be a multiple of every --head-dims, not of {d}")
    for n in a.tokens:
        for t in a.contexts:
            if n % t:
                p.error(f"--tokens {n} must be a multiple of every --contexts, not of {t}")

    where = f"cuda:0, {torch.cuda.get_device_name(0)} (CUDA events)" if a.device == "cuda" else "cpu (wall time)"
    print(f"torch attention: causal F.scaled_dot_product_attention (backend: {one_backend(a.device, a.backend)[1]}) on "
          f"contiguous (B, H, T, D), H D = {a.width}; median of {a.steps} runs after {a.warmup} warm-up runs, "
          f"on {where}, torch {torch.__version__}")
    print("FLOPs: forward 4 B H T T D / 2 (causal), fwd+bwd 3.5x the forward\n")
    print("| system | dtype | D | T | B | H | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    status = 0
    for name in dtypes:
        for d in a.head_dims:
            for n in a.tokens:
                for t in a.contexts:
                    b, h = n // t, a.width // d
                    lead = f"| torch | {name} | {d} | {t} | {b} | {h}"
                    try:
                        fwd, both = measure(a, b, h, t, d, DTYPES[name])
                    except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
                        oom = "out of memory" in str(e)
                        print(f"{lead} | {'OOM' if oom else 'failed'} | | | |", flush=True)
                        print(f"{lead[2:]}: {e}", file=sys.stderr)
                        status = status if oom else 1
                        continue
                    flops = 4.0 * b * h * t * t * d / 2
                    print(f"{lead} | {fwd:.3f} | {flops / (fwd * 1e-3) / 1e12:.1f} | {both:.3f} | "
                          f"{3.5 * flops / (both * 1e-3) / 1e12:.1f} |", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
