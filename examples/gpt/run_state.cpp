// Saving and restoring a run through ember/optim/checkpoint.h.
#include "examples/gpt/run_state.h"

#include <bit>

#include "ember/optim/checkpoint.h"
#include "examples/gpt/options.h"

namespace ember::gpt {
namespace {

int64_t counter(const Checkpoint& c, const std::string& path, const std::string& name) {
  auto it = c.counters.find(name);
  EMBER_CHECK(it != c.counters.end(),
              "ember-gpt: " << path << " has no \"" << name << "\" counter; it was not written by ember-gpt");
  return it->second;
}

void save_generator(Checkpoint& c, const std::string& name, const Generator& gen) {
  const GeneratorState s = gen.get_state();
  c.counters[name + "_seed"] = std::bit_cast<int64_t>(s.seed);
  c.counters[name + "_offset"] = std::bit_cast<int64_t>(s.offset);
}

GeneratorState saved_generator(const Checkpoint& c, const std::string& path, const std::string& name) {
  return {std::bit_cast<uint64_t>(counter(c, path, name + "_seed")),
          std::bit_cast<uint64_t>(counter(c, path, name + "_offset"))};
}

}  // namespace

void save_run(const std::string& path, const RunState& run, const RunFlags& flags, int64_t step) {
  Checkpoint c;
  for (const auto& item : run.model.state_dict()) c.model[item.key] = item.value;
  c.optimizer = run.optimizer.state_dict();
  c.scheduler = run.scheduler.state_dict();
  c.counters["step"] = step;
  save_generator(c, "data_rng", run.data_generator);
  save_generator(c, "dropout_rng", run.dropout_generator);
  if (run.scaler != nullptr) {
    const amp::GradScalerState s = run.scaler->state_dict();
    c.counters["scaler_scale"] = std::bit_cast<int64_t>(s.scale);
    c.counters["scaler_growth_tracker"] = s.growth_tracker;
  }
  c.metadata = flags;
  save_checkpoint(path, c);
}

int64_t load_run(const std::string& path, const RunState& run, const RunFlags& flags) {
  Checkpoint c = load_checkpoint(path);
  for (const auto& [name, value] : flags) {
    auto it = c.metadata.find(name);
    const std::string saved = it == c.metadata.end() ? "(not recorded)" : it->second;
    if (saved != value) {
      throw UsageError("--resume: " + path + " was saved by a run with --" + name + " " + saved +
                       ", but this run has --" + name + " " + value + "; resume with the same --" + name);
    }
  }
  EMBER_CHECK(c.scheduler.has_value(), "ember-gpt: " << path << " holds no schedule; it was not written by ember-gpt");
  const int64_t step = counter(c, path, "step");
  const GeneratorState data_rng = saved_generator(c, path, "data_rng");
  const GeneratorState dropout_rng = saved_generator(c, path, "dropout_rng");
  amp::GradScalerState scaler_state;
  if (run.scaler != nullptr) {
    scaler_state = run.scaler->state_dict();
    scaler_state.scale = std::bit_cast<double>(counter(c, path, "scaler_scale"));
    scaler_state.growth_tracker = counter(c, path, "scaler_growth_tracker");
  }
  nn::OrderedDict<Tensor> state;
  for (const auto& [name, t] : c.model) state.insert(name, t);
  run.model.load_state_dict(state);
  run.optimizer.load_state_dict(c.optimizer);
  run.scheduler.load_state_dict(*c.scheduler);
  run.data_generator.set_state(data_rng);
  run.dropout_generator.set_state(dropout_rng);
  if (run.scaler != nullptr) run.scaler->load_state_dict(scaler_state);
  return step;
}

}  // namespace ember::gpt
