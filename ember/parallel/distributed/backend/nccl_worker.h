// NcclProcessGroup::Impl: the state of one nccl group and its worker
// thread. Internal to the nccl backend (it includes nccl.h).
//
// The worker is the one thread that calls NCCL for the group (a
// non-blocking communicator allows no concurrent calls; see
// nccl_communicator.h). It takes the collectives launch() queues, in order,
// and hands each to NCCL on the communication stream (nccl_worker.cpp); it
// is also the watchdog (nccl_watchdog.cpp): every kWatchInterval it finishes
// the collectives the GPU has done, and fails the group on an NCCL error or
// a collective past the timeout. Contract of the group: nccl_process_group.h.
#pragma once

#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ember/core/cuda/stream.h"
#include "ember/core/tensor.h"
#include "ember/parallel/distributed/backend/nccl_communicator.h"
#include "ember/parallel/distributed/backend/nccl_process_group.h"
#include "ember/parallel/distributed/backend/nccl_work.h"

namespace ember::parallel {

namespace detail {

// How often the worker looks at the collectives in flight (and at NCCL's
// errors).
inline constexpr auto kWatchInterval = std::chrono::milliseconds(2);
// How stale this rank's progress record in the store may get while the
// worker hands a run of queued collectives to NCCL: one store round trip
// per collective would slow a run of small ones down (see report()).
inline constexpr auto kReportInterval = std::chrono::milliseconds(10);

}  // namespace detail

struct NcclProcessGroup::Impl {
  using Clock = detail::Clock;

  // A collective and its work: queued, then in flight.
  struct Item {
    Collective c;
    std::shared_ptr<detail::NcclWork> work;
    bool clock_running = false;  // the timeout counts from `since` once the collective could start
    Clock::time_point since;
  };

  NcclProcessGroup* group = nullptr;
  int device = 0;
  bool blocking_wait = false;
  std::shared_ptr<detail::Communicator> comm = std::make_shared<detail::Communicator>();
  cuda::Stream stream{nullptr, 0};  // the communication stream
  Tensor barrier_buffer;            // the one float barrier() all-reduces

  std::mutex mutex;  // queue, stopping
  std::condition_variable wake;
  std::deque<Item> queue;
  bool stopping = false;
  // The worker's alone:
  std::list<Item> in_flight;  // in issue order
  bool draining = false;      // the destructor waits: every collective's timeout runs now
  std::string dead;           // why the worker cannot run collectives (a bug or a lost device)
  Collective unreported;      // the last collective handed to NCCL while not yet in the store (seq 0: none)
  Clock::time_point last_report;
  std::thread worker;

  // Closes the communicator (nccl_communicator.h), bounded by the timeout.
  ~Impl();

  // Makes the communicator (connect_communicator), bounded by the timeout.
  void connect();

  // "nccl group 'name', rank r of n on cuda:d", for errors.
  std::string where() const;

  // Writes this rank's progress (tracker().started) for the peers' failure
  // reports: at once when `now`, else at most every kReportInterval. The
  // worker reports with `now` before it waits for anything (an idle queue,
  // NCCL in progress, a failure), so the record is current whenever this
  // rank could be the one the others wait for.
  void report(bool now);

  // The error of a collective `c` that `what` ("was not run", "did not
  // finish") because the group broke earlier for `reason`.
  Error unusable(const Collective& c, const char* what, const std::string& reason) const;

  // Fails item's collective with `cause`: aborts the communicator and fails
  // everything in flight and queued after it too.
  void fail(Item& item, const std::string& cause);

  // Finishes the collectives in flight that the GPU has done; fails the
  // first one on an NCCL error or when it exceeds the timeout.
  void watch();

  // Staging for all_gather and reduce_scatter when the per-rank tensors are
  // not one block NCCL can work in: allocated on the communication stream
  // (this thread's current stream), so it is safe to free once enqueued.
  Tensor staging(const Collective& c);

  // The NCCL calls of one collective, between ncclGroupStart and ncclGroupEnd.
  void enqueue(const Collective& c, ncclComm_t nc, const Tensor& flat);

  // Hands item's collective to NCCL on the communication stream, after the
  // caller's work, and records its events. Throws the cause of a failure.
  void issue(Item& item);

  void start(Item item);

  // What no collective should meet: fails everything in flight and every
  // later collective, and aborts the communicator (its state is unknown).
  void abandon(const std::string& why);

  void serve();
};

}  // namespace ember::parallel
