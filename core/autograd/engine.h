// The backward engine.
//
// Contract:
// - backward(roots, grads) computes the gradient of the roots with respect
//   to every leaf that requires grad and accumulates it into the leaves'
//   grad() (adding to what is there). A root's gradient may be omitted only
//   if the root has one element; it is then 1.
// - The walk is iterative (no recursion, so a chain of any length is safe).
//   A node runs once all gradients flowing into it are summed. Among ready
//   nodes, the one with the largest sequence_nr (recorded last) runs first;
//   a leaf's AccumulateGrad runs as soon as its gradient is complete.
// - Per leaf, in this order: its tensor hooks transform the gradient, it is
//   added into grad() (the first time the gradient itself is stored if
//   nothing else references it, else a copy; later in place), then its
//   post-accumulate-grad hooks run. Each leaf gets exactly one accumulation
//   per backward call, so a post-accumulate-grad hook fires once per leaf
//   per backward, the moment that leaf's gradient is final. DDP launches its
//   bucket all-reduce from these hooks.
// - Saved tensors are freed as each node finishes unless retain_graph; a
//   second backward through freed nodes is an ember::Error.
// - create_graph records the backward ops themselves, for higher-order
//   gradients.
// - Autocast is off while the engine runs (core/autocast_state.h): backward
//   ops run in the dtypes the forward chose, as in PyTorch.
// - grad(outputs, inputs) returns d(outputs)/d(inputs) without touching any
//   grad(); an input the outputs do not depend on is an error unless
//   allow_unused, when its gradient is undefined.
#pragma once

#include "core/tensor.h"

namespace ember::autograd {

void backward(const TensorList& roots, const TensorList& grad_roots = {}, bool retain_graph = false,
              bool create_graph = false);

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool create_graph = false, bool allow_unused = false);

}  // namespace ember::autograd
