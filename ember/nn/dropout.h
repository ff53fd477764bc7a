// Dropout: zeroes each element with probability p and scales the rest by
// 1 / (1 - p) while training; the identity in eval mode (is_training()).
// As torch.nn.Dropout; the op is ember::dropout (its mask is regenerated in
// backward, never stored).
#pragma once

#include "ember/nn/module.h"

namespace ember::nn {

class Dropout : public UnaryModule {
 public:
  explicit Dropout(double p = 0.5);

  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;  // "p=0.5"

  const double p;
};

}  // namespace ember::nn
