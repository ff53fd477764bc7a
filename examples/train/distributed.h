// ember-train's distributed mode: one rank of a data-parallel run started
// by ember-run (or torchrun, mpirun, srun), or a plain single process.
//
//   ember-run --standalone --nproc-per-node 4 ember-train --device cpu --batch-size 32
//
// Contract:
// - start_distributed(o) decides: the run is distributed when --distributed
//   was given, or when the launcher's variables (ember/parallel/distributed/rank_env.h) give a
//   world size above 1. Otherwise it returns a one-process run and touches
//   nothing. --distributed without the launcher's variables is a UsageError
//   that says what is missing.
// - Distributed on the CPU: the default process group over gloo; on CUDA
//   over NCCL, local rank k training on cuda:k (more ranks per node than
//   visible GPUs is an Error). Either way --dist-timeout is the collectives'
//   timeout. A build without CUDA (so without NCCL) makes --device cuda a
//   UsageError that says to use --device cpu.
// - sum(values) adds up each rank's values (all_reduce), the same on every
//   rank; it does nothing in one process. finish() ends the run: a barrier
//   (so that rank 0, which serves the store, leaves last) and
//   destroy_process_group().
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "ember/core/device.h"
#include "ember/parallel/distributed/process_group.h"
#include "examples/train/options.h"

namespace ember::train {

struct Distributed {
  bool enabled = false;
  int rank = 0;
  int world_size = 1;
  std::string backend;   // "gloo" or "nccl"; empty in one process
  Device device = kCPU;  // where this rank trains
  std::shared_ptr<parallel::ProcessGroup> group;

  // Rank 0 prints, logs and checkpoints.
  bool main() const { return rank == 0; }
  void sum(std::vector<double>& values) const;
  void finish();
};

Distributed start_distributed(const Options& o);

}  // namespace ember::train
