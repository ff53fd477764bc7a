// Dropout: forward through ember::dropout with the module's training flag.
#include "ember/nn/dropout.h"

#include <sstream>

#include "ember/core/ops.h"

namespace ember::nn {

Dropout::Dropout(double p) : p(p) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "Dropout: probability has to be between 0 and 1, but got " << p);
}

Tensor Dropout::forward(const Tensor& input) { return dropout(input, p, is_training()); }

std::shared_ptr<Module> Dropout::clone() const { return clone_as<Dropout>(p); }

std::string Dropout::extra_repr() const {
  std::ostringstream s;
  s << "p=" << p;
  return s.str();
}

}  // namespace ember::nn
