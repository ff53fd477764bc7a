"""PyTorch's figures for benchmarks/gpt_train, on the same machine.

The same model (torch_models.Gpt(..., gpt2=True): GPT-2 small, head tied to
the token embedding, attention through F.scaled_dot_product_attention
(is_causal=True) on (B, H, T, D) views), random tokens, step (forward and
loss under bfloat16 autocast, zero_grad(set_to_none=True), backward,
AdamW lr 6e-4, weight decay 0.1, betas 0.9/0.95, fused=True on CUDA),
timing (median of --steps after --warmup, CUDA events waiting for each
step's end), FLOP count (llm.c's 6 N + 6 L C T per token, N every parameter
once), bf16 matrix rate (a --gemm cubed bfloat16 torch.matmul in the same
run) and peak memory (torch.cuda.max_memory_allocated over the timed steps,
reset after the warm-up) as gpt_train.cpp; its comment defines the columns.

One table per system: eager, then torch.compile(model) (default options;
its compilation happens in the warm-up steps). Where torch has no
torch.compile (1.x) the compile table is skipped with a note, and where it
has no F.scaled_dot_product_attention (1.x) the attention is its math
(torch_models.causal_attention); --systems picks the tables. A batch that
runs out of memory reads "OOM".

Run: python3 benchmarks/gpt_train_torch.py [--batches 8,16,32,64] [--context 1024] [--steps 20] [--warmup 5]
     [--layers 12] [--width 768] [--heads 12] [--vocab 50257] [--gemm N] [--device cuda|cpu]
     [--systems eager,compile]
"""
import argparse
import gc

import torch
import torch.nn.functional as F

from torch_bench import median, time_steps
from torch_models import HAS_SDPA, Gpt


def gemm_tflops(n, device):
    a = torch.randn(n, n, device=device).to(torch.bfloat16)
    b = torch.randn(n, n, device=device).to(torch.bfloat16)
    with torch.no_grad():
        ms = median(time_steps(device, 3, 10, lambda: torch.matmul(a, b)))
    return 2.0 * n ** 3 / (ms * 1e-3) / 1e12


def measure(a, system, batch):
    """(median ms, peak GiB or None) of one batch size's training step."""
    torch.manual_seed(0)
    dev = torch.device(a.device)
    model = Gpt(a.layers, a.width, a.heads, a.context, a.vocab, gpt2=True).to(dev)
    fused = {"fused": True} if dev.type == "cuda" else {}
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, weight_decay=0.1, betas=(0.9, 0.95), **fused)
    forward = torch.compile(model) if system == "compile" else model
    ids = torch.randint(0, a.vocab, (batch, a.context), device=dev)
    nxt = torch.randint(0, a.vocab, (batch, a.context), device=dev)

    def step():
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            logits = forward(ids)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), nxt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    time_steps(dev, a.warmup, 0, step)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
    ms = median(time_steps(dev, 0, a.steps, step))
    peak = torch.cuda.max_memory_allocated(dev) / 2 ** 30 if dev.type == "cuda" else None
    return ms, peak


def free_memory(device):
    gc.collect()
    if torch.device(device).type == "cuda":
        torch.cuda.empty_cache()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batches", default="8,16,32,64")
    p.add_argument("--context", type=int, default=1024)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--gemm", type=int, default=None, help="GEMM size of the bf16 rate (8192 on CUDA, 512 on the CPU)")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--systems", default="eager,compile")
    a = p.parse_args()
    batches = [int(b) for b in a.batches.split(",")]
    systems = a.systems.split(",")
    for s in systems:
        if s not in ("eager", "compile"):
            p.error(f"--systems: {s!r} is not eager or compile")
    if a.width % a.heads:
        p.error(f"--width {a.width} must be a multiple of --heads {a.heads}")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device is visible")
    gemm = a.gemm or (8192 if a.device == "cuda" else 512)

    where = f"cuda:0, {torch.cuda.get_device_name(0)} (CUDA events)" if a.device == "cuda" else "cpu (wall time)"
    n = sum(t.numel() for t in Gpt(a.layers, a.width, a.heads, a.context, a.vocab, gpt2=True).parameters())
    flops_per_token = 6.0 * n + 6.0 * a.layers * a.width * a.context
    peak_tflops = gemm_tflops(gemm, a.device)
    fused = "fused=True" if a.device == "cuda" else "default implementation on the CPU"
    print(f"torch gpt_train: GPT of {a.layers} layers, width {a.width}, {a.heads} heads, context {a.context}, "
          f"vocab {a.vocab}, GPT-2 style (head tied to the token embedding, GELU tanh, GPT-2's initialization), "
          f"{n} parameters; random tokens; bf16 autocast; "
          f"AdamW lr 6e-4, weight decay 0.1, betas 0.9/0.95 ({fused}); median of {a.steps} steps after {a.warmup} "
          f"warm-up steps, on {where}, torch {torch.__version__}")
    if not HAS_SDPA:
        print("(this torch has no F.scaled_dot_product_attention: attention is its math, masked softmax)")
    print(f"\nFLOPs per token: 6 N + 6 L C T = {flops_per_token:.4g} (llm.c's convention: N = every parameter counted "
          "once, the tied head with the token embedding, position embedding included)")
    print(f"bf16 matrix rate: {peak_tflops:.1f} TFLOP/s (torch.matmul {gemm}x{gemm}x{gemm} bfloat16, the same run); "
          "MFU is model FLOP/s over it")
    for system in systems:
        name = f"torch {system}"
        print()
        if system == "compile" and not hasattr(torch, "compile"):
            print(f"({name}: skipped, torch {torch.__version__} has no torch.compile)")
            continue
        print("| system | batch | ms/step | tokens/s | TFLOP/s | MFU | peak GiB |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for batch in batches:
            try:
                ms, peak = measure(a, system, batch)
                tokens_per_s = batch * a.context / (ms * 1e-3)
                tflops = flops_per_token * tokens_per_s / 1e12
                peak_cell = "-" if peak is None else f"{peak:.2f}"
                print(f"| {name} | {batch} | {ms:.2f} | {tokens_per_s:.0f} | {tflops:.1f} | "
                      f"{100 * tflops / peak_tflops:.1f}% | {peak_cell} |", flush=True)
            except RuntimeError as e:  # torch.cuda.OutOfMemoryError is one
                if "out of memory" not in str(e):
                    raise
                print(f"| {name} | {batch} | OOM | | | | |", flush=True)
            free_memory(a.device)


if __name__ == "__main__":
    main()
