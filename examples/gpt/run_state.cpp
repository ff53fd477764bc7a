// Saving and restoring a run through ember/optim/checkpoint.h.
#include "examples/gpt/run_state.h"

#include "ember/optim/checkpoint.h"
#include "examples/common/run_checkpoint.h"
#include "examples/gpt/options.h"

namespace ember::gpt {
namespace {

constexpr const char* kProgram = "ember-gpt";

}  // namespace

void save_run(const std::string& path, const RunState& run, const RunFlags& flags, int64_t step) {
  Checkpoint c;
  for (const auto& item : run.model.state_dict()) c.model[item.key] = item.value;
  c.optimizer = run.optimizer.state_dict();
  c.scheduler = run.scheduler.state_dict();
  c.counters["step"] = step;
  examples::save_generator(c, "data_rng", run.data_generator);
  examples::save_generator(c, "dropout_rng", run.dropout_generator);
  if (run.scaler != nullptr) examples::save_scaler(c, *run.scaler);
  c.metadata = flags;
  save_checkpoint(path, c);
}

int64_t load_run(const std::string& path, const RunState& run, const RunFlags& flags) {
  Checkpoint c = load_checkpoint(path);
  examples::check_run_flags(c, path, flags);
  EMBER_CHECK(c.scheduler.has_value(),
              kProgram << ": " << path << " holds no schedule; it was not written by " << kProgram);
  const int64_t step = examples::counter(c, kProgram, path, "step");
  const GeneratorState data_rng = examples::saved_generator(c, kProgram, path, "data_rng");
  const GeneratorState dropout_rng = examples::saved_generator(c, kProgram, path, "dropout_rng");
  amp::GradScalerState scaler_state;
  if (run.scaler != nullptr) scaler_state = examples::saved_scaler(c, kProgram, path, *run.scaler);
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
