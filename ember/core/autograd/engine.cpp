// The backward engine: dependency count, then a ready heap ordered by
// sequence_nr, then the callbacks queued during the walk (see engine.h for
// the contract).
#include "ember/core/autograd/engine.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "ember/core/autocast_state.h"
#include "ember/core/autograd/accumulate_grad.h"
#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"

namespace ember::autograd {
namespace {

// The callbacks of the pass running on this thread (queue_callback).
struct PassCallbacks {
  std::vector<std::function<void()>> callbacks;
};
thread_local PassCallbacks* current_pass = nullptr;

// Makes `pass` the current one for a scope; the enclosing pass (if any) is
// current again afterwards, also when the scope is left by an exception.
class PassScope {
 public:
  explicit PassScope(PassCallbacks* pass) : outer_(current_pass) { current_pass = pass; }
  ~PassScope() { current_pass = outer_; }
  PassScope(const PassScope&) = delete;
  PassScope& operator=(const PassScope&) = delete;

 private:
  PassCallbacks* outer_;
};

// Runs the queued callbacks in order, including those they queue.
void run_callbacks(PassCallbacks& pass) {
  for (size_t i = 0; i < pass.callbacks.size(); ++i) {
    std::function<void()> callback = std::move(pass.callbacks[i]);  // a callback may queue more (and reallocate)
    callback();
  }
}

struct Capture {
  Node* node;
  uint32_t input_nr;
  size_t output_index;
};

// Gradient of each root: the given one, or 1 for a one-element root (left
// undefined without make_ones, for a root whose node skips its seed).
TensorList root_gradients(const TensorList& roots, const TensorList& grads, bool make_ones) {
  EMBER_CHECK(grads.empty() || grads.size() == roots.size(),
              "backward: got " << grads.size() << " gradients for " << roots.size() << " tensors");
  TensorList out;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    EMBER_CHECK(r.defined(), "backward: tensor " << i << " is undefined");
    EMBER_CHECK(r.requires_grad(), "backward: element " << i
                                                        << " of tensors does not require grad and does not "
                                                           "have a grad_fn (was it made under NoGradGuard, or from "
                                                           "tensors without requires_grad?)");
    if (!grads.empty() && grads[i].defined()) {
      EMBER_CHECK(grads[i].shape() == r.shape(), "backward: the gradient has shape " << shape_str(grads[i].shape())
                                                                                     << " but the tensor has shape "
                                                                                     << shape_str(r.shape()));
      out.push_back(grads[i]);
    } else {
      EMBER_CHECK(r.numel() == 1,
                  "backward: grad can be implicitly created only for one-element outputs, but "
                  "the tensor has shape "
                      << shape_str(r.shape()) << "; pass a gradient of that shape");
      out.push_back(make_ones ? ones(r.shape(), r.dtype(), r.device()) : Tensor());
    }
  }
  return out;
}

void accumulate_into(Tensor& slot, Tensor&& g) {
  if (!g.defined()) return;
  if (!slot.defined()) slot = std::move(g);
  else slot = slot + g;
}

struct ByPriority {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// The inputs' gradients of a lone root given no gradient, when its node has
// them without a seed (Node::apply_to_unit_seed), and that node; an empty
// UnitSeed otherwise.
struct UnitSeed {
  std::optional<TensorList> grads;
  Node* node = nullptr;
};

UnitSeed unit_seed(const TensorList& roots, const TensorList& grads, bool create_graph, bool capturing) {
  UnitSeed seed;
  if (roots.size() == 1 && (grads.empty() || !grads[0].defined()) && !create_graph && !capturing &&
      roots[0].defined() && roots[0].numel() == 1) {
    const Edge e = gradient_edge(roots[0]);
    if (e.valid() && e.node->pre_hooks().empty()) {
      seed.grads = e.node->apply_to_unit_seed();
      if (seed.grads) seed.node = e.node.get();
    }
  }
  return seed;
}

// How many edges lead into each node reachable from the roots.
std::unordered_map<Node*, int> count_dependencies(const std::vector<Edge>& root_edges) {
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (const Edge& e : root_edges) {
    if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
  }
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  return deps;
}

// With captures, the nodes worth running: those from which a captured slot
// is reachable.
std::unordered_set<Node*> nodes_above_captures(const std::vector<Edge>& root_edges,
                                               const std::vector<Capture>& captures) {
  std::unordered_set<Node*> needed;
  std::unordered_set<Node*> targets;
  for (const Capture& c : captures) targets.insert(c.node);
  // Reverse post-order over the reachable graph, iteratively.
  std::vector<std::pair<Node*, size_t>> dfs;
  std::unordered_set<Node*> visited;
  for (const Edge& e : root_edges) {
    if (visited.insert(e.node.get()).second) dfs.push_back({e.node.get(), 0});
    while (!dfs.empty()) {
      auto& [n, i] = dfs.back();
      if (i < n->next_edges().size()) {
        Node* child = n->next_edges()[i++].node.get();
        if (child && visited.insert(child).second) dfs.push_back({child, 0});
        continue;
      }
      // A node runs only when a captured slot lies below it; a captured
      // node itself is not run (its input gradient is all grad() needs).
      bool need = false;
      for (const Edge& ce : n->next_edges()) {
        need = need || (ce.valid() && (needed.count(ce.node.get()) || targets.count(ce.node.get())));
      }
      if (need) needed.insert(n);
      dfs.pop_back();
    }
  }
  return needed;
}

// Where the walk stands: the gradients summed so far for each node's
// outputs, how many edges into each node are still to deliver, and the
// nodes all of whose gradients are in, largest sequence_nr first.
struct Walk {
  std::unordered_map<Node*, int> deps;
  std::unordered_map<Node*, TensorList> buffers;
  std::priority_queue<Node*, std::vector<Node*>, ByPriority> ready;
  std::unordered_set<Node*> queued;

