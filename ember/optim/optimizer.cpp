// The Optimizer base: groups, lazy state, bucketing of one step into fused
// kernel calls, and state dicts (see ember/optim/optimizer.h).
#include "ember/optim/optimizer.h"

#include <algorithm>
#include <optional>
#include <set>
#include <sstream>

#include "ember/core/autocast_state.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/grad_mode.h"
#include "ember/core/memory_format.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"

namespace ember::optim {

using detail::describe;

namespace {

std::string option_list(const GroupOptions& options) {
  std::ostringstream s;
  s << "{";
  bool first = true;
  for (const auto& [k, v] : options) {
    s << (first ? "" : ", ") << k << ": " << v;
    first = false;
  }
  s << "}";
  return s.str();
}

// A copy of t with the given device and dtype, never aliasing t.
Tensor detached_copy(const Tensor& t, Device device, DType dtype) {
  Tensor c = t.to(device, dtype);
  if (c.is_same(t)) c = t.clone();
  return c.contiguous().detach();
}

}  // namespace

double ParamGroup::get(const std::string& name) const {
  auto it = options.find(name);
  EMBER_CHECK(it != options.end(), "ParamGroup: no option \"" << name << "\"; the group has " << option_list(options));
  return it->second;
}

void ParamGroup::set(const std::string& name, double value) {
  auto it = options.find(name);
  EMBER_CHECK(it != options.end(),
              "ParamGroup: cannot set option \"" << name << "\"; the group has " << option_list(options));
  it->second = value;
}

Optimizer::Optimizer(std::string name, GroupOptions defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {}

void Optimizer::init_groups(std::vector<ParamGroup> groups) {
  size_t count = 0;
  for (const ParamGroup& g : groups) count += g.params.size();
  EMBER_CHECK(count > 0, name_ << ": got an empty parameter list; pass the parameters to optimize");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void Optimizer::check_group(const GroupOptions& options) const {
  for (const auto& [key, value] : options) {
    EMBER_CHECK(defaults_.count(key),
                name_ << ": unknown option \"" << key << "\"; its options are " << option_list(defaults_));
  }
  check_options(options);
}

void Optimizer::add_param_group(ParamGroup group) {
  for (const auto& [key, value] : defaults_) group.options.emplace(key, value);
  check_group(group.options);
  std::set<const TensorImpl*> seen;
  for (const ParamGroup& g : groups_) {
    for (const Tensor& p : g.params) seen.insert(p.impl());
  }
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    EMBER_CHECK(p.defined(), name_ << ": parameter " << i << " of the new group is an undefined tensor");
    EMBER_CHECK(is_floating(p.dtype()), name_ << ": can only optimize floating tensors, but parameter " << i
                                              << " of the new group is " << describe(p));
    EMBER_CHECK(p.is_leaf(), name_ << ": can't optimize a non-leaf tensor (parameter " << i << " of the new group, "
                                   << describe(p) << "); pass the leaf, or detach() it and set_requires_grad()");
    EMBER_CHECK(seen.insert(p.impl()).second,
                name_ << ": some parameters appear in more than one parameter group (parameter " << i
                      << " of the new group, " << describe(p) << ")");
  }
  groups_.push_back(std::move(group));
}

void Optimizer::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (ParamGroup& g : groups_) {
    for (Tensor& p : g.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad(Tensor());
        continue;
      }
      if (grad.grad_fn()) {
        grad = grad.detach();
        p.set_grad(grad);
      }
      grad.zero_();
    }
  }
}

void Optimizer::step() { step_impl(nullptr); }

void Optimizer::step(const GradScaling& scaling) { step_impl(&scaling); }

void Optimizer::step_impl(const GradScaling* scaling) {
  NoGradGuard no_grad;
  // Everything is checked before the first parameter changes.
  for (const ParamGroup& g : groups_) {
    check_group(g.options);
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      EMBER_CHECK(grad.shape() == p.shape() && grad.dtype() == p.dtype() && grad.device() == p.device(),
                  name_ << ".step: the grad of parameter " << i << " (" << describe(p) << ") is " << describe(grad)
                        << "; it must match the parameter");
      EMBER_CHECK(p.is_non_overlapping_and_dense(),
                  name_ << ".step: parameter " << i << " (" << describe(p) << ", strides " << shape_str(p.strides())
                        << ") is not one dense block of memory; fused optimizer steps need dense parameters "
                           "(contiguous, channels-last or any other order of the dims)");
    }
  }
  for (const ParamGroup& g : groups_) {
    // Buckets of one device and dtype, in parameter order.
    std::vector<std::pair<std::pair<Device, DType>, std::vector<size_t>>> buckets;
    for (size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      if (!p.grad().defined()) continue;
      auto key = std::make_pair(p.device(), p.dtype());
      auto it = std::find_if(buckets.begin(), buckets.end(), [&](const auto& b) { return b.first == key; });
      if (it == buckets.end()) buckets.push_back({key, {i}});
      else it->second.push_back(i);
    }
    for (const auto& bucket : buckets) step_bucket(g, bucket.second, scaling);
  }
}

