// cast_to_half and MasterWeights (see ember/parallel/amp/master_weights.h).
#include "ember/parallel/amp/master_weights.h"

#include <utility>
#include <vector>

#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"
#include "ember/nn/batch_norm.h"

namespace ember::amp {

using ember::detail::describe;

namespace {
bool is_half(DType d) { return d == DType::Float16 || d == DType::BFloat16; }
}  // namespace

void cast_to_half(nn::Module& module, DType dtype) {
  EMBER_CHECK(is_half(dtype), "amp::cast_to_half: dtype must be float16 or bfloat16, but is " << dtype_name(dtype));
  // The BatchNorm layers and a copy of their floating state, put back after
  // the whole tree is converted (a round trip through half would round it).
  std::vector<std::pair<std::shared_ptr<nn::Module>, std::vector<std::pair<Tensor, Tensor>>>> kept;
  for (const std::shared_ptr<nn::Module>& m : module.modules()) {
    if (dynamic_cast<nn::BatchNormBase*>(m.get()) == nullptr) continue;
    std::vector<std::pair<Tensor, Tensor>> state;
    NoGradGuard no_grad;
    for (const Tensor& t : m->parameters(false)) state.push_back({t, t.detach().clone()});
    for (const Tensor& t : m->buffers(false)) {
      if (is_floating(t.dtype())) state.push_back({t, t.detach().clone()});
    }
    kept.push_back({m, std::move(state)});
  }
  module.to(dtype);
  for (auto& [m, state] : kept) {
    m->to(DType::Float32);
    NoGradGuard no_grad;
    for (auto& [t, value] : state) t.copy_(value);
  }
}

MasterWeights::MasterWeights(const TensorList& params) : params_(params) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    EMBER_CHECK(p.defined() && is_floating(p.dtype()) && p.is_leaf(),
                "amp::MasterWeights: parameter " << i << " must be a floating leaf tensor, but is "
                                                 << (p.defined() ? describe(p) : std::string("undefined")));
    if (!is_half(p.dtype())) {
      masters_.push_back(p);
      continue;
    }
    Tensor m = p.detach().to(DType::Float32);
    m.set_requires_grad(true);
    masters_.push_back(m);
  }
}

void MasterWeights::grads_to_master() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (masters_[i].is_same(params_[i])) continue;
    Tensor g = params_[i].grad();
    Tensor mg = masters_[i].grad();
    if (!g.defined()) {
      masters_[i].set_grad(Tensor());
    } else if (mg.defined()) {
      mg.copy_(g);
    } else {
      Tensor master_grad = empty_like(masters_[i]);  // float32, laid out as the master
      master_grad.copy_(g);
      masters_[i].set_grad(master_grad);
    }
  }
}

void MasterWeights::master_to_model() {
  NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!masters_[i].is_same(params_[i])) params_[i].copy_(masters_[i]);
  }
}

}  // namespace ember::amp
