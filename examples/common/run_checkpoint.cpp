// The run-checkpoint counters and flag check that ember's example programs share.
#include "examples/common/run_checkpoint.h"

#include <bit>

#include "ember/core/error.h"
#include "examples/common/flags.h"

namespace ember::examples {

int64_t counter(const Checkpoint& c, const std::string& program, const std::string& path, const std::string& name) {
  auto it = c.counters.find(name);
  EMBER_CHECK(it != c.counters.end(),
              program << ": " << path << " has no \"" << name << "\" counter; it was not written by " << program);
  return it->second;
}

void save_generator(Checkpoint& c, const std::string& name, const Generator& generator) {
  const GeneratorState s = generator.get_state();
  c.counters[name + "_seed"] = std::bit_cast<int64_t>(s.seed);
  c.counters[name + "_offset"] = std::bit_cast<int64_t>(s.offset);
}

GeneratorState saved_generator(const Checkpoint& c, const std::string& program, const std::string& path,
                               const std::string& name) {
  return {std::bit_cast<uint64_t>(counter(c, program, path, name + "_seed")),
          std::bit_cast<uint64_t>(counter(c, program, path, name + "_offset"))};
}

void save_scaler(Checkpoint& c, amp::GradScaler& scaler) {
  const amp::GradScalerState s = scaler.state_dict();
  c.counters["scaler_scale"] = std::bit_cast<int64_t>(s.scale);
  c.counters["scaler_growth_tracker"] = s.growth_tracker;
}

amp::GradScalerState saved_scaler(const Checkpoint& c, const std::string& program, const std::string& path,
                                  amp::GradScaler& scaler) {
  amp::GradScalerState s = scaler.state_dict();
  s.scale = std::bit_cast<double>(counter(c, program, path, "scaler_scale"));
  s.growth_tracker = counter(c, program, path, "scaler_growth_tracker");
  return s;
}

void check_run_flags(const Checkpoint& c, const std::string& path, const std::map<std::string, std::string>& flags) {
  for (const auto& [name, value] : flags) {
    auto it = c.metadata.find(name);
    const std::string saved = it == c.metadata.end() ? "(not recorded)" : it->second;
    if (saved != value) {
      throw UsageError("--resume: " + path + " was saved by a run with --" + name + " " + saved +
                       ", but this run has --" + name + " " + value + "; resume with the same --" + name);
    }
  }
}

}  // namespace ember::examples
