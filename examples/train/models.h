// The networks ember-train trains on 28x28 grey images (N, 1, 28, 28) and
// benchmarks/train_step times: both map a batch to 10 logits (N, 10).
//
//   make_mlp({256, 128}, 0.2)   Flatten, then Linear 784-256, ReLU, Dropout,
//                               Linear 256-128, ReLU, Dropout, Linear 128-10
//                               (no Dropout layers when dropout is 0)
//   make_cnn(0.25)              2 x [Conv2d 3x3 pad 1 (32, then 64 channels),
//                               BatchNorm2d, ReLU, MaxPool2d(2)]: 28 -> 14 -> 7,
//                               then Flatten, Linear(64*7*7, 128), ReLU,
//                               Dropout, Linear(128, 10)
//
// The convolutions have no bias: the BatchNorm2d after each one subtracts
// the channel mean, which would cancel it. Parameters are initialized as
// PyTorch's layers are, from ember's CPU generator (ember::manual_seed).
// Header-only so that the benchmark builds the very same networks.
#pragma once

#include <memory>
#include <vector>

#include "ember/nn/nn.h"

namespace ember::train {

inline constexpr int64_t kImageSide = 28;
inline constexpr int64_t kClasses = 10;

inline std::shared_ptr<nn::Sequential> make_mlp(const std::vector<int64_t>& hidden, double dropout) {
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Flatten>());
  int64_t in = kImageSide * kImageSide;
  for (int64_t width : hidden) {
    net->push_back(std::make_shared<nn::Linear>(in, width));
    net->push_back(std::make_shared<nn::ReLU>());
    if (dropout > 0) net->push_back(std::make_shared<nn::Dropout>(dropout));
    in = width;
  }
  net->push_back(std::make_shared<nn::Linear>(in, kClasses));
  return net;
}

inline std::shared_ptr<nn::Sequential> make_cnn(double dropout) {
  auto net = std::make_shared<nn::Sequential>();
  int64_t in = 1;
  for (int64_t channels : {32, 64}) {
    net->push_back(std::make_shared<nn::Conv2d>(in, channels, 3, /*stride=*/1, /*padding=*/1, /*dilation=*/1,
                                                /*groups=*/1, /*bias=*/false));
    net->push_back(std::make_shared<nn::BatchNorm2d>(channels));
    net->push_back(std::make_shared<nn::ReLU>());
    net->push_back(std::make_shared<nn::MaxPool2d>(2));
    in = channels;
  }
  net->push_back(std::make_shared<nn::Flatten>());
  net->push_back(std::make_shared<nn::Linear>(64 * 7 * 7, 128));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Dropout>(dropout));
  net->push_back(std::make_shared<nn::Linear>(128, kClasses));
  return net;
}

}  // namespace ember::train
