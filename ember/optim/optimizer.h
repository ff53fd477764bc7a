// Optimizer: the base of every optimizer in ember::optim, with PyTorch's
// parameter groups, zero_grad, step and state_dict.
//
// Contract:
// - Parameters are floating leaf tensors, each in exactly one group. A
//   group's options are named numbers, like the dicts of PyTorch's
//   param_groups ("lr", "weight_decay", "momentum", "beta1", "beta2",
//   "eps"; flags such as "nesterov" and "amsgrad" are 0 or 1). Options a
//   group does not give come from the optimizer's defaults; a name the
//   optimizer does not know is an ember::Error. Schedulers change "lr" (and
//   OneCycleLR "momentum" or "beta1") between steps; step() checks every
//   group's options before it changes anything.
// - step() updates, in place and under NoGradGuard, every parameter whose
//   grad() is defined; the others (and their state) are untouched. State is
//   created at a parameter's first update. Per group, the parameters of one
//   device and dtype are updated by one fused multi-tensor kernel call
//   (ember/core/ops/optimizer_kernels.h): a few CUDA launches for any number of tensors.
//   Parameters must be contiguous.
// - State per parameter: named tensors on the parameter's device ("step",
//   "exp_avg", "momentum_buffer", ...). Buffers have the parameter's shape
//   and dtype, except for float16/bfloat16 parameters, whose state is
//   float32. "step" is a 0-dim int64 tensor: the number of updates applied.
// - Mixed precision (GradScaling): found_inf and inv_scale are one-element
//   float32 tensors on the parameters' device, read by the kernel itself. A
//   non-zero found_inf leaves parameters, state and step counters unchanged;
//   inv_scale multiplies every gradient before use. Because the step
//   counters are device tensors that the kernel advances, a skipped step
//   needs no host synchronization and the next step's bias correction is
//   right. (SGD without momentum keeps no state, so it needs no counter.)
// - In a CUDA graph (ember/core/cuda/graph.h): a step captured after every
//   parameter has its state replays correctly (the counters and GradScaling
//   inputs are on the device). Creating a parameter's state during a
//   capture is an ember::Error (each replay would zero it again), and each
//   replay first checks that the group's options are those captured and
//   that the optimizer still exists.
// - state_dict() returns copies, keyed by parameter index as PyTorch does
//   (indices run over the groups' parameters in order), with every group's
//   options and parameter indices. load_state_dict() checks group count and
//   sizes, option names, state names and shapes before it changes anything,
//   and casts/moves state to each parameter's state dtype and device, so a
//   run resumed from a state dict continues exactly.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ember/core/ops/optimizer_kernels.h"
#include "ember/core/tensor.h"

namespace ember::optim {

// A group's options: name -> value, as the dicts of PyTorch's param_groups.
using GroupOptions = std::map<std::string, double>;

struct ParamGroup {
  TensorList params;
  GroupOptions options;  // overrides of the optimizer's defaults

  ParamGroup() = default;
  ParamGroup(TensorList params, GroupOptions options = {}) : params(std::move(params)), options(std::move(options)) {}

  // An ember::Error naming the option and the group's options if absent.
  double get(const std::string& name) const;
  // Only options the group already has can be set.
  void set(const std::string& name, double value);
  double lr() const { return get("lr"); }
  void set_lr(double lr) { set("lr", lr); }
};

// What optimizer.state_dict() holds in PyTorch.
struct ParamGroupState {
  GroupOptions options;
  std::vector<int64_t> params;  // parameter indices
};
struct OptimizerStateDict {
  std::map<int64_t, std::map<std::string, Tensor>> state;  // parameter index -> name -> tensor
  std::vector<ParamGroupState> param_groups;
};

// Device-side inputs of a mixed-precision step (see the contract above).
struct GradScaling {
  Tensor found_inf;  // undefined: not used
  Tensor inv_scale;  // undefined: not used
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  const std::string& name() const { return name_; }
  const GroupOptions& defaults() const { return defaults_; }
  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }

  // Adds a group; options it lacks come from defaults(). A parameter already
  // in a group, a non-leaf, a non-floating tensor or a bad option value is
  // an ember::Error.
  void add_param_group(ParamGroup group);

  // Drops every parameter's grad (set_to_none) or zeroes it in place.
  void zero_grad(bool set_to_none = true);

  void step();
  void step(const GradScaling& scaling);

  OptimizerStateDict state_dict() const;
  void load_state_dict(const OptimizerStateDict& state_dict);

  // The state of one parameter of this optimizer (empty before its first
  // update); the tensors are the live state, not copies.
  const std::map<std::string, Tensor>& state(const Tensor& param) const;

 protected:
  Optimizer(std::string name, GroupOptions defaults);
  // Adds the constructor's groups (derived constructors call it, so that
  // the checks below run as the derived class); no parameter at all is an
  // ember::Error.
  void init_groups(std::vector<ParamGroup> groups);

  // An ember::Error naming the optimizer, option and value for a bad value.
  virtual void check_options(const GroupOptions& options) const = 0;
  // The state buffers a group's options need, in FusedTensor::state order.
  virtual std::vector<std::string> buffer_names(const GroupOptions& options) const = 0;
  // Every state name this optimizer may keep (for load_state_dict).
  virtual std::vector<std::string> all_state_names() const = 0;
  // Whether a group's options need the "step" counter.
  virtual bool uses_step(const GroupOptions& options) const = 0;
  // Runs the fused kernel of this optimizer on one device/dtype bucket.
  virtual void run_kernel(DeviceType type, const FusedStepArgs& args, const GroupOptions& options) const = 0;

 private:
  void step_impl(const GradScaling* scaling);
  void step_bucket(const ParamGroup& group, const std::vector<size_t>& members, const GradScaling* scaling);
  std::map<std::string, Tensor>& init_state(const Tensor& param, const GroupOptions& options);
  void check_group(const GroupOptions& options) const;
  // While a CUDA graph is captured on `device`: makes its replays check that
  // the group's options are still those captured, and that this optimizer
  // still exists (ember/core/cuda/graph.h).
  void add_replay_check(int device, const ParamGroup& group) const;

  std::string name_;
  GroupOptions defaults_;
  std::vector<ParamGroup> groups_;
  std::unordered_map<const TensorImpl*, std::map<std::string, Tensor>> state_;
  std::shared_ptr<const bool> alive_ = std::make_shared<const bool>(true);  // expires with the optimizer
};

}  // namespace ember::optim
