// LayerNorm: parameters and forward through ember::layer_norm.
#include "ember/nn/layer_norm.h"

#include <sstream>

#include "ember/core/ops.h"
#include "ember/nn/init.h"

namespace ember::nn {

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool bias)
    : normalized_shape(std::move(normalized_shape)), eps(eps), elementwise_affine(elementwise_affine) {
  EMBER_CHECK(!this->normalized_shape.empty(), "LayerNorm: normalized_shape must have at least one dim");
  for (int64_t s : this->normalized_shape) {
    EMBER_CHECK(s > 0, "LayerNorm: normalized_shape " << shape_str(this->normalized_shape) << " must be positive");
  }
  EMBER_CHECK(eps > 0.0, "LayerNorm: eps must be positive, got " << eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", empty(this->normalized_shape));
    if (bias) this->bias = register_parameter("bias", empty(this->normalized_shape));
  }
  reset_parameters();
}

void LayerNorm::reset_parameters() {
  if (weight.defined()) init::ones_(weight);
  if (bias.defined()) init::zeros_(bias);
}

Tensor LayerNorm::forward(const Tensor& input) { return layer_norm(input, normalized_shape, weight, bias, eps); }

std::shared_ptr<Module> LayerNorm::clone() const {
  return clone_as<LayerNorm>(normalized_shape, eps, elementwise_affine, bias.defined());
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream s;
  s << "normalized_shape=" << shape_str(normalized_shape) << ", eps=" << eps
    << ", elementwise_affine=" << (elementwise_affine ? "true" : "false");
  if (elementwise_affine && !bias.defined()) s << ", bias=false";
  return s.str();
}

}  // namespace ember::nn