  // Adds g into the gradient of output `output_nr` of n.
  void add(Node* n, uint32_t output_nr, Tensor&& g) {
    TensorList& buf = buffers[n];
    buf.resize(n->num_outputs());
    accumulate_into(buf[output_nr], std::move(g));
  }
  void queue_if_ready(Node* n) {
    if (deps[n] == 0 && queued.insert(n).second) ready.push(n);
  }
  // The next node to run and its gradients, one per output.
  std::pair<Node*, TensorList> next() {
    Node* n = ready.top();
    ready.pop();
    TensorList inputs = std::move(buffers[n]);
    buffers.erase(n);
    inputs.resize(n->num_outputs());
    return {n, std::move(inputs)};
  }
  // Hands n's results to the nodes its edges lead to.
  void deliver(Node* n, TensorList& outputs) {
    const auto& edges = n->next_edges();
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.valid()) continue;
      Node* next = e.node.get();
      if (i < outputs.size() && outputs[i].defined()) add(next, e.input_nr, std::move(outputs[i]));
      --deps[next];
      queue_if_ready(next);
    }
  }
};

// n's pre-hooks on the gradients of its outputs; retain_grad's hooks last.
void run_pre_hooks(Node* n, TensorList& inputs) {
  for (bool retains : {false, true}) {
    for (auto& hook : n->pre_hooks()) {
      Tensor& g = inputs[hook.output_nr];
      if (hook.retains_grad != retains || !g.defined()) continue;
      Tensor replaced = hook.fn(g);
      if (replaced.defined()) g = replaced;
    }
  }
}

