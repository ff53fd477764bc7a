// Linear: parameters, PyTorch's initialization, and forward through
// functional::linear.
#include "ember/nn/linear.h"

#include <cmath>

#include "ember/core/ops.h"
#include "ember/nn/functional.h"
#include "ember/nn/init.h"

namespace ember::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_features(in_features), out_features(out_features) {
  EMBER_CHECK(in_features >= 0 && out_features >= 0, "Linear: in_features and out_features must be non-negative, got "
                                                         << in_features << " and " << out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (bias) this->bias = register_parameter("bias", empty({out_features}));
  reset_parameters();
}

void Linear::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    double bound = in_features > 0 ? 1.0 / std::sqrt(double(in_features)) : 0.0;
    init::uniform_(bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& input) { return functional::linear(input, weight, bias); }

std::shared_ptr<Module> Linear::clone() const { return clone_as<Linear>(in_features, out_features, bias.defined()); }

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features) + ", out_features=" + std::to_string(out_features) +
         ", bias=" + (bias.defined() ? "true" : "false");
}

}  // namespace ember::nn
