// Activation layers: each forward is one ember op.
#include "ember/nn/activation.h"

#include "ember/core/ops.h"

namespace ember::nn {

Tensor ReLU::forward(const Tensor& input) { return relu(input); }
std::shared_ptr<Module> ReLU::clone() const { return clone_as<ReLU>(); }

Tensor GELU::forward(const Tensor& input) { return gelu(input, approximate); }
std::shared_ptr<Module> GELU::clone() const { return clone_as<GELU>(approximate); }
std::string GELU::extra_repr() const { return "approximate='" + approximate + "'"; }

Tensor Tanh::forward(const Tensor& input) { return tanh(input); }
std::shared_ptr<Module> Tanh::clone() const { return clone_as<Tanh>(); }

Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }
std::shared_ptr<Module> Sigmoid::clone() const { return clone_as<Sigmoid>(); }

Tensor Softmax::forward(const Tensor& input) { return softmax(input, dim); }
std::shared_ptr<Module> Softmax::clone() const { return clone_as<Softmax>(dim); }
std::string Softmax::extra_repr() const { return "dim=" + std::to_string(dim); }

Tensor LogSoftmax::forward(const Tensor& input) { return log_softmax(input, dim); }
std::shared_ptr<Module> LogSoftmax::clone() const { return clone_as<LogSoftmax>(dim); }
std::string LogSoftmax::extra_repr() const { return "dim=" + std::to_string(dim); }

}  // namespace ember::nn
