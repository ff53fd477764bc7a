// The Work of one NCCL collective (Work's contract in
// ember/parallel/distributed/work.h; how the nccl backend's wait() behaves in
// nccl_process_group.h). Internal to the nccl backend.
//
// The group's worker records the events, then marks the work issued; the
// worker or is_completed(), whichever sees the collective's end first,
// settles it. is_completed() never blocks: it asks the GPU, and counts the
// end as a success only while the communicator is healthy (the kernels also
// end when the communicator is aborted; then the worker settles the work
// with the error).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <string>

#include "ember/core/cuda/event.h"
#include "ember/parallel/distributed/backend/nccl_communicator.h"
#include "ember/parallel/distributed/work.h"

namespace ember::parallel::detail {

class NcclWork : public Work {
 public:
  // `blocking`: wait() blocks the host until the GPU has finished.
  NcclWork(std::string op, uint64_t seq, std::shared_ptr<Communicator> comm, int device, bool blocking);

  void wait() override;
  bool is_completed() const override;

  // Finishes the work unless that happened already; wakes wait().
  void settle(std::exception_ptr error);
  // The events are recorded: wait() and is_completed() may use them.
  void mark_issued();

  cuda::Event caller_ready;  // on the caller's current stream, when the collective was called
  cuda::Event started;       // on the communication stream, before the collective's own work
  cuda::Event done;          // on the communication stream, after all of it

 private:
  // Until the worker has handed the collective to NCCL, or failed it; each
  // step of that is bounded by the group's timeout.
  void wait_issued() const;

  std::shared_ptr<Communicator> comm_;
  int device_;
  bool blocking_;
  mutable std::mutex mutex_;
  mutable std::condition_variable issued_cv_;
  bool issued_ = false;
  std::atomic<bool> settled_{false};
};

}  // namespace ember::parallel::detail
