// Flatten: merges dims start_dim..end_dim into one, as torch.nn.Flatten
// (default: everything but the batch dim, (N, C, H, W) -> (N, C*H*W)).
// A view when the input's strides allow, else a copy (Tensor::flatten).
#pragma once

#include "ember/nn/module.h"

namespace ember::nn {

class Flatten : public UnaryModule {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim(start_dim), end_dim(end_dim) {}

  Tensor forward(const Tensor& input) override { return input.flatten(start_dim, end_dim); }
  std::shared_ptr<Module> clone() const override { return clone_as<Flatten>(start_dim, end_dim); }
  std::string extra_repr() const override {
    return "start_dim=" + std::to_string(start_dim) + ", end_dim=" + std::to_string(end_dim);
  }

  const int64_t start_dim;
  const int64_t end_dim;
};

}  // namespace ember::nn
