// Node: one recorded op of the backward graph.
//
// Contract:
// - A node maps the gradients of its op's outputs (one slot per output) to
//   the gradients of its inputs (one per next edge, in input order). An
//   undefined Tensor means "zero gradient" both ways.
// - next_edges()[i] says where the gradient of input i goes: the node that
//   made that input and which of its outputs it was, or the input's
//   AccumulateGrad node when the input is a leaf that requires grad, or
//   nothing (an input that needs no gradient).
// - sequence_nr orders nodes: the engine runs ready nodes with the largest
//   sequence_nr first (the most recently recorded), as PyTorch's engine does;
//   AccumulateGrad nodes have the largest of all, so a leaf's gradient is
//   accumulated as soon as it is complete.
// - release() drops saved tensors after the node ran (unless retain_graph).
// - Destroying a node frees the chain of nodes it solely owns iteratively,
//   so a graph of any depth is torn down without deep recursion.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/tensor.h"

namespace ember {

class Node;

struct Edge {
  std::shared_ptr<Node> node;
  uint32_t input_nr = 0;  // which output of `node` (= which input slot of node's apply)
  bool valid() const { return node != nullptr; }
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node();

  virtual std::string name() const = 0;
  // grads has one entry per output of the forward op.
  virtual TensorList apply(TensorList&& grads) = 0;
  // The gradients of the inputs for the seed 1, when this node is the one
  // root of a backward() given no gradient, if the node has them at hand
  // without computing (GradScaler's scaled loss: its scale); empty, the
  // default, to have the engine seed a tensor of ones and call apply(). The
  // engine asks only without create_graph, captures or hooks on the root;
  // the tensors returned may be shared, so the nodes they flow into must not
  // modify them in place (as no node does with its incoming gradients).
  virtual std::optional<TensorList> apply_to_unit_seed() { return std::nullopt; }
  // Drops what was saved for backward; a second backward then errors.
  virtual void release() {}

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  std::vector<Edge>& mutable_next_edges() { return next_edges_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  uint32_t num_outputs() const { return num_outputs_; }
  void set_num_outputs(uint32_t n) { num_outputs_ = n; }

  // Hooks on the gradient of output `output_nr` before apply (tensor hooks of
  // non-leaf tensors). retain_grad's hook runs after the tensor's other
  // hooks, so that the retained gradient is the final one (as in PyTorch).
  struct PreHook {
    size_t handle;
    uint32_t output_nr;
    std::function<Tensor(const Tensor&)> fn;
    bool retains_grad = false;
  };
  std::vector<PreHook>& pre_hooks() { return pre_hooks_; }

 protected:
  std::vector<Edge> next_edges_;
  uint64_t sequence_nr_;
  uint32_t num_outputs_ = 1;
  std::vector<PreHook> pre_hooks_;
};

namespace autograd {

// Per-tensor autograd state, created lazily on the TensorImpl.
struct AutogradMeta {
  bool requires_grad = false;
  bool retains_grad = false;
  Tensor grad;
  std::shared_ptr<Node> grad_fn;
  uint32_t output_nr = 0;
  std::weak_ptr<Node> grad_accumulator;  // AccumulateGrad of a leaf, owned by the graph
  struct Hook {
    size_t handle;
    Tensor::GradHook fn;
  };
  std::vector<Hook> hooks;  // leaf tensor hooks, run before accumulation
  std::vector<Tensor::PostAccumulateGradHook> post_accumulate_hooks;
};

AutogradMeta& meta(const Tensor& t);           // creates it if missing
const AutogradMeta* meta_if(const Tensor& t);  // null if none

// Where the gradient of t goes (its grad_fn, or its leaf accumulator).
// Invalid edge when t does not require grad.
Edge gradient_edge(const Tensor& t);

// Sets t's grad_fn to node's output output_nr.
void set_history(Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr);

size_t next_hook_handle();

}  // namespace autograd
}  // namespace ember