std::map<std::string, Tensor>& Optimizer::init_state(const Tensor& param, const GroupOptions& options) {
  std::map<std::string, Tensor>& st = state_[param.impl()];
  const std::vector<std::string> buffers = buffer_names(options);
  const bool creates = (uses_step(options) && !st.count("step")) ||
                       std::any_of(buffers.begin(), buffers.end(), [&](const std::string& b) { return !st.count(b); });
  if (!creates) return st;  // a stateless update (SGD without momentum) creates nothing, captured or not
  if (param.device().is_cuda()) {
    const std::string what = name_ + ".step (the first update of a parameter, which creates its state)";
    cuda::detail::check_not_capturing(param.device().index, what.c_str(),
                                      "every replay would zero the new state again; run one step before capturing");
  }
  if (uses_step(options) && !st.count("step")) st["step"] = zeros({}, DType::Int64, param.device());
  for (const std::string& name : buffers) {
    if (!st.count(name)) st[name] = zeros_like(param).to(optim_state_dtype(param.dtype()));
  }
  return st;
}

void Optimizer::step_bucket(const ParamGroup& group, const std::vector<size_t>& members, const GradScaling* scaling) {
  const Tensor& first = group.params[members.front()];
  const Device device = first.device();
  auto scalar_ptr = [&](const Tensor& t, const char* what) -> const float* {
    if (!t.defined()) return nullptr;
    EMBER_CHECK(t.numel() == 1 && t.dtype() == DType::Float32 && t.device() == device,
                name_ << ".step: " << what << " must be a one-element float32 tensor on " << device.str()
                      << " (the parameters' device), but got " << describe(t));
    return static_cast<const float*>(t.data_ptr());
  };
  const std::vector<std::string> buffers = buffer_names(group.options);
  const bool with_step = uses_step(group.options);
  std::vector<FusedTensor> fused;
  TensorList grads;  // keeps copies of grads laid out otherwise than their params alive
  std::vector<std::map<std::string, Tensor>*> states;
  // Autocast's kept casts of the params, rewritten by the step itself
  // (of one dtype per step: the first one's).
  TensorList low_copies(members.size());
  std::optional<DType> low_dtype;
  for (size_t i : members) {
    const Tensor& p = group.params[i];
    // The step walks param, grad and state as flat arrays: one layout for all.
    auto laid_out_as_p = [&](const Tensor& t) {
      return t.is_non_overlapping_and_dense() && same_layout(p.sizes(), t.strides(), p.strides());
    };
    Tensor g = p.grad();
    if (!laid_out_as_p(g)) g = copy_like(g, p);
    grads.push_back(g);
    std::map<std::string, Tensor>& st = init_state(p, group.options);
    // State made before the parameter changed layout (Module::to(MemoryFormat)
    // replaces its data in place) follows it: the values are elementwise.
    for (const std::string& name : buffers) {
      Tensor& t = st.at(name);
      if (laid_out_as_p(t)) continue;
      if (device.is_cuda()) {
        const std::string what = name_ + ".step (a parameter whose layout changed since its state was made)";
        cuda::detail::check_not_capturing(device.index, what.c_str(),
                                          "every replay would copy the old state again; run one step before capturing");
      }
      t = copy_like(t, p);
    }
    states.push_back(&st);
    FusedTensor f;
    f.param = p.data_ptr();
    f.grad = g.data_ptr();
    for (size_t k = 0; k < buffers.size(); ++k) f.state[k] = st.at(buffers[k]).data_ptr();
    f.step = with_step ? st.at("step").data<int64_t>() : nullptr;
    f.numel = p.numel();
    const Tensor low = autocast_state::fresh_kept_cast(p);
    if (low.defined() && low_dtype.value_or(low.dtype()) == low.dtype()) {
      low_dtype = low.dtype();
      f.low_copy = low.data_ptr();
      low_copies[fused.size()] = low;
    }
    fused.push_back(f);
  }
  FusedStepArgs args;
  args.device = device.is_cuda() ? device.index : 0;
  args.dtype = first.dtype();
  args.tensors = fused.data();
  args.count = int64_t(fused.size());
  if (scaling != nullptr) {
    args.found_inf = scalar_ptr(scaling->found_inf, "found_inf");
    args.inv_scale = scalar_ptr(scaling->inv_scale, "inv_scale");
  }
  if (low_dtype) args.low_dtype = *low_dtype;
  run_kernel(device.type, args, group.options);
  if (device.is_cuda()) add_replay_check(device.index, group);
  for (size_t k = 0; k < members.size(); ++k) {
    group.params[members[k]].storage()->bump_version();
    for (auto& [name, t] : *states[k]) t.storage()->bump_version();
    if (low_copies[k].defined()) autocast_state::kept_cast_rewritten(group.params[members[k]], low_copies[k]);
  }
}

