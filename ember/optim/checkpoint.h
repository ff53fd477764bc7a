// Training checkpoints: a model's state dict, an optimizer's and a
// scheduler's state and the run's counters in one safetensors file
// (ember/nn/safetensors.h), so that a run resumes exactly.
//
// Layout of the file (all names are fixed so other tools can read it):
//   tensors   "model.<name>"                  the model's state dict
//             "optim.state.<index>.<name>"    optimizer state ("step" is int64)
//   metadata  "ember.checkpoint"              "1" (the layout's version)
//             "optim.groups"                  number of parameter groups
//             "optim.group.<g>.<option>"      each group's options ("lr", ...)
//             "optim.group.<g>.params"        its parameter indices, "0,1,2"
//             "sched.last_epoch", "sched.base_lrs", "sched.last_lrs"
//                                             (when a scheduler is saved)
//             "counter.<name>"                the caller's counters
//             "user.<key>"                    the caller's own metadata
// Numbers are written in the shortest form that reads back to the same
// double, so options and lrs round-trip exactly.
//
// Contract: save_checkpoint writes atomically (a crash leaves the previous
// checkpoint intact). load_checkpoint returns what was saved, with CPU
// tensors; pass checkpoint.optimizer to Optimizer::load_state_dict (it moves
// state to the parameters' devices) and checkpoint.scheduler to
// LRScheduler::load_state_dict. A file that is not such a checkpoint (no
// "ember.checkpoint" metadata, an unknown tensor name, a malformed number)
// is an ember::Error naming the file and the key. The file carries
// save_safetensors' checksums, so a corrupt checkpoint is an error naming
// the tensor (or "header") rather than a resumed run on different weights.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "ember/optim/lr_scheduler.h"
#include "ember/optim/optimizer.h"

namespace ember {

struct Checkpoint {
  std::map<std::string, Tensor> model;
  optim::OptimizerStateDict optimizer;
  std::optional<optim::SchedulerStateDict> scheduler;
  std::map<std::string, int64_t> counters;      // "epoch", "global_step", ...
  std::map<std::string, std::string> metadata;  // anything else to keep
};

void save_checkpoint(const std::string& path, const Checkpoint& checkpoint);
Checkpoint load_checkpoint(const std::string& path);

}  // namespace ember
