// Default generators, one per device, created on first use.
#include "ember/core/generator.h"

#include <map>
#include <memory>

namespace ember {

void Generator::manual_seed(uint64_t seed) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = {seed, 0};
}

uint64_t Generator::seed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_.seed;
}

GeneratorState Generator::reserve(uint64_t blocks) {
  std::lock_guard<std::mutex> lock(mutex_);
  GeneratorState s = state_;
  state_.offset += blocks;
  return s;
}

GeneratorState Generator::get_state() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return state_;
}

void Generator::set_state(const GeneratorState& state) {
  std::lock_guard<std::mutex> lock(mutex_);
  state_ = state;
}

namespace {
struct Registry {
  std::mutex mutex;
  std::map<std::pair<int, int>, std::unique_ptr<Generator>> generators;
  uint64_t seed = 67280421310721ull;
};
Registry& registry() {
  static Registry r;
  return r;
}
}  // namespace

Generator& default_generator(Device device) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto& g = r.generators[{int(device.type), device.index}];
  if (!g) g = std::make_unique<Generator>(r.seed);
  return *g;
}

void manual_seed(uint64_t seed) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.seed = seed;
  for (auto& [key, g] : r.generators) g->manual_seed(seed);
}

}  // namespace ember
