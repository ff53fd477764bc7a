"""PyTorch eager's figures for benchmarks/train_step, on the same card.

The same networks (the CNN's convolutions without bias, as in
examples/train/models.h), optimizers, batch sizes and float32 inputs; the
same step (forward, cross-entropy, zero_grad, backward, optimizer step) in
the same precisions (--precision fp32,amp-fp16,amp-bf16: float16 autocast
with a GradScaler, bfloat16 autocast without one); the
same timing: median over 100 steps after 10 warm-up steps of the CUDA-event
time of one step, waiting for its end event after each step. TF32 is off for
matmuls and convolutions (ember's float32 default), cuDNN picks algorithms
by its heuristics (benchmark mode off, as ember). The last column is the
number of cudaMalloc calls of PyTorch's caching allocator during the timed
steps.

--layout nchw,channels-last as in train_step: channels-last converts the
CNN and its input with .to(memory_format=torch.channels_last) (the MLP
rows ignore it). --model and --batch keep only some of the rows.

--mode eager,graph as in train_step: graph captures the whole step in a
torch.cuda.CUDAGraph after the warm-up (run on a side stream, as PyTorch's
documentation asks; Adam with capturable=True) and times its replays.
PyTorch's GradScaler cannot be captured (its step reads found_inf on the
host), so amp-fp16 has no graph row.

Run: python3 benchmarks/train_step_torch.py [--precision fp32,amp-fp16,amp-bf16] [--mode eager,graph]
     [--layout nchw,channels-last] [--model mlp,cnn] [--batch 64,256,...]
"""
import argparse

import torch
from torch import nn

from torch_bench import make_train_step, median, time_steps
from torch_models import make_cnn, make_mlp

PRECISIONS = {"fp32": None, "amp-fp16": torch.float16, "amp-bf16": torch.bfloat16}


def device_allocs():
    return torch.cuda.memory_stats().get("num_device_alloc")


def graphed(step, warmup):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmup):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph.replay


def time_case(model_name, optimizer_name, precision, mode, batch, layout, warmup=10, steps=100):
    torch.manual_seed(0)
    dev = "cuda"
    model = (make_mlp() if model_name == "mlp" else make_cnn()).to(dev)
    fmt = torch.channels_last if layout == "channels-last" else torch.contiguous_format
    model = model.to(memory_format=fmt)
    if optimizer_name == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3, capturable=(mode == "graph"))
    x = torch.randn(batch, 1, 28, 28, device=dev).to(memory_format=fmt)
    y = torch.randint(0, 10, (batch,), device=dev)
    step = make_train_step(model, opt, nn.functional.cross_entropy, x, y, "cuda", PRECISIONS[precision])
    if mode == "graph":
        step = graphed(step, warmup)
    time_steps(dev, 1 if mode == "graph" else warmup, 0, step)
    allocs_before = device_allocs()
    ms = median(time_steps(dev, 0, steps, step))
    allocs = "n/a" if allocs_before is None else str(device_allocs() - allocs_before)
    return ms, allocs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--precision", default="fp32,amp-fp16,amp-bf16")
    parser.add_argument("--mode", default="eager,graph")
    parser.add_argument("--layout", default="nchw")
    parser.add_argument("--model", default="mlp,cnn")
    parser.add_argument("--batch", default="64,256,1024,4096")
    args = parser.parse_args()
    precisions = args.precision.split(",")
    modes = args.mode.split(",")
    layouts = args.layout.split(",")
    models = args.model.split(",")
    batches = [int(b) for b in args.batch.split(",")]
    for layout in layouts:
        if layout not in ("nchw", "channels-last"):
            parser.error(f"--layout: {layout!r} is not nchw or channels-last")
    for m in modes:
        if m not in ("eager", "graph"):
            parser.error(f"--mode: {m!r} is not eager or graph")
    for p in precisions:
        if p not in PRECISIONS:
            parser.error(f"--precision: {p!r} is not one of {', '.join(PRECISIONS)}")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    print(f"torch train_step: median of 100 steps after 10 warm-up steps, on cuda:0, "
          f"{torch.cuda.get_device_name(0)} (CUDA events), torch {torch.__version__}\n")
    print("| model | optimizer | precision | layout | mode | batch | ms/step | samples/s | cudaMalloc calls |")
    print("|---|---|---|---|---|---:|---:|---:|---:|")
    for model_name, optimizer_name, batch in [("mlp", "sgd", 64), ("mlp", "sgd", 256), ("mlp", "sgd", 4096),
                                              ("cnn", "adam", 64), ("cnn", "adam", 256), ("cnn", "adam", 1024)]:
        if model_name not in models or batch not in batches:
            continue
        for precision in precisions:
            for layout in layouts if model_name == "cnn" else ["nchw"]:
                for mode in modes:
                    if mode == "graph" and precision == "amp-fp16":
                        continue
                    ms, allocs = time_case(model_name, optimizer_name, precision, mode, batch, layout)
                    print(f"| {model_name} | {optimizer_name} | {precision} | {layout} | {mode} | {batch} | {ms:.3f} | "
                          f"{batch / (ms * 1e-3):.0f} | {allocs} |", flush=True)


if __name__ == "__main__":
    main()
