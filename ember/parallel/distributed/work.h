// Work: the handle of one asynchronous collective.
//
//   auto work = group.all_reduce(grad);  // returns at once
//   ...                                  // overlap: compute something else
//   work->wait();                        // grad holds the sum now, or wait() throws
//
// Contract:
// - wait() returns once the collective's result may be used by the caller,
//   and throws the ember::Error of a failed collective (every wait() call
//   does, not only the first). For CPU backends (gloo) that means the
//   collective has finished. A GPU backend makes the caller's current CUDA
//   stream wait for the collective instead, and returns without blocking the
//   host; is_completed() then says whether the GPU has finished it.
// - is_completed() never blocks; is_success() is whether it finished without
//   error; exception() is the failure (null while running or on success).
// - A backend calls finish() exactly once, from any thread, when the
//   collective is done; that wakes every waiter.
// - The tensors of a collective must not be read or written until wait()
//   returns (the backend holds references to them until it is done).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

namespace ember::parallel {

class Work {
 public:
  Work(std::string op, uint64_t seq) : op_(std::move(op)), seq_(seq) {}
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  virtual void wait();
  virtual bool is_completed() const;
  bool is_success() const;
  std::exception_ptr exception() const;

  const std::string& op() const { return op_; }  // "all_reduce"
  uint64_t sequence_number() const { return seq_; }

  // For backends: the collective is done; `error` is its failure, if any.
  void finish(std::exception_ptr error = nullptr);

 protected:
  // Blocks until finish() was called; for subclasses' wait().
  void wait_finished() const;

 private:
  std::string op_;
  uint64_t seq_;
  mutable std::mutex mutex_;
  mutable std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace ember::parallel
