"""PyTorch's figures for the ops of benchmarks/kernels, on the same card.

Same shapes, same byte counts, median of CUDA-event timings after warm-up.
Run: python3 benchmarks/torch_reference.py
"""

import torch

from torch_bench import median, time_steps


def median_ms(fn, repeats=20):
    return median(time_steps("cuda", 3, repeats, fn))


def main():
    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"device: {torch.cuda.get_device_name(0)}, torch {torch.__version__}")
    n = 1 << 28
    src, dst = torch.rand(n, device=dev), torch.empty(n, device=dev)
    copy_ms = median_ms(lambda: dst.copy_(src))
    copy_gbps = 2 * n * 4 / (copy_ms * 1e-3) / 1e9
    print(f"device-to-device copy: {copy_ms:.3f} ms, {copy_gbps:.0f} GB/s")
    a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
    h, h2 = a.half(), b.half()
    row = torch.randn(8192, device=dev)
    m = torch.randn(8192, 8192, device=dev)
    mbytes = 8192 * 8192 * 4
    rows = [
        ("add", "[256M] f32", 3 * n * 4, lambda: a + b),
        ("mul scalar", "[256M] f32", 2 * n * 4, lambda: a * 1.5),
        ("relu", "[256M] f32", 2 * n * 4, lambda: torch.relu(a)),
        ("add_ (in place)", "[256M] f32", 3 * n * 4, lambda: a.add_(b)),
        ("cast f32->bf16", "[256M]", n * 6, lambda: a.to(torch.bfloat16)),
        ("add", "[256M] f16", 3 * n * 2, lambda: h + h2),
        ("add broadcast row", "[32768, 8192] + [8192] f32", 2 * n * 4, lambda: a.view(32768, 8192) + row),
        ("add transposed", "[16384, 16384]^T f32", 3 * n * 4, lambda: a.view(16384, 16384).t() + b.view(16384, 16384)),
        ("sum rows", "[32768, 8192] f32", n * 4, lambda: a.view(32768, 8192).sum(1)),
        ("sum cols", "[32768, 8192] f32", n * 4, lambda: a.view(32768, 8192).sum(0)),
        ("softmax", "[8192, 8192] f32", 2 * mbytes, lambda: torch.softmax(m, 1)),
        ("log_softmax", "[8192, 8192] f32", 2 * mbytes, lambda: torch.log_softmax(m, 1)),
        ("layer_norm", "[8192, 8192] f32", 2 * mbytes, lambda: torch.nn.functional.layer_norm(m, (8192,))),
    ]
    print("\n| op | shape | time (ms) | GB/s | of copy |\n|---|---|---:|---:|---:|")
    for op, shape, nbytes, fn in rows:
        ms = median_ms(fn)
        gbps = nbytes / (ms * 1e-3) / 1e9
        print(f"| {op} | {shape} | {ms:.3f} | {gbps:.0f} | {100 * gbps / copy_gbps:.1f}% |")
    print("\n| matmul 4096^3 | torch (ms) | TFLOP/s |\n|---|---:|---:|")
    s = 4096
    for dt in (torch.float32, torch.float16, torch.bfloat16):
        x, y = torch.randn(s, s, device=dev).to(dt), torch.randn(s, s, device=dev).to(dt)
        ms = median_ms(lambda: x @ y)
        print(f"| {dt} | {ms:.3f} | {2 * s**3 / (ms * 1e-3) / 1e12:.1f} |")
    import time
    t16, u16 = torch.randn(16, device=dev), torch.randn(16, device=dev)
    for _ in range(1000):
        t16 + u16
    torch.cuda.synchronize()
    per_op = []
    for _ in range(10):
        t0 = time.perf_counter()
        for _ in range(2000):
            t16 + u16
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        per_op.append((t1 - t0) / 2000 * 1e6)
    print(f"\nhost overhead of a 16-element CUDA add: {median(per_op):.2f} us per op")


if __name__ == "__main__":
    main()
