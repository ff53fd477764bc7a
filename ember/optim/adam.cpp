// optim::Adam and optim::AdamW (see ember/optim/adam.h).
#include "ember/optim/adam.h"

namespace ember::optim {

GroupOptions AdamOptions::to_map(double default_weight_decay) const {
  return {{"lr", lr},
          {"beta1", beta1()},
          {"beta2", beta2()},
          {"eps", eps},
          {"weight_decay", weight_decay.value_or(default_weight_decay)},
          {"amsgrad", amsgrad ? 1.0 : 0.0}};
}

Adam::Adam(TensorList params, AdamOptions options)
    : Adam(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

Adam::Adam(std::vector<ParamGroup> groups, AdamOptions defaults)
    : Adam("Adam", std::move(groups), defaults.to_map(kAdamDefaultWeightDecay), false) {}

Adam::Adam(std::string name, std::vector<ParamGroup> groups, GroupOptions defaults, bool decoupled_weight_decay)
    : Optimizer(std::move(name), std::move(defaults)), decoupled_weight_decay_(decoupled_weight_decay) {
  init_groups(std::move(groups));
}

AdamW::AdamW(TensorList params, AdamWOptions options)
    : AdamW(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, AdamWOptions defaults)
    : Adam("AdamW", std::move(groups), defaults.to_map(kAdamWDefaultWeightDecay), true) {}

void Adam::check_options(const GroupOptions& o) const {
  const double lr = o.at("lr"), eps = o.at("eps"), weight_decay = o.at("weight_decay"), amsgrad = o.at("amsgrad");
  EMBER_CHECK(lr >= 0, name() << ": invalid learning rate: " << lr << " (must be >= 0)");
  EMBER_CHECK(eps >= 0, name() << ": invalid epsilon value: " << eps << " (must be >= 0)");
  const char* betas[2] = {"beta1", "beta2"};
  for (int i = 0; i < 2; ++i) {
    const double b = o.at(betas[i]);
    EMBER_CHECK(b >= 0 && b < 1, name() << ": invalid beta parameter at index " << i << ": " << b << " (" << betas[i]
                                        << " must be in [0, 1))");
  }
  EMBER_CHECK(weight_decay >= 0, name() << ": invalid weight_decay value: " << weight_decay << " (must be >= 0)");
  EMBER_CHECK(amsgrad == 0 || amsgrad == 1, name() << ": amsgrad must be 0 or 1, but is " << amsgrad);
}

std::vector<std::string> Adam::buffer_names(const GroupOptions& o) const {
  if (o.at("amsgrad") != 0) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

std::vector<std::string> Adam::all_state_names() const { return {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}; }

bool Adam::uses_step(const GroupOptions&) const { return true; }

void Adam::run_kernel(DeviceType type, const FusedStepArgs& args, const GroupOptions& o) const {
  AdamHyper h;
  h.lr = o.at("lr");
  h.beta1 = o.at("beta1");
  h.beta2 = o.at("beta2");
  h.eps = o.at("eps");
  h.weight_decay = o.at("weight_decay");
  h.amsgrad = o.at("amsgrad") != 0;
  h.decoupled_weight_decay = decoupled_weight_decay_;
  adam_step_stub(type)(args, h);
}

}  // namespace ember::optim
