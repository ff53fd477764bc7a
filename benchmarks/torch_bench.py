"""What the PyTorch twins of ember's benchmarks share, as bench_util.h does
for ember's: the timing of a step, its median and 95th percentile, and one
training step in float32 or mixed precision.

    time_steps(device, warmup, steps, step)  milliseconds of each timed step:
        CUDA events on the current stream around the step, waiting for the
        end event after each step (as bench::time_steps), or wall time on
        the CPU
    median(v), p95(v)                        as bench::median, bench::p95
    make_train_step(model, optimizer, loss_fn, x, y, device_type, dtype)
        forward and loss under torch.autocast(dtype) when dtype is not None,
        zero_grad(set_to_none=True), backward and optimizer step, through a
        GradScaler for float16 (as bench::backward_and_step)
"""
import contextlib
import time

import torch


def time_steps(device, warmup, steps, step):
    for _ in range(warmup):
        step()
    times = []
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
        for _ in range(steps):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        return times
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def median(v):
    """The upper middle of the sorted values."""
    return sorted(v)[len(v) // 2]


def p95(v):
    """The nearest rank: the smallest value at least 95% of the values do not exceed."""
    s = sorted(v)
    rank = -(-95 * len(s) // 100)
    return s[max(rank, 1) - 1]


def make_train_step(model, optimizer, loss_fn, x, y, device_type, dtype):
    scaler = torch.amp.GradScaler(device_type) if dtype == torch.float16 else None

    def step():
        autocast = (torch.autocast(device_type=device_type, dtype=dtype)
                    if dtype is not None else contextlib.nullcontext())
        with autocast:
            loss = loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
    return step
