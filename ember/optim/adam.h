// optim::Adam and optim::AdamW, as torch.optim.Adam / torch.optim.AdamW
// (foreach=False): the same bias-corrected moments, with L2 weight decay
// added to the gradient (Adam) or decoupled weight decay applied to the
// parameter (AdamW), and optional AMSGrad.
//
// Update of each parameter p with gradient g at step s (1 for the first):
//   g = g + weight_decay * p        (Adam)  |  p = p * (1 - lr * weight_decay)  (AdamW)
//   exp_avg = lerp(exp_avg, g, 1 - beta1)
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g * g
//   max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq)          (amsgrad)
//   denom = sqrt(exp_avg_sq or max_exp_avg_sq) / sqrt(1 - beta2^s) + eps
//   p = p - lr / (1 - beta1^s) * exp_avg / denom
// Options (group keys): "lr", "beta1", "beta2", "eps", "weight_decay",
// "amsgrad" (0 or 1). State per parameter: "step", "exp_avg", "exp_avg_sq"
// and, with amsgrad, "max_exp_avg_sq".
#pragma once

#include <optional>
#include <utility>

#include "ember/optim/optimizer.h"

namespace ember::optim {

// The options of Adam and AdamW, one type (AdamWOptions is the same), so
// that an optimizer chosen at run time takes one set of fields:
//   AdamOptions o{.lr = 3e-4, .betas = {0.9, 0.95}};
//   if (decoupled) opt = std::make_unique<AdamW>(params, o); else ... Adam(params, o);
// betas is PyTorch's (beta1, beta2) pair; beta1() and beta2() read it, and
// the param groups keep them as "beta1" and "beta2" (what OneCycleLR cycles).
// weight_decay left unset takes the optimizer's PyTorch default: 0 for
// Adam, 1e-2 for AdamW.
struct AdamOptions {
  double lr = 1e-3;
  std::pair<double, double> betas{0.9, 0.999};
  double eps = 1e-8;
  std::optional<double> weight_decay;
  bool amsgrad = false;

  double beta1() const { return betas.first; }
  double beta2() const { return betas.second; }
  // The group options, with default_weight_decay where weight_decay is unset.
  GroupOptions to_map(double default_weight_decay) const;
};
using AdamWOptions = AdamOptions;

// PyTorch's defaults for weight_decay.
inline constexpr double kAdamDefaultWeightDecay = 0;
inline constexpr double kAdamWDefaultWeightDecay = 1e-2;

class Adam : public Optimizer {
 public:
  explicit Adam(TensorList params, AdamOptions options = {});
  // Each group's options override `defaults`.
  explicit Adam(std::vector<ParamGroup> groups, AdamOptions defaults = {});

 protected:
  Adam(std::string name, std::vector<ParamGroup> groups, GroupOptions defaults, bool decoupled_weight_decay);
  void check_options(const GroupOptions& options) const override;
  std::vector<std::string> buffer_names(const GroupOptions& options) const override;
  std::vector<std::string> all_state_names() const override;
  bool uses_step(const GroupOptions& options) const override;
  void run_kernel(DeviceType type, const FusedStepArgs& args, const GroupOptions& options) const override;

 private:
  bool decoupled_weight_decay_;
};

class AdamW : public Adam {
 public:
  explicit AdamW(TensorList params, AdamWOptions options = {});
  explicit AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults = {});
};

}  // namespace ember::optim
