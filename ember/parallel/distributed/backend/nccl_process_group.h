// NcclProcessGroup: the "nccl" backend, collectives over CUDA tensors
// through NCCL, one GPU per rank (one process per GPU). Exists when ember
// was built with CUDA (parallel::backend_available("nccl") says so at run
// time); make one with new_group("nccl", ...) or init_process_group("nccl").
//
//   cuda::set_device(info.local_rank);                       // before the group: its device
//   parallel::init_process_group("nccl");
//   auto work = parallel::default_group()->all_reduce(grad);  // queued after the current stream's work
//   work->wait();                                             // the current stream waits; the host does not
//
// Contract (beyond ember/parallel/distributed/process_group.h):
// - The group's device is ProcessGroupOptions::nccl_device, or the calling
//   thread's current CUDA device when that is -1. Every tensor must be a
//   contiguous CUDA tensor on it, of float32, float64, float16, bfloat16,
//   int32 or int64. Creation checks the device (no GPU visible, a bad id)
//   before it joins the group, and makes the NCCL communicator eagerly: rank
//   0 creates NCCL's unique id and hands it to the others through the
//   group's store. Two ranks on one GPU are an error (NCCL's).
// - Collectives run on the group's own high-priority communication stream
//   (a non-blocking stream, from ember/core/cuda/stream.h's pool), in issue order.
//   A collective starts after the work queued on the caller's current stream
//   (of the group's device) before the call, and its tensors are recorded on
//   the communication stream for the caching allocator, so their memory is
//   not reused before the collective is done with it. A worker thread of the
//   group hands the collectives to NCCL, so the call returns at once even
//   when NCCL must first connect to the peers.
// - Work::wait() makes the caller's current stream wait for the collective
//   and returns without blocking the host (PyTorch's default), unless
//   ProcessGroupOptions::nccl_blocking_wait is set: then it returns when the
//   GPU has finished the collective. barrier()'s wait() always blocks the
//   host until every rank has reached the barrier. wait() throws for a
//   collective that has failed; one that fails after a non-blocking wait()
//   returned makes the later wait() calls, and the group's later
//   collectives, throw. is_completed() asks the GPU (never blocks).
// - ReduceOp::Avg is NCCL's ncclAvg. How Max and Min treat NaN is NCCL's
//   affair (not torch.maximum's rule of the gloo backend).
// - A watchdog (the same worker thread) polls the collectives in flight and
//   NCCL's asynchronous errors every few milliseconds. A collective that has
//   not finished within the group's timeout (counted from when it could
//   start: once the work before it on both streams is done), or an
//   asynchronous NCCL error, aborts the communicator (ncclCommAbort) and
//   fails that collective with the error of process_group.h (the ranks that
//   did not arrive, and what they started last); every collective after it
//   fails too. Group creation that does not finish within the timeout
//   aborts and throws the same way, naming the ranks that never started it.
// - Creation sets NCCL_NVLS_ENABLE=0 in the environment unless it is set
//   already (see nccl_process_group.cpp for why), before any NCCL call.
// - The destructor lets the queued collectives run and finish (each bounded
//   by the timeout), then finalizes and destroys the communicator, or
//   aborts it when finalizing takes longer than the timeout. It never
//   throws. No abort waits longer than the timeout either (ncclCommAbort can
//   hang in some NCCL versions; it is then left running in the background).
#pragma once

#include <memory>

#include "ember/parallel/distributed/process_group.h"

namespace ember::parallel {

class NcclProcessGroup : public ProcessGroup {
 public:
  NcclProcessGroup(const std::shared_ptr<Store>& store, int rank, int size, const ProcessGroupOptions& options = {});
  ~NcclProcessGroup() override;

  const char* backend() const override { return "nccl"; }
  // The CUDA device this rank's collectives run on.
  int device() const;

 protected:
  void check_tensors(const Collective& c) const override;
  std::shared_ptr<Work> launch(Collective c) override;

 private:
  // `device` is the checked device of `options`, found before the base
  // class joins the group.
  NcclProcessGroup(const std::shared_ptr<Store>& store, int rank, int size, const ProcessGroupOptions& options,
                   int device);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ember::parallel
