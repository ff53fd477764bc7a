// The nccl group's watchdog (contract in
// ember/parallel/distributed/backend/nccl_worker.h): the worker's look, every
// kWatchInterval, at the collectives in flight: those the GPU has done are
// finished; an NCCL asynchronous error or a collective past the group's
// timeout aborts the communicator and fails that collective with the error
// of process_group.h, and every collective in flight or queued after it.
#include <nccl.h>

#include <chrono>
#include <deque>
#include <exception>
#include <string>
#include <utility>

#include "ember/core/error.h"
#include "ember/parallel/distributed/backend/nccl_worker.h"
#include "ember/parallel/distributed/collective_tracker.h"

namespace ember::parallel {

using detail::NcclWork;

Error NcclProcessGroup::Impl::unusable(const Collective& c, const char* what, const std::string& reason) const {
  return Error(std::string("nccl ") + c.str() + " on rank " + std::to_string(group->rank()) + " " + what + ": group '" +
               group->name() + "' is unusable since an earlier collective failed: " + reason);
}

void NcclProcessGroup::Impl::fail(Item& item, const std::string& cause) {
  report(true);
  std::string broken = group->broken_reason();
  if (!broken.empty()) {
    item.work->settle(std::make_exception_ptr(unusable(item.c, "did not finish", broken)));
    return;
  }
  const std::string complaint = comm->abort(group->timeout());
  const std::string message =
      group->failure_message(item.c, complaint.empty() ? cause : cause + " (" + complaint + ")");
  item.work->settle(std::make_exception_ptr(Error(message)));
  for (Item& other : in_flight)
    other.work->settle(std::make_exception_ptr(unusable(other.c, "did not finish", message)));
  in_flight.clear();
  std::deque<Item> queued;
  {
    std::lock_guard<std::mutex> lock(mutex);
    queued.swap(queue);
  }
  for (Item& q : queued) q.work->settle(std::make_exception_ptr(unusable(q.c, "was not run", message)));
}

void NcclProcessGroup::Impl::watch() {
  if (in_flight.empty()) return;
  std::string error;
  try {
    std::lock_guard<std::mutex> lock(comm->mutex);
    error = comm->error_locked();
  } catch (const std::exception& e) {
    error = e.what();
  }
  if (!error.empty()) {
    Item item = std::move(in_flight.front());
    in_flight.pop_front();
    fail(item, error);
    return;
  }
  const auto now = Clock::now();
  for (auto it = in_flight.begin(); it != in_flight.end();) {
    NcclWork& work = *it->work;
    std::string cause;
    try {
      if (work.Work::is_completed()) {  // finished by is_completed() on a waiting thread
        it = in_flight.erase(it);
        continue;
      }
      if (work.done.query()) {
        work.settle(nullptr);
        it = in_flight.erase(it);
        continue;
      }
      if (!it->clock_running && (draining || work.started.query())) {
        it->clock_running = true;
        it->since = now;
      }
      if (it->clock_running && now - it->since > group->timeout()) {
        cause = "Timed out: NCCL had not finished it " +
                std::to_string(std::chrono::duration_cast<std::chrono::milliseconds>(now - it->since).count()) +
                " ms after it could start on the GPU (the work before it on the caller's and the communication "
                "stream was done), and its communicator was aborted";
      }
    } catch (const std::exception& e) {  // a CUDA error: the device is unusable
      cause = e.what();
    }
    if (!cause.empty()) {
      Item item = std::move(*it);
      in_flight.erase(it);
      fail(item, cause);
      return;
    }
    ++it;
  }
}

void NcclProcessGroup::Impl::abandon(const std::string& why) {
  if (dead.empty()) dead = where() + ": the group's worker thread failed: " + why;
  comm->abort(group->timeout());
  for (Item& item : in_flight) item.work->settle(std::make_exception_ptr(Error(dead)));
  in_flight.clear();
}

}  // namespace ember::parallel
