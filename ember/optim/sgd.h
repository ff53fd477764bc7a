// optim::SGD: stochastic gradient descent with momentum, dampening, Nesterov
// momentum and L2 weight decay, as torch.optim.SGD.
//
// Update of each parameter p with gradient g (all of it in one fused kernel
// per device and dtype, see ember/core/ops/optimizer_kernels.h):
//   g = g + weight_decay * p                                (weight_decay != 0)
//   buf = g at the first update, else momentum * buf + (1 - dampening) * g
//   g = nesterov ? g + momentum * buf : buf                 (momentum != 0)
//   p = p - lr * g
// Options (group keys): "lr", "momentum", "dampening", "weight_decay",
// "nesterov" (0 or 1). Nesterov needs momentum > 0 and zero dampening.
// State per parameter (momentum != 0 only): "momentum_buffer" and "step"
// (the updates applied since the buffer was made; at 0 the buffer takes g).
#pragma once

#include "ember/optim/optimizer.h"

namespace ember::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;

  GroupOptions to_map() const;
};

class SGD : public Optimizer {
 public:
  explicit SGD(TensorList params, SGDOptions options = {});
  // Each group's options override `defaults`.
  explicit SGD(std::vector<ParamGroup> groups, SGDOptions defaults = {});

 protected:
  void check_options(const GroupOptions& options) const override;
  std::vector<std::string> buffer_names(const GroupOptions& options) const override;
  std::vector<std::string> all_state_names() const override;
  bool uses_step(const GroupOptions& options) const override;
  void run_kernel(DeviceType type, const FusedStepArgs& args, const GroupOptions& options) const override;
};

}  // namespace ember::optim
