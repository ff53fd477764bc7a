// The Work of one NCCL collective (contract in
// ember/parallel/distributed/backend/nccl_work.h).
#include "ember/parallel/distributed/backend/nccl_work.h"

#include <thread>
#include <utility>

#include "ember/core/cuda/stream.h"

namespace ember::parallel::detail {

NcclWork::NcclWork(std::string op, uint64_t seq, std::shared_ptr<Communicator> comm, int device, bool blocking)
    : Work(std::move(op), seq), comm_(std::move(comm)), device_(device), blocking_(blocking) {}

void NcclWork::wait() {
  wait_issued();
  if (blocking_) {
    while (!is_completed()) std::this_thread::sleep_for(kNcclSpinInterval);
  }
  if (std::exception_ptr error = exception()) std::rethrow_exception(error);
  done.wait(cuda::current_stream(device_));
}

bool NcclWork::is_completed() const {
  if (Work::is_completed()) return true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!issued_) return false;
  }
  if (!done.query()) return false;
  std::optional<bool> healthy = comm_->healthy();
  if (!healthy || !*healthy) return false;
  const_cast<NcclWork*>(this)->settle(nullptr);  // recording what was observed; callers see no change
  return true;
}

void NcclWork::settle(std::exception_ptr error) {
  if (settled_.exchange(true)) return;
  finish(std::move(error));
  mark_issued();
}

void NcclWork::mark_issued() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    issued_ = true;
  }
  issued_cv_.notify_all();
}

void NcclWork::wait_issued() const {
  std::unique_lock<std::mutex> lock(mutex_);
  issued_cv_.wait(lock, [&] { return issued_; });
}

}  // namespace ember::parallel::detail
