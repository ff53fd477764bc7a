// GlooProcessGroup: the "gloo" backend, collectives over CPU tensors
// through Gloo's TCP transport. Exists when ember was built with Gloo
// (EMBER_WITH_GLOO; parallel::backend_available("gloo") says so at run
// time); make one with new_group("gloo", ...) or init_process_group("gloo").
//
// Contract (beyond ember/parallel/distributed/process_group.h):
// - CPU tensors of float32, float64, float16, bfloat16, int32 and int64.
//   16-bit floats are reduced pairwise in float32 and rounded back at each
//   step (as NCCL does), so their sums round like a sequence of 16-bit adds.
// - Collectives run on one worker thread of the group, in issue order: the
//   caller's thread returns at once with the Work. Gloo's timeout is the
//   group's, so a peer that stops answering fails the collective instead of
//   hanging it; a failed collective closes the group's connections, so the
//   peers stuck in it fail at once too.
// - reduce_scatter is an all_reduce of the concatenated inputs, of which each
//   rank keeps its block: the traffic of an all_reduce, not the half of it an
//   optimal reduce-scatter moves.
// - The destructor lets the queued collectives finish (each is bounded by
//   the timeout), then stops the worker.
#pragma once

#include <memory>

#include "ember/parallel/distributed/process_group.h"

namespace ember::parallel {

class GlooProcessGroup : public ProcessGroup {
 public:
  GlooProcessGroup(const std::shared_ptr<Store>& store, int rank, int size, const ProcessGroupOptions& options = {});
  ~GlooProcessGroup() override;

  const char* backend() const override { return "gloo"; }

 protected:
  void check_tensors(const Collective& c) const override;
  std::shared_ptr<Work> launch(Collective c) override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::parallel
