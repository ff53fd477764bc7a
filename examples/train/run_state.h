// ember-train's checkpoints: everything a run needs to continue exactly
// where it stopped, in one safetensors file (ember/optim/checkpoint.h's layout).
//
// A checkpoint holds the model's state dict (parameters and BatchNorm
// buffers), the optimizer's state and options, the scheduler's position,
// the counters "epoch" (epochs finished) and "global_step", the state of
// the generator that dropout draws from ("rng_seed", "rng_offset"), and the
// flags that shape the model and its optimizer (user metadata), e.g.
// "model" = "mlp", and with a GradScaler (--amp fp16) its scale and growth
// tracker ("scaler_scale" as the bits of a double, "scaler_growth_tracker").
// The data order needs nothing saved: the sampler's
// permutation of an epoch depends only on --seed and the epoch number.
//
// Contract:
// - save_run writes atomically (a crash leaves the previous file whole).
// - load_run restores model, optimizer, scheduler and generator in place
//   and returns the epochs finished. A checkpoint whose flags differ from
//   `flags` (another model, optimizer, schedule or dropout) is a
//   UsageError naming the flag and both values, checked before anything is
//   changed; a file that is no such checkpoint is an ember::Error.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "ember/core/generator.h"
#include "ember/nn/module.h"
#include "ember/optim/lr_scheduler.h"
#include "ember/optim/optimizer.h"
#include "ember/parallel/amp/grad_scaler.h"

namespace ember::train {

// The flags a checkpoint must agree with to be resumed: name -> value.
using RunFlags = std::map<std::string, std::string>;

struct RunPosition {
  int64_t epoch = 0;        // epochs finished
  int64_t global_step = 0;  // optimizer steps taken
};

void save_run(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
              const optim::LRScheduler* scheduler, const Generator& generator, const RunFlags& flags,
              RunPosition position, amp::GradScaler* scaler = nullptr);

RunPosition load_run(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                     optim::LRScheduler* scheduler, Generator& generator, const RunFlags& flags,
                     amp::GradScaler* scaler = nullptr);

}  // namespace ember::train
