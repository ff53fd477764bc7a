// The pieces of a run's checkpoint that ember-train and ember-gpt share, on
// top of ember/optim/checkpoint.h: named counters, a generator's state, a
// GradScaler's state and the flags a resumed run must agree with.
//
// Contract:
// - A generator named N is saved as the counters "N_seed" and "N_offset"
//   (the bits of its uint64 seed and offset); a GradScaler as
//   "scaler_scale" (the bits of its double scale) and
//   "scaler_growth_tracker". These names are the files' layout: renaming
//   one breaks resuming from older checkpoints.
// - The readers take the program's name ("ember-gpt") for their errors: a
//   missing counter is an ember::Error "PROGRAM: PATH has no "NAME" counter;
//   it was not written by PROGRAM".
// - check_run_flags() compares the flags saved in the checkpoint's metadata
//   with this run's and throws UsageError for the first that differs,
//   naming the flag and both values ("(not recorded)" when the file has
//   none); it changes nothing, so call it before restoring any state.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ember/core/generator.h"
#include "ember/optim/checkpoint.h"
#include "ember/parallel/amp/grad_scaler.h"

namespace ember::examples {

// The counter `name` of the checkpoint read from `path`.
int64_t counter(const Checkpoint& c, const std::string& program, const std::string& path, const std::string& name);

void save_generator(Checkpoint& c, const std::string& name, const Generator& generator);
GeneratorState saved_generator(const Checkpoint& c, const std::string& program, const std::string& path,
                               const std::string& name);

void save_scaler(Checkpoint& c, amp::GradScaler& scaler);
// `scaler`'s state with the saved scale and growth tracker in place of its own.
amp::GradScalerState saved_scaler(const Checkpoint& c, const std::string& program, const std::string& path,
                                  amp::GradScaler& scaler);

// `flags`: flag name (without "--") -> this run's value.
void check_run_flags(const Checkpoint& c, const std::string& path, const std::map<std::string, std::string>& flags);

}  // namespace ember::examples
