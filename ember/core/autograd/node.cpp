// Node bookkeeping, per-tensor autograd state and the autograd methods of
// Tensor.
#include "ember/core/autograd/node.h"

#include <atomic>

#include "ember/core/autograd/accumulate_grad.h"
#include "ember/core/autograd/engine.h"
#include "ember/core/grad_mode.h"
#include "ember/core/inference_mode.h"
#include "ember/core/ops.h"

namespace ember {

namespace {
thread_local bool grad_enabled = true;
std::atomic<uint64_t> next_sequence_nr{0};
std::atomic<size_t> next_handle{1};
}  // namespace

bool GradMode::is_enabled() { return grad_enabled; }
void GradMode::set_enabled(bool enabled) { grad_enabled = enabled; }

Node::Node() : sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

namespace {
// Moves the next nodes that only `edges` keep alive onto `stack` and drops
// the other references, so that no node is destroyed from inside another
// node's destructor.
void take_sole_owned(std::vector<Edge>& edges, std::vector<std::shared_ptr<Node>>& stack) {
  for (Edge& e : edges) {
    if (e.node.use_count() == 1) stack.push_back(std::move(e.node));
    else e.node.reset();
  }
}
}  // namespace

// A recursive teardown would take a few stack frames per node and overflow
// on long chains (an RNN over many steps, a loop of 10,000 ops).
Node::~Node() {
  std::vector<std::shared_ptr<Node>> stack;
  take_sole_owned(next_edges_, stack);
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    n->release();  // saved tensors can hold next nodes too
    take_sole_owned(n->mutable_next_edges(), stack);
  }  // n dies here with no edges left to follow
}

namespace autograd {

size_t next_hook_handle() { return next_handle.fetch_add(1, std::memory_order_relaxed); }

AutogradMeta& meta(const Tensor& t) {
  EMBER_CHECK(t.defined(), "autograd: called on an undefined tensor");
  auto& m = t.impl()->autograd;
  if (!m) m = std::make_unique<AutogradMeta>();
  return *m;
}

const AutogradMeta* meta_if(const Tensor& t) { return t.defined() ? t.impl()->autograd.get() : nullptr; }

Edge gradient_edge(const Tensor& t) {
  const AutogradMeta* m = meta_if(t);
  if (m == nullptr) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  if (m->requires_grad) return {grad_accumulator(t), 0};
  return {};
}

void set_history(Tensor& t, const std::shared_ptr<Node>& node, uint32_t output_nr) {
  AutogradMeta& m = meta(t);
  m.grad_fn = node;
  m.output_nr = output_nr;
  m.requires_grad = true;
}

}  // namespace autograd

bool Tensor::requires_grad() const {
  const autograd::AutogradMeta* m = autograd::meta_if(*this);
  return m != nullptr && (m->requires_grad || m->grad_fn != nullptr);
}

Tensor& Tensor::set_requires_grad(bool requires_grad) {
  EMBER_CHECK(is_leaf(), "set_requires_grad: you can only change requires_grad of leaf tensors; this one was made by "
                             << grad_fn()->name() << ". Use detach() to get a leaf");
  EMBER_CHECK(!requires_grad || is_floating(dtype()),
              "set_requires_grad: only floating tensors can require gradients, got dtype " << dtype_name(dtype()));
  EMBER_CHECK(!requires_grad || !is_inference() || InferenceMode::is_enabled(),
              "set_requires_grad: setting requires_grad=true on an inference tensor (shape "
                  << shape_str(shape())
                  << ", made under InferenceMode) outside inference mode is not allowed; "
                     "clone() it outside inference mode to get a normal tensor");
  autograd::meta(*this).requires_grad = requires_grad;
  return *this;
}

bool Tensor::is_leaf() const {
  const autograd::AutogradMeta* m = autograd::meta_if(*this);
  return m == nullptr || m->grad_fn == nullptr;
}

Tensor Tensor::grad() const {
  const autograd::AutogradMeta* m = autograd::meta_if(*this);
  return m ? m->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  if (g.defined()) {
    EMBER_CHECK(g.shape() == shape() && g.dtype() == dtype() && g.device() == device(),
                "set_grad: the gradient (shape " << shape_str(g.shape()) << ", " << dtype_name(g.dtype()) << ", "
                                                 << g.device() << ") must match the tensor (shape "
                                                 << shape_str(shape()) << ", " << dtype_name(dtype()) << ", "
                                                 << device() << ")");
  }
  autograd::meta(*this).grad = g;
}

std::shared_ptr<Node> Tensor::grad_fn() const {
  const autograd::AutogradMeta* m = autograd::meta_if(*this);
  return m ? m->grad_fn : nullptr;
}

uint32_t Tensor::output_nr() const {
  const autograd::AutogradMeta* m = autograd::meta_if(*this);
  return m ? m->output_nr : 0;
}

void Tensor::retain_grad() {
  EMBER_CHECK(requires_grad(), "retain_grad: can't retain_grad on a tensor that has requires_grad=false");
  if (is_leaf()) return;  // leaves retain their gradient anyway
  autograd::AutogradMeta& m = autograd::meta(*this);
  if (m.retains_grad) return;
  m.retains_grad = true;
  // The hook must not own the tensor: the tensor owns the node that owns the hook.
  std::weak_ptr<TensorImpl> weak = impl_ptr();
  m.grad_fn->pre_hooks().push_back({autograd::next_hook_handle(), m.output_nr,
                                    [weak](const Tensor& g) {
                                      if (auto impl = weak.lock()) {
                                        auto& gm = *impl->autograd;
                                        gm.grad = gm.grad.defined() ? gm.grad + g : g.detach().clone();
                                      }
                                      return Tensor();
                                    },
                                    /*retains_grad=*/true});
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  autograd::backward({*this}, gradient.defined() ? TensorList{gradient} : TensorList{}, retain_graph, create_graph);
}

size_t Tensor::register_hook(GradHook fn) {
  EMBER_CHECK(requires_grad(), "register_hook: cannot register a hook on a tensor that doesn't require gradient");
  size_t handle = autograd::next_hook_handle();
  autograd::AutogradMeta& m = autograd::meta(*this);
  if (m.grad_fn) m.grad_fn->pre_hooks().push_back({handle, m.output_nr, std::move(fn)});
  else m.hooks.push_back({handle, std::move(fn)});
  return handle;
}

void Tensor::remove_hook(size_t handle) {
  autograd::AutogradMeta& m = autograd::meta(*this);
  std::erase_if(m.hooks, [&](const auto& h) { return h.handle == handle; });
  if (m.grad_fn) std::erase_if(m.grad_fn->pre_hooks(), [&](const auto& h) { return h.handle == handle; });
}

size_t Tensor::register_post_accumulate_grad_hook(PostAccumulateGradHook fn) {
  EMBER_CHECK(is_leaf() && requires_grad(),
              "register_post_accumulate_grad_hook: only leaf tensors that require grad "
              "accept post-accumulate-grad hooks");
  autograd::meta(*this).post_accumulate_hooks.push_back(std::move(fn));
  return autograd::meta(*this).post_accumulate_hooks.size();
}

}  // namespace ember
