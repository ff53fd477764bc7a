// Identity: forward returns its input, the same tensor (no copy, no graph
// node), as torch.nn.Identity. A placeholder where a layer is optional
// (a replaced head, a skipped norm). Prints as "Identity()".
#pragma once

#include "ember/nn/module.h"

namespace ember::nn {

class Identity : public UnaryModule {
 public:
  Identity() = default;

  Tensor forward(const Tensor& input) override { return input; }
  std::shared_ptr<Module> clone() const override { return clone_as<Identity>(); }
};

}  // namespace ember::nn
