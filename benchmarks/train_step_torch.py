"""PyTorch eager's figures for benchmarks/train_step, on the same card.

The same networks (the CNN's convolutions without bias, as in
examples/train/models.h), optimizers, batch sizes and float32 inputs; the
same step (forward, cross-entropy, zero_grad, backward, optimizer step); the
same timing: median over 100 steps after 10 warm-up steps of the CUDA-event
time of one step, waiting for its end event after each step. TF32 is off for
matmuls and convolutions (ember's float32 default), cuDNN picks algorithms
by its heuristics (benchmark mode off, as ember). The last column is the
number of cudaMalloc calls of PyTorch's caching allocator during the timed
steps.

Run: python3 benchmarks/train_step_torch.py
"""
import statistics

import torch
from torch import nn

from torch_models import make_cnn, make_mlp


def device_allocs():
    return torch.cuda.memory_stats().get("num_device_alloc")


def time_case(model_name, optimizer_name, batch, warmup=10, steps=100):
    torch.manual_seed(0)
    dev = "cuda"
    model = (make_mlp() if model_name == "mlp" else make_cnn()).to(dev)
    if optimizer_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (batch,), device=dev)

    def step():
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    allocs_before = device_allocs()
    times = []
    for _ in range(steps):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    allocs = "n/a" if allocs_before is None else str(device_allocs() - allocs_before)
    return statistics.median(times), allocs


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    print(f"torch train_step: float32, median of 100 steps after 10 warm-up steps, on cuda:0, "
          f"{torch.cuda.get_device_name(0)} (CUDA events), torch {torch.__version__}\n")
    print("| model | optimizer | batch | ms/step | samples/s | cudaMalloc calls |")
    print("|---|---|---:|---:|---:|---:|")
    for model_name, optimizer_name, batch in [("mlp", "sgd", 64), ("mlp", "sgd", 256), ("mlp", "sgd", 4096),
                                              ("cnn", "adam", 256), ("cnn", "adam", 1024)]:
        ms, allocs = time_case(model_name, optimizer_name, batch)
        print(f"| {model_name} | {optimizer_name} | {batch} | {ms:.3f} | {batch / (ms * 1e-3):.0f} | {allocs} |",
              flush=True)


if __name__ == "__main__":
    main()
