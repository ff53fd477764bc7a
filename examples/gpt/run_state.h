// ember-gpt's checkpoints: everything a run needs to continue exactly where
// it stopped, in one safetensors file (ember/optim/checkpoint.h's layout).
//
// A checkpoint holds the model's state dict (the tied head's weight under
// both names, as PyTorch's state_dict), the AdamW state and groups, the
// schedule's position, the counter "step" (steps done), the states of the
// generator that draws the batches and of the device's default generator
// (dropout), the GradScaler's scale with --amp fp16, and the flags that
// shape the model (user metadata: "layers", "width", "heads", "context",
// "dropout", "amp").
//
// Contract:
// - save_run writes atomically (a crash leaves the previous file whole).
// - load_run checks the flags first: a checkpoint of another shape is a
//   UsageError naming the flag and both values, and nothing is changed. It
//   then restores model, optimizer, scheduler, generators and scaler in
//   place and returns the steps done. A file that is no such checkpoint is
//   an ember::Error.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ember/core/generator.h"
#include "ember/nn/module.h"
#include "ember/optim/lr_scheduler.h"
#include "ember/optim/optimizer.h"
#include "ember/parallel/amp/grad_scaler.h"

namespace ember::gpt {

// The flags a checkpoint must agree with to be resumed: name -> value.
using RunFlags = std::map<std::string, std::string>;

struct RunState {
  nn::Module& model;
  optim::Optimizer& optimizer;
  optim::LRScheduler& scheduler;
  Generator& data_generator;
  Generator& dropout_generator;
  amp::GradScaler* scaler = nullptr;  // --amp fp16
};

void save_run(const std::string& path, const RunState& run, const RunFlags& flags, int64_t step);

int64_t load_run(const std::string& path, const RunState& run, const RunFlags& flags);

}  // namespace ember::gpt
