// SavedTensor, FunctionNode and record(): how ops join the graph.
#include "ember/core/autograd/function.h"

namespace ember::autograd {

namespace {
// The FunctionNode whose backward closure is running on this thread.
thread_local FunctionNode* running_node = nullptr;

struct RunningNodeScope {
  FunctionNode* previous;
  explicit RunningNodeScope(FunctionNode* node) : previous(running_node) { running_node = node; }
  ~RunningNodeScope() { running_node = previous; }
};

// The innermost saved-tensor hooks of this thread (saved_tensor_hooks.h).
thread_local SavedTensorHooks* current_hooks = nullptr;
}  // namespace

SavedTensorHooks* current_saved_tensor_hooks() { return current_hooks; }

SavedTensorHooksGuard::SavedTensorHooksGuard(SavedTensorHooks* hooks) : previous_(current_hooks) {
  current_hooks = hooks;
}

SavedTensorHooksGuard::~SavedTensorHooksGuard() { current_hooks = previous_; }

bool SavedTensor::pack(const Tensor& t) {
  if (current_hooks == nullptr || !t.defined()) return false;
  packed_ = current_hooks->pack(t);
  EMBER_CHECK(packed_ != nullptr, "autograd: a saved-tensor pack hook returned nothing for a tensor of shape "
                                      << shape_str(t.shape()) << " (" << dtype_name(t.dtype())
                                      << "); pack must return an object that can give the tensor back");
  return true;
}

SavedTensor::SavedTensor(const Tensor& t) {
  EMBER_CHECK(!t.defined() || !t.is_inference(),
              "autograd: inference tensors cannot be saved for backward: an op whose gradient needs a tensor of shape "
                  << shape_str(t.shape()) << " (" << dtype_name(t.dtype()) << ", " << t.device()
                  << ") got one made under InferenceMode; clone() it outside inference mode to get a normal tensor "
                     "and use that in autograd");
  if (pack(t)) return;
  tensor_ = t;
  version_ = t.defined() ? t.version() : 0;
}

SavedTensor SavedTensor::output(const Tensor& t, uint32_t output_nr) {
  SavedTensor s;
  s.is_output_ = true;
  s.output_nr_ = output_nr;
  Tensor detached = t.detach();
  if (s.pack(detached)) return s;
  s.tensor_ = std::move(detached);
  s.version_ = t.version();
  return s;
}

Tensor SavedTensor::unpack(const char* node) const {
  Tensor t;
  if (packed_ != nullptr) {
    t = packed_->unpack();
  } else {
    EMBER_CHECK(!tensor_.defined() || tensor_.version() == version_,
                "autograd: one of the tensors needed for gradient computation has been modified by an in-place "
                "operation: "
                    << node << " saved a tensor of shape " << shape_str(tensor_.shape()) << " ("
                    << dtype_name(tensor_.dtype()) << ", " << tensor_.device() << ") at version " << version_
                    << "; it is now at version " << tensor_.version()
                    << ". Use the out-of-place op, or clone() the tensor before changing it");
    t = tensor_;
  }
  if (is_output_ && running_node != nullptr && GradMode::is_enabled() && t.defined() && is_floating(t.dtype())) {
    Tensor reattached = t.detach();
    set_history(reattached, running_node->shared_from_this(), output_nr_);
    return reattached;
  }
  return t;
}

FunctionNode::FunctionNode(const char* name, Backward fn, std::vector<Edge> edges, std::vector<InputMeta> inputs,
                           uint32_t num_outputs)
    : name_(name), fn_(std::move(fn)), inputs_(std::move(inputs)) {
  next_edges_ = std::move(edges);
  num_outputs_ = num_outputs;
}

TensorList FunctionNode::apply(TensorList&& grads) {
  bool any = false;
  for (const Tensor& g : grads) any = any || g.defined();
  if (!any) return TensorList(inputs_.size());
  EMBER_CHECK(fn_ != nullptr, "autograd: trying to backward through "
                                  << name_
                                  << " a second time, after its saved tensors were freed. Pass retain_graph=true "
                                     "to the first backward() if you need to backward twice");
  TensorList out;
  {
    RunningNodeScope scope(this);
    out = fn_(grads);
  }
  EMBER_CHECK(out.size() == inputs_.size(),
              "autograd: " << name_ << " returned " << out.size() << " gradients for " << inputs_.size() << " inputs");
  for (size_t i = 0; i < out.size(); ++i) {
    if (!out[i].defined() || !next_edges_[i].valid()) continue;
    const InputMeta& m = inputs_[i];
    EMBER_CHECK(out[i].shape() == m.shape && out[i].device() == m.device,
                "autograd: " << name_ << " returned a gradient of shape " << shape_str(out[i].shape()) << " on "
                             << out[i].device() << " for input " << i << " of shape " << shape_str(m.shape) << " on "
                             << m.device);
    if (out[i].dtype() != m.dtype) out[i] = out[i].to(m.dtype);
  }
  return out;
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor* t : inputs) {
    if (t->defined() && t->requires_grad()) return true;
  }
  return false;
}

bool needs_grad(const TensorList& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& t : inputs) {
    if (t.defined() && t.requires_grad()) return true;
  }
  return false;
}

void record(const char* name, std::initializer_list<Tensor*> outputs, const TensorList& inputs,
            FunctionNode::Backward backward) {
  record(name, std::vector<Tensor*>(outputs), inputs, std::move(backward));
}

void record(const char* name, const std::vector<Tensor*>& outputs, const TensorList& inputs,
            FunctionNode::Backward backward) {
  std::vector<Edge> edges;
  std::vector<FunctionNode::InputMeta> metas;
  edges.reserve(inputs.size());
  metas.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    edges.push_back(t.defined() ? gradient_edge(t) : Edge{});
    metas.push_back(t.defined() ? FunctionNode::InputMeta{t.shape(), t.dtype(), t.device()}
                                : FunctionNode::InputMeta{{}, kDefaultFloat, kCPU});
  }
  auto node = std::make_shared<FunctionNode>(name, std::move(backward), std::move(edges), std::move(metas),
                                             uint32_t(outputs.size()));
  uint32_t nr = 0;
  for (Tensor* out : outputs) {
    if (out->defined() && is_floating(out->dtype())) set_history(*out, node, nr);
    ++nr;
  }
}

}  // namespace ember::autograd
