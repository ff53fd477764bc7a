// One training epoch and one evaluation pass of a classifier over a
// DataLoader, with the progress display of examples/train/progress.h.
//
// Contract:
// - train_epoch runs every batch of the loader's next epoch (through
//   augment, when given) through forward, cross-entropy loss, backward and optimizer.step() (then
//   scheduler->step() when there is one: the schedule advances per batch),
//   with the model in training mode. It returns the mean loss and the
//   accuracy over the epoch's examples (the predictions of the training
//   forward, dropout included), the learning rate of the last step and the
//   wall time, up to the GPU's finishing the epoch's work.
// - evaluate runs the loader's next epoch in eval mode without autograd
//   and returns the accuracy; it leaves the model in training mode.
// - Batches must arrive on the model's device (DataLoaderOptions::device).
//   The running sums stay on that device: the host reads them only to draw
//   the progress display (at most ten times a second on a terminal) and
//   once at the end, so a CUDA step does not wait for the GPU.
// - Mixed precision: with MixedPrecision::dtype set, the forward and the
//   loss run under amp::autocast in that dtype on the batches' device type
//   (evaluation's forward too); with a scaler, backward runs on the scaled
//   loss and the scaler steps the optimizer (skipping steps whose gradients
//   overflowed) and updates its scale.
// - Distributed runs: with Reporting::sum, the epoch's loss sum, correct
//   count and sample count are added up over the ranks before the mean
//   loss and the accuracies are taken, so every rank returns the numbers of
//   the whole epoch (of the whole test set when each rank evaluates its own
//   share). The progress display shows this rank's running loss, and only
//   where Reporting::progress is set (rank 0).
// - Accuracies are percentages.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "ember/data/data_loader.h"
#include "ember/nn/module.h"
#include "ember/optim/lr_scheduler.h"
#include "ember/optim/optimizer.h"
#include "ember/parallel/amp/grad_scaler.h"

namespace ember::train {

struct TrainStats {
  double loss = 0;
  double accuracy = 0;
  int64_t samples = 0;
  double lr = 0;
  double seconds = 0;  // wall time of the epoch's training
};

// augment (when set) maps each batch's inputs before the forward.
using Augmentation = std::function<Tensor(const Tensor&)>;

struct MixedPrecision {
  std::optional<DType> dtype;         // none: float32
  amp::GradScaler* scaler = nullptr;  // float16: dynamic loss scaling
};

// Adds up, in place, each rank's values of a distributed run (the same
// result on every rank).
using SumOverRanks = std::function<void(std::vector<double>&)>;

struct Reporting {
  bool progress = true;  // draw the progress display
  SumOverRanks sum;      // empty: one process
};

TrainStats train_epoch(nn::UnaryModule& model, data::DataLoader& loader, optim::Optimizer& optimizer,
                       optim::LRScheduler* scheduler, const Augmentation& augment, const std::string& label,
                       const MixedPrecision& mixed = {}, const Reporting& reporting = {});

double evaluate(nn::UnaryModule& model, data::DataLoader& loader, const std::string& label,
                std::optional<DType> autocast_dtype = std::nullopt, const Reporting& reporting = {});

}  // namespace ember::train
