// AccumulateGrad: the node at the end of every path to a leaf that
// requires grad. It runs the leaf's tensor hooks, adds the gradient into the
// leaf's grad() and then runs its post-accumulate-grad hooks (engine.h gives
// the exact order and timing).
#pragma once

#include <memory>

#include "ember/core/autograd/node.h"

namespace ember::autograd {

class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::string name() const override { return "AccumulateGrad"; }
  TensorList apply(TensorList&& grads) override;
  // The leaf's tensor hooks applied to grad, without accumulating (used by
  // autograd::grad, which must not touch grad()).
  Tensor run_tensor_hooks(Tensor grad) const;
  // The leaf, or an undefined Tensor once nothing else holds it.
  Tensor leaf() const { return Tensor(leaf_.lock()); }

 private:
  // Weak: with create_graph, the leaf's grad() holds a graph that reaches
  // this node, and a strong pointer would make a cycle that never frees. A
  // leaf nobody holds any more has no grad() to accumulate into.
  std::weak_ptr<TensorImpl> leaf_;
};

// The AccumulateGrad of a leaf that requires grad, created on first use and
// shared by every graph that uses the leaf.
std::shared_ptr<Node> grad_accumulator(const Tensor& leaf);

}  // namespace ember::autograd
