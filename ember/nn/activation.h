// Activation layers: ReLU, GELU, Tanh, Sigmoid, Softmax and LogSoftmax.
//
// Each applies its ember op (ember/core/ops.h) elementwise, or along `dim` for the
// softmaxes, and has no parameters.
#pragma once

#include <string>
#include <utility>

#include "ember/nn/module.h"

namespace ember::nn {

class ReLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
};

// torch.nn.GELU: approximate "none" (the default) is the exact (erf) form,
// "tanh" the tanh approximation (see ember::gelu); another string is an
// ember::Error at forward, as in PyTorch. Prints GELU(approximate='none').
class GELU : public UnaryModule {
 public:
  explicit GELU(std::string approximate = "none") : approximate(std::move(approximate)) {}
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  const std::string approximate;
};

class Tanh : public UnaryModule {
 public:
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
};

class Sigmoid : public UnaryModule {
 public:
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
};

// exp(x) / sum(exp(x)) along dim (negative dims count from the end).
class Softmax : public UnaryModule {
 public:
  explicit Softmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  const int64_t dim;
};

// log(softmax(x, dim)), computed stably.
class LogSoftmax : public UnaryModule {
 public:
  explicit LogSoftmax(int64_t dim) : dim(dim) {}
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  const int64_t dim;
};

}  // namespace ember::nn
