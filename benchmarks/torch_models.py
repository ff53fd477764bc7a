"""The PyTorch twins of examples/train/models.h, which the PyTorch scripts
beside ember's benchmarks (train_step_torch.py, dp_vs_ddp_torch.py) train:
the same layers in the same order, the CNN's convolutions without bias.

    make_mlp()         Flatten, Linear 784-1024, ReLU, Linear 1024-1024, ReLU,
                       Linear 1024-10 (ember's make_mlp({1024, 1024}, 0))
    make_cnn(dropout)  2 x [Conv2d 3x3 pad 1 (32, then 64), BatchNorm2d, ReLU,
                       MaxPool2d(2)], Flatten, Linear(64*7*7, 128), ReLU,
                       Dropout, Linear(128, 10) (ember's make_cnn(dropout))
"""
from torch import nn


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
