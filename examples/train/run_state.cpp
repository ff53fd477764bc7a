// Saving and restoring a run through ember/optim/checkpoint.h.
#include "examples/train/run_state.h"

#include <bit>

#include "ember/optim/checkpoint.h"
#include "examples/train/options.h"

namespace ember::train {
namespace {

int64_t counter(const Checkpoint& c, const std::string& path, const char* name) {
  auto it = c.counters.find(name);
  EMBER_CHECK(it != c.counters.end(),
              "ember-train: " << path << " has no \"" << name << "\" counter; it was not written by ember-train");
  return it->second;
}

}  // namespace

void save_run(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
              const optim::LRScheduler* scheduler, const Generator& generator, const RunFlags& flags,
              RunPosition position, amp::GradScaler* scaler) {
  Checkpoint c;
  for (const auto& item : model.state_dict()) c.model[item.key] = item.value;
  c.optimizer = optimizer.state_dict();
  if (scheduler != nullptr) c.scheduler = scheduler->state_dict();
  const GeneratorState rng = generator.get_state();
  c.counters["epoch"] = position.epoch;
  c.counters["global_step"] = position.global_step;
  c.counters["rng_seed"] = std::bit_cast<int64_t>(rng.seed);
  c.counters["rng_offset"] = std::bit_cast<int64_t>(rng.offset);
  if (scaler != nullptr) {
    const amp::GradScalerState s = scaler->state_dict();
    c.counters["scaler_scale"] = std::bit_cast<int64_t>(s.scale);
    c.counters["scaler_growth_tracker"] = s.growth_tracker;
  }
  c.metadata = flags;
  save_checkpoint(path, c);
}

RunPosition load_run(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                     optim::LRScheduler* scheduler, Generator& generator, const RunFlags& flags,
                     amp::GradScaler* scaler) {
  Checkpoint c = load_checkpoint(path);
  for (const auto& [name, value] : flags) {
    auto it = c.metadata.find(name);
    const std::string saved = it == c.metadata.end() ? "(not recorded)" : it->second;
    if (saved != value) {
      throw UsageError("--resume: " + path + " was saved by a run with --" + name + " " + saved +
                       ", but this run has --" + name + " " + value + "; resume with the same --" + name);
    }
  }
  EMBER_CHECK(c.scheduler.has_value() == (scheduler != nullptr),
              "ember-train: " << path << (c.scheduler ? " holds" : " lacks") << " a scheduler state, but this run "
                              << (scheduler ? "has" : "has no") << " schedule");
  RunPosition position{counter(c, path, "epoch"), counter(c, path, "global_step")};
  const GeneratorState rng{std::bit_cast<uint64_t>(counter(c, path, "rng_seed")),
                           std::bit_cast<uint64_t>(counter(c, path, "rng_offset"))};
  amp::GradScalerState scaler_state;
  if (scaler != nullptr) {
    scaler_state = scaler->state_dict();
    scaler_state.scale = std::bit_cast<double>(counter(c, path, "scaler_scale"));
    scaler_state.growth_tracker = counter(c, path, "scaler_growth_tracker");
  }
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
