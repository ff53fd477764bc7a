// Work (ember/parallel/distributed/work.h): completion and failure shared between the backend
// thread that finishes a collective and the threads that wait for it.
#include "ember/parallel/distributed/work.h"

#include "ember/core/error.h"

namespace ember::parallel {

void Work::wait() {
  wait_finished();
  std::lock_guard<std::mutex> lock(mutex_);
  if (error_) std::rethrow_exception(error_);
}

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

bool Work::is_success() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_ && !error_;
}

std::exception_ptr Work::exception() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return error_;
}

void Work::finish(std::exception_ptr error) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    EMBER_CHECK(!done_, "Work::finish: " << op_ << " #" << seq_ << " was finished twice (a backend bug)");
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

void Work::wait_finished() const {
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return done_; });
}

}  // namespace ember::parallel
