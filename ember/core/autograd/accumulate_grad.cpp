// Gradient accumulation into leaves, with PyTorch's aliasing rules: the first
// gradient is stored as is only when nothing else references it (so that a
// later in-place accumulation cannot write into another tensor), and later
// ones are added in place so that grad() keeps its storage (DDP's buckets
// rely on that). The first gradient is laid out as the leaf.
#include "ember/core/autograd/accumulate_grad.h"

#include <limits>

#include "ember/core/grad_mode.h"
#include "ember/core/memory_format.h"
#include "ember/core/ops.h"

namespace ember::autograd {

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {
  sequence_nr_ = std::numeric_limits<uint64_t>::max();
}

Tensor AccumulateGrad::run_tensor_hooks(Tensor grad) const {
  std::shared_ptr<TensorImpl> leaf = leaf_.lock();
  AutogradMeta* m = leaf ? leaf->autograd.get() : nullptr;
  if (m == nullptr) return grad;
  for (auto& hook : m->hooks) {
    Tensor replaced = hook.fn(grad);
    if (replaced.defined()) grad = replaced;
  }
  return grad;
}

TensorList AccumulateGrad::apply(TensorList&& grads) {
  Tensor leaf(leaf_.lock());
  if (!leaf.defined()) return {};
  Tensor grad = run_tensor_hooks(std::move(grads[0]));
  grads.clear();
  if (!grad.defined()) return {};
  AutogradMeta& m = *leaf.impl()->autograd;
  if (!m.grad.defined()) {
    // grad() is laid out as the leaf (a channels-last weight has a
    // channels-last gradient, which the fused optimizers walk alongside it).
    const Shape layout = preserved_strides(leaf);
    bool sole_owner = grad.impl_ptr().use_count() == 1 && grad.storage().use_count() == 1 &&
                      grad.is_non_overlapping_and_dense() && same_layout(grad.sizes(), grad.strides(), layout);
    if (GradMode::is_enabled()) {  // create_graph: a copy that keeps the history (copy_ records it)
      m.grad = empty_strided(leaf.sizes(), layout, grad.dtype(), grad.device());
      m.grad.copy_(grad);
    } else {
      m.grad = sole_owner ? grad : copy_like(grad, leaf);
    }
  } else if (GradMode::is_enabled()) {
    m.grad = m.grad + grad;  // create_graph: out of place, so the history is recorded
  } else {
    m.grad.add_(grad);
  }
  for (auto& hook : m.post_accumulate_hooks) hook(leaf);
  return {};
}

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  AutogradMeta& m = meta(leaf);
  std::shared_ptr<Node> acc = m.grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    m.grad_accumulator = acc;
  }
  return acc;
}

}  // namespace ember::autograd
