// optim::SGD (see ember/optim/sgd.h).
#include "ember/optim/sgd.h"

namespace ember::optim {

GroupOptions SGDOptions::to_map() const {
  return {{"lr", lr},
          {"momentum", momentum},
          {"dampening", dampening},
          {"weight_decay", weight_decay},
          {"nesterov", nesterov ? 1.0 : 0.0}};
}

SGD::SGD(TensorList params, SGDOptions options)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, SGDOptions defaults) : Optimizer("SGD", defaults.to_map()) {
  init_groups(std::move(groups));
}

void SGD::check_options(const GroupOptions& o) const {
  const double lr = o.at("lr"), momentum = o.at("momentum"), dampening = o.at("dampening");
  const double weight_decay = o.at("weight_decay"), nesterov = o.at("nesterov");
  EMBER_CHECK(lr >= 0, "SGD: invalid learning rate: " << lr << " (must be >= 0)");
  EMBER_CHECK(momentum >= 0, "SGD: invalid momentum value: " << momentum << " (must be >= 0)");
  EMBER_CHECK(weight_decay >= 0, "SGD: invalid weight_decay value: " << weight_decay << " (must be >= 0)");
  EMBER_CHECK(nesterov == 0 || nesterov == 1, "SGD: nesterov must be 0 or 1, but is " << nesterov);
  EMBER_CHECK(nesterov == 0 || (momentum > 0 && dampening == 0),
              "SGD: Nesterov momentum requires a momentum and zero dampening (momentum " << momentum << ", dampening "
                                                                                         << dampening << ")");
}

std::vector<std::string> SGD::buffer_names(const GroupOptions& o) const {
  if (o.at("momentum") == 0) return {};
  return {"momentum_buffer"};
}

std::vector<std::string> SGD::all_state_names() const { return {"step", "momentum_buffer"}; }

bool SGD::uses_step(const GroupOptions& o) const { return o.at("momentum") != 0; }

void SGD::run_kernel(DeviceType type, const FusedStepArgs& args, const GroupOptions& o) const {
  SGDHyper h;
  h.lr = o.at("lr");
  h.momentum = o.at("momentum");
  h.dampening = o.at("dampening");
  h.weight_decay = o.at("weight_decay");
  h.nesterov = o.at("nesterov") != 0;
  sgd_step_stub(type)(args, h);
}

}  // namespace ember::optim
