// The backward engine.
//
// Contract:
// - backward(roots, grads) computes the gradient of the roots with respect
//   to every leaf that requires grad and accumulates it into the leaves'
//   grad() (adding to what is there). A root's gradient may be omitted only
//   if the root has one element; it is then 1. A lone root given no
//   gradient, without create_graph and without hooks, whose node has its
//   inputs' gradients for that 1 at hand (Node::apply_to_unit_seed:
//   GradScaler's scaled loss) is not seeded: the engine takes them.
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
// - Autocast is off while the engine runs (ember/core/autocast_state.h): backward
//   ops run in the dtypes the forward chose, as in PyTorch.
// - grad(outputs, inputs) returns d(outputs)/d(inputs) without touching any
//   grad(); an input the outputs do not depend on is an error unless
//   allow_unused, when its gradient is undefined. It accumulates no leaf, so
//   no post-accumulate-grad hook fires during it.
// - queue_callback(fn), called while a backward()/grad() runs on this thread
//   (from a node, a tensor hook or a post-accumulate-grad hook), runs fn
//   once that pass has walked its whole graph, before backward()/grad()
//   returns: PyTorch's Variable._execution_engine.queue_callback. Callbacks
//   run in the order queued, on the same thread, with autocast off and grad
//   mode as during the walk (on only with create_graph); one may queue
//   more, which run after it. A callback's exception propagates to the
//   caller of backward()/grad() and the callbacks after it do not run; when
//   the walk itself throws, no callback runs. Each pass has its own
//   callbacks: one started from inside another (a nested backward) runs
//   only those queued during it. Queuing while no pass runs on this thread
//   is an ember::Error. DDP finishes its gradient reduction this way.
#pragma once

#include <functional>

#include "ember/core/tensor.h"

namespace ember::autograd {

void backward(const TensorList& roots, const TensorList& grad_roots = {}, bool retain_graph = false,
              bool create_graph = false);

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs = {},
                bool retain_graph = false, bool create_graph = false, bool allow_unused = false);

void queue_callback(std::function<void()> callback);
// Whether a backward()/grad() is running on this thread.
bool in_backward();

}  // namespace ember::autograd
