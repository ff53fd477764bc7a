"""PyTorch's side of scripts/cpu_threads_bench.sh: ember-train's CNN
(examples/train/models.h: 2 x [Conv2d 3x3 pad 1 without bias (32, then 64
channels), BatchNorm2d, ReLU, MaxPool2d(2)], Flatten, Linear(3136, 128), ReLU,
Dropout(0.25), Linear(128, 10)) trained on the CPU with Adam at batch 64, at
the thread counts given, on random 28x28 images (the arithmetic of a step does
not depend on the pixels). Prints one line per count: "threads samples_per_s".

  python3 benchmarks/cpu_threads_torch.py STEPS THREADS...
"""
import sys
import time

import torch
from torch import nn


def make_cnn():
    layers = []
    cin = 1
    for cout in (32, 64):
        layers += [nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(2)]
        cin = cout
    layers += [nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10)]
    return nn.Sequential(*layers)


def samples_per_second(threads, steps, batch=64):
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    net = make_cnn().train()
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.rand(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return steps * batch / (time.perf_counter() - start)


def main():
    steps = int(sys.argv[1])
    for threads in map(int, sys.argv[2:]):
        print(threads, f"{samples_per_second(threads, steps):.0f}", flush=True)


if __name__ == "__main__":
    main()