// Runs the graph from `roots`. With captures, the gradients flowing into the
// captured (node, slot) pairs are returned and leaves are not accumulated.
TensorList run(const TensorList& roots, const TensorList& grads, bool retain_graph, bool create_graph,
               const std::vector<Capture>& captures, size_t num_captures) {
  bool capturing = num_captures > 0;
  UnitSeed unit_seeded = unit_seed(roots, grads, create_graph, capturing);
  TensorList root_grads = root_gradients(roots, grads, /*make_ones=*/!unit_seeded.grads);
  PassCallbacks pass;
  PassScope scope(&pass);

  std::vector<Edge> root_edges;
  for (const Tensor& r : roots) root_edges.push_back(gradient_edge(r));
  Walk walk;
  walk.deps = count_dependencies(root_edges);
  const std::unordered_set<Node*> needed =
      capturing ? nodes_above_captures(root_edges, captures) : std::unordered_set<Node*>();

  std::vector<std::shared_ptr<Node>> keep_alive;  // roots' nodes, for the whole run
  for (size_t i = 0; i < roots.size(); ++i) {
    keep_alive.push_back(root_edges[i].node);
    walk.add(root_edges[i].node.get(), root_edges[i].input_nr, std::move(root_grads[i]));
  }
  for (const Edge& e : root_edges) walk.queue_if_ready(e.node.get());

  TensorList captured(num_captures);
  GradModeGuard grad_mode(create_graph);  // the backward ops record themselves only for create_graph
  while (!walk.ready.empty()) {
    auto [n, inputs] = walk.next();
    run_pre_hooks(n, inputs);
    auto* acc = dynamic_cast<AccumulateGrad*>(n);
    for (const Capture& c : captures) {
      if (c.node != n || !inputs[c.input_nr].defined()) continue;
      captured[c.output_index] = acc ? acc->run_tensor_hooks(inputs[c.input_nr]) : inputs[c.input_nr];
    }
    TensorList outputs;
    if (capturing && (acc != nullptr || !needed.count(n))) {
      outputs.resize(n->next_edges().size());
    } else {
      outputs = n == unit_seeded.node ? std::move(*unit_seeded.grads) : n->apply(std::move(inputs));
      if (!retain_graph) n->release();
    }
    walk.deliver(n, outputs);
  }
  run_callbacks(pass);
  return captured;
}

}  // namespace

void queue_callback(std::function<void()> callback) {
  EMBER_CHECK(current_pass != nullptr,
              "autograd::queue_callback: no backward pass is running on this thread; queue "
              "callbacks from inside a backward (a hook or a node), to run when it ends");
  EMBER_CHECK(callback != nullptr, "autograd::queue_callback: the callback is empty");
  current_pass->callbacks.push_back(std::move(callback));
}

bool in_backward() { return current_pass != nullptr; }

void backward(const TensorList& roots, const TensorList& grad_roots, bool retain_graph, bool create_graph) {
  autocast_state::SuspendGuard no_autocast;
  run(roots, grad_roots, retain_graph || create_graph, create_graph, {}, 0);
}

TensorList grad(const TensorList& outputs, const TensorList& inputs, const TensorList& grad_outputs, bool retain_graph,
                bool create_graph, bool allow_unused) {
  std::vector<Capture> captures;
  std::vector<std::shared_ptr<Node>> keep;
  for (size_t i = 0; i < inputs.size(); ++i) {
    EMBER_CHECK(inputs[i].defined() && inputs[i].requires_grad(),
                "autograd::grad: input " << i << " does not require grad");
    Edge e = gradient_edge(inputs[i]);
    keep.push_back(e.node);
    captures.push_back({e.node.get(), e.input_nr, i});
  }
  autocast_state::SuspendGuard no_autocast;
  TensorList result = run(outputs, grad_outputs, retain_graph || create_graph, create_graph, captures, inputs.size());
  for (size_t i = 0; i < result.size(); ++i) {
    EMBER_CHECK(result[i].defined() || allow_unused,
                "autograd::grad: input " << i << " (shape " << shape_str(inputs[i].shape())
                                         << ") was not used to compute the outputs; pass allow_unused=true if "
                                            "that is expected");
  }
  return result;
}

}  // namespace ember::autograd
