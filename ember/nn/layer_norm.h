// LayerNorm: normalizes over the trailing normalized_shape dims, as
// torch.nn.LayerNorm.
//
// Input (*, normalized_shape...), output of the same shape: each slice over
// the last normalized_shape.size() dims is normalized with its mean and
// biased variance (+ eps), then, with elementwise_affine, scaled by weight
// (ones) and shifted by bias (zeros; absent when bias = false), both of
// shape normalized_shape. The op is ember::layer_norm.
#pragma once

#include "ember/nn/module.h"

namespace ember::nn {

class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true);

  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  // "normalized_shape=[64], eps=1e-05, elementwise_affine=true"
  std::string extra_repr() const override;
  void reset_parameters();

  const Shape normalized_shape;
  const double eps;
  const bool elementwise_affine;
  Tensor weight;  // normalized_shape, undefined unless elementwise_affine
  Tensor bias;    // normalized_shape, undefined unless elementwise_affine and bias

 protected:
  void parameter_replaced(const std::string& name, const Tensor& parameter) override {
    (name == "weight" ? weight : bias) = parameter;
  }
};

}  // namespace ember::nn
