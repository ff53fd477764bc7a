// Linear: y = x W^T + b, as torch.nn.Linear.
//
// Input (*, in_features), output (*, out_features); any number of leading
// dims. weight (out_features, in_features) starts as
// kaiming_uniform_(a = sqrt(5)), i.e. U(-1/sqrt(in_features),
// 1/sqrt(in_features)), and bias (out_features) as U(-1/sqrt(in_features),
// 1/sqrt(in_features)): PyTorch's initialization, draw for draw in the same
// order (weight first).
#pragma once

#include "ember/nn/module.h"

namespace ember::nn {

class Linear : public UnaryModule {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);

  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;  // "in_features=4, out_features=3, bias=true"
  // Re-draws weight and bias from the initial distributions.
  void reset_parameters();

  const int64_t in_features;
  const int64_t out_features;
  Tensor weight;  // (out_features, in_features)
  Tensor bias;    // (out_features), undefined when built with bias = false

 protected:
  void parameter_replaced(const std::string& name, const Tensor& parameter) override {
    (name == "weight" ? weight : bias) = parameter;
  }
};

}  // namespace ember::nn