void Optimizer::add_replay_check(int device, const ParamGroup& group) const {
  if (!cuda::is_capturing(device)) return;
  const size_t index = size_t(&group - groups_.data());
  cuda::detail::add_replay_check(device, [self = this, alive = std::weak_ptr<const bool>(alive_), name = name_, index,
                                          captured = group.options] {
    EMBER_CHECK(!alive.expired(), "cuda::Graph::replay: the " << name
                                                              << " optimizer whose step the graph captured "
                                                                 "was destroyed, and the replay would update its "
                                                                 "freed state; capture the graph again");
    const GroupOptions& now = self->groups_[index].options;
    EMBER_CHECK(now == captured, "cuda::Graph::replay: the options of "
                                     << name << "'s parameter group " << index << " changed since the capture, from "
                                     << option_list(captured) << " to " << option_list(now)
                                     << "; a captured step keeps the values it "
                                        "was captured with (a scheduler's new "
                                        "learning rate, say): capture again");
  });
}

const std::map<std::string, Tensor>& Optimizer::state(const Tensor& param) const {
  static const std::map<std::string, Tensor> empty_state;
  bool known = false;
  for (const ParamGroup& g : groups_) {
    for (const Tensor& p : g.params) known = known || p.is_same(param);
  }
  EMBER_CHECK(known, name_ << ".state: the tensor (" << describe(param) << ") is not a parameter of this optimizer");
  auto it = state_.find(param.impl());
  return it == state_.end() ? empty_state : it->second;
}

OptimizerStateDict Optimizer::state_dict() const {
  NoGradGuard no_grad;
  OptimizerStateDict sd;
  int64_t index = 0;
  for (const ParamGroup& g : groups_) {
    ParamGroupState gs;
    gs.options = g.options;
    for (const Tensor& p : g.params) {
      gs.params.push_back(index);
      auto it = state_.find(p.impl());
      if (it != state_.end() && !it->second.empty()) {
        for (const auto& [name, t] : it->second) sd.state[index][name] = detached_copy(t, t.device(), t.dtype());
      }
      ++index;
    }
    sd.param_groups.push_back(std::move(gs));
  }
  return sd;
}

void Optimizer::load_state_dict(const OptimizerStateDict& sd) {
  NoGradGuard no_grad;
  EMBER_CHECK(sd.param_groups.size() == groups_.size(),
              name_ << ".load_state_dict: the state dict has " << sd.param_groups.size()
                    << " parameter groups, but the optimizer has " << groups_.size());
  std::vector<GroupOptions> options(groups_.size());
  std::map<int64_t, const Tensor*> params;  // saved index -> parameter
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroupState& gs = sd.param_groups[g];
    EMBER_CHECK(gs.params.size() == groups_[g].params.size(),
                name_ << ".load_state_dict: parameter group " << g << " of the state dict has " << gs.params.size()
                      << " parameters, but the optimizer's group " << g << " has " << groups_[g].params.size());
    options[g] = gs.options;
    for (const auto& [key, value] : defaults_) options[g].emplace(key, value);
    check_group(options[g]);
    for (size_t k = 0; k < gs.params.size(); ++k) {
      EMBER_CHECK(params.emplace(gs.params[k], &groups_[g].params[k]).second,
                  name_ << ".load_state_dict: parameter index " << gs.params[k] << " appears twice in the groups");
    }
  }
  const std::vector<std::string> known = all_state_names();
  std::unordered_map<const TensorImpl*, std::map<std::string, Tensor>> state;
  for (const auto& [index, named] : sd.state) {
    auto it = params.find(index);
    EMBER_CHECK(it != params.end(), name_ << ".load_state_dict: the state dict has state for parameter index " << index
                                          << ", which none of its parameter groups lists");
    const Tensor& p = *it->second;
    std::map<std::string, Tensor> converted;
    for (const auto& [name, t] : named) {
      EMBER_CHECK(std::find(known.begin(), known.end(), name) != known.end(),
                  name_ << ".load_state_dict: unknown state \"" << name << "\" for parameter " << index);
      EMBER_CHECK(t.defined(), name_ << ".load_state_dict: state \"" << name << "\" of parameter " << index
                                     << " is an undefined tensor");
      if (name == "step") {
        EMBER_CHECK(t.numel() == 1, name_ << ".load_state_dict: \"step\" of parameter " << index
                                          << " must have one element, but is " << describe(t));
        converted[name] = detached_copy(t, p.device(), DType::Int64).reshape({});
      } else {
        EMBER_CHECK(t.shape() == p.shape(), name_ << ".load_state_dict: state \"" << name << "\" of parameter " << index
                                                  << " is " << describe(t) << ", but the parameter is " << describe(p));
        converted[name] = copy_like(t.to(p.device(), optim_state_dtype(p.dtype())), p);
      }
    }
    EMBER_CHECK(converted.empty() || converted.count("step"),
                name_ << ".load_state_dict: the state of parameter " << index << " has no \"step\"");
    state[p.impl()] = std::move(converted);
  }
  for (size_t g = 0; g < groups_.size(); ++g) groups_[g].options = std::move(options[g]);
  state_ = std::move(state);
}

}  // namespace ember::optim
