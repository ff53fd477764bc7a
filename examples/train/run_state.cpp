// Saving and restoring a run through ember/optim/checkpoint.h.
#include "examples/train/run_state.h"

#include "ember/optim/checkpoint.h"
#include "examples/common/run_checkpoint.h"
#include "examples/train/options.h"

namespace ember::train {
namespace {

constexpr const char* kProgram = "ember-train";

}  // namespace

void save_run(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
              const optim::LRScheduler* scheduler, const Generator& generator, const RunFlags& flags,
              RunPosition position, amp::GradScaler* scaler) {
  Checkpoint c;
  for (const auto& item : model.state_dict()) c.model[item.key] = item.value;
  c.optimizer = optimizer.state_dict();
  if (scheduler != nullptr) c.scheduler = scheduler->state_dict();
  c.counters["epoch"] = position.epoch;
  c.counters["global_step"] = position.global_step;
  examples::save_generator(c, "rng", generator);
  if (scaler != nullptr) examples::save_scaler(c, *scaler);
  c.metadata = flags;
  save_checkpoint(path, c);
}

RunPosition load_run(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                     optim::LRScheduler* scheduler, Generator& generator, const RunFlags& flags,
                     amp::GradScaler* scaler) {
  Checkpoint c = load_checkpoint(path);
  examples::check_run_flags(c, path, flags);
  EMBER_CHECK(c.scheduler.has_value() == (scheduler != nullptr),
              kProgram << ": " << path << (c.scheduler ? " holds" : " lacks") << " a scheduler state, but this run "
                       << (scheduler ? "has" : "has no") << " schedule");
  RunPosition position{examples::counter(c, kProgram, path, "epoch"),
                       examples::counter(c, kProgram, path, "global_step")};
  const GeneratorState rng = examples::saved_generator(c, kProgram, path, "rng");
  amp::GradScalerState scaler_state;
  if (scaler != nullptr) scaler_state = examples::saved_scaler(c, kProgram, path, *scaler);
  nn::OrderedDict<Tensor> state;
  for (const auto& [name, t] : c.model) state.insert(name, t);
  model.load_state_dict(state);
  optimizer.load_state_dict(c.optimizer);
  if (scheduler != nullptr) scheduler->load_state_dict(*c.scheduler);
  generator.set_state(rng);
  if (scaler != nullptr) scaler->load_state_dict(scaler_state);
  return position;
}

}  // namespace ember::train
