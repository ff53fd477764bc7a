// Random number generators: a seed and a Philox counter offset per device.
//
// Contract: a random op reserves the counter blocks it consumes, so two ops
// never reuse numbers and a seed replays the same sequence of ops exactly.
// get_state/set_state let activation checkpointing and checkpoints replay.
#pragma once

#include <cstdint>
#include <mutex>

#include "ember/core/device.h"

namespace ember {

struct GeneratorState {
  uint64_t seed = 0;
  uint64_t offset = 0;
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 67280421310721ull) : state_{seed, 0} {}
  void manual_seed(uint64_t seed);
  uint64_t seed() const;
  // Reserves `blocks` Philox counter blocks (4 words each); returns the seed
  // and the first block to use. Thread-safe.
  GeneratorState reserve(uint64_t blocks);
  GeneratorState get_state() const;
  void set_state(const GeneratorState& state);

 private:
  mutable std::mutex mutex_;
  GeneratorState state_;
};

// The generator random ops use on `device` when none is given.
Generator& default_generator(Device device);
// Seeds the default generators of every device (torch.manual_seed).
void manual_seed(uint64_t seed);

}  // namespace ember
