// The nccl backend (parallel/nccl_process_group.h): the communicator made
// through the group's store, a worker thread that hands the queued
// collectives to NCCL on the communication stream and watches the ones in
// flight, and works whose wait() orders the caller's stream after them.
//
// Why non-blocking communicators (ncclConfig_t::blocking = 0): a blocking
// NCCL call may wait inside NCCL for the peers (creation, and a collective
// that first connects to them), where no timeout reaches it. A non-blocking
// call returns at once, possibly with ncclInProgress, and the worker polls
// ncclCommGetAsyncError against the group's timeout. Nothing else may be
// called on the communicator while that poll says ncclInProgress; one
// worker per group, which alone launches, keeps that rule.
//
// Why NCCL_NVLS_ENABLE=0 unless the user set it: NVLink SHARP (NVLS) builds
// its buffers from CUDA multicast objects (cuMulticastCreate), and on the
// shared machines ember runs on a multicast setup gone wrong can put every
// GPU of the host out of service, for all of its users. NVLS only speeds up
// large all-reduces on NVSwitch systems; whoever wants it sets the variable.
#include "parallel/nccl_process_group.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <future>
#include <list>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/cuda/caching_allocator.h"
#include "core/cuda/cuda_check.h"
#include "core/cuda/device.h"
#include "core/cuda/event.h"
#include "core/cuda/nccl_check.h"
#include "core/cuda/stream.h"
#include "core/error.h"
#include "core/ops.h"
#include "core/ops/op_utils.h"
#include "parallel/collective_tracker.h"
#include "parallel/nccl_common.h"

static_assert(NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0),
              "ember's nccl backend needs NCCL 2.18 or newer (non-blocking communicators, ncclCommFinalize, "
              "ncclConfig_t::commName)");

namespace ember::parallel {

namespace {

using Clock = std::chrono::steady_clock;
using ember::detail::describe;

// How often the worker looks at the collectives in flight (and at NCCL's
// errors), and how long a blocking wait() or a poll of ncclInProgress
// sleeps between its looks.
constexpr auto kWatchInterval = std::chrono::milliseconds(2);
constexpr auto kSpinInterval = std::chrono::microseconds(50);
// How stale this rank's progress record in the store may get while the
// worker hands a run of queued collectives to NCCL: one store round trip
// per collective would slow a run of small ones down (see report()).
constexpr auto kReportInterval = std::chrono::milliseconds(10);

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  EMBER_FAIL("nccl: unknown reduce op");
}

size_t nbytes(const Tensor& t) { return size_t(t.numel()) * t.element_size(); }

const char* bytes_of(const Tensor& t) { return static_cast<const char*>(t.data_ptr()); }

// Whether the tensors lie end to end in memory, in order.
bool adjacent(const TensorList& ts) {
  for (size_t i = 0; i < ts.size(); ++i)
    if (bytes_of(ts[i]) != bytes_of(ts[0]) + i * nbytes(ts[0])) return false;
  return true;
}

// Whether `part` overlaps the memory of `ts` (adjacent) other than as its
// block `rank`: NCCL computes in place only in that block.
bool overlaps_elsewhere(const Tensor& part, const TensorList& ts, int rank) {
  const char* begin = bytes_of(ts[0]);
  const char* end = begin + ts.size() * nbytes(ts[0]);
  const char* p = bytes_of(part);
  const bool overlap = p < end && p + nbytes(part) > begin;
  return overlap && p != bytes_of(ts[rank]);
}

// NCCL's asynchronous error `state` of `comm`, in words.
std::string async_error_text(ncclComm_t comm, ncclResult_t state) {
  std::string s = std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(state);
  const char* last = ncclGetLastError(comm);
  if (last != nullptr && last[0] != '\0') s += " (" + std::string(last) + ")";
  s += "; rerun with NCCL_DEBUG=INFO for NCCL's own log";
  if (state == ncclSystemError || state == ncclRemoteError) s += ", and check that every rank is alive";
  return s;
}

// Polls a non-blocking communicator: true while its last call goes on;
// throws its asynchronous error.
bool still_in_progress(ncclComm_t comm) {
  ncclResult_t state = ncclSuccess;
  EMBER_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
  if (state == ncclInProgress) return true;
  EMBER_CHECK(state == ncclSuccess, async_error_text(comm, state));
  return false;
}

// Aborts a communicator, waiting at most `limit` for ncclCommAbort, which
// can hang itself in some NCCL versions (NVIDIA/nccl#829); it is then left
// to finish in the background. Returns what went wrong, or "".
std::string abort_within(ncclComm_t comm, std::chrono::milliseconds limit) {
  auto outcome = std::make_shared<std::promise<std::string>>();
  std::future<std::string> result = outcome->get_future();
  std::thread([comm, outcome] {
    try {
      EMBER_NCCL_CHECK(ncclCommAbort(comm));
      outcome->set_value("");
    } catch (const std::exception& e) {
      outcome->set_value(e.what());
    }
  }).detach();
  if (result.wait_for(limit) != std::future_status::ready) {
    return "ncclCommAbort did not return within " + std::to_string(limit.count()) +
           " ms and was left running in the background";
  }
  return result.get();
}

// The communicator, shared by the group's worker and its works (which may
// outlive the group). Every call on it holds `mutex`.
struct Communicator {
  std::mutex mutex;
  ncclComm_t comm = nullptr;  // null once finalized or aborted
  bool failed = false;        // aborted after a failure: no work on it may count as a success

  // NCCL's asynchronous error, "" when there is none. Call with `mutex` held.
  std::string error_locked() {
    if (comm == nullptr) return "";
    ncclResult_t state = ncclSuccess;
    EMBER_NCCL_CHECK(ncclCommGetAsyncError(comm, &state));
    return state == ncclSuccess || state == ncclInProgress ? "" : async_error_text(comm, state);
  }

  // Whether the work that ended on the GPU succeeded: false when NCCL has an
  // error or the group failed; nullopt when another thread holds the
  // communicator (never blocks).
  std::optional<bool> healthy() {
    std::unique_lock<std::mutex> lock(mutex, std::try_to_lock);
    if (!lock.owns_lock()) return std::nullopt;
    return !failed && error_locked().empty();
  }

  // Marks the communicator failed and aborts it (which ends NCCL's kernels
  // on the GPU), waiting at most `limit`; returns what went wrong, or "".
  std::string abort(std::chrono::milliseconds limit) {
    ncclComm_t c = nullptr;
    {
      std::lock_guard<std::mutex> lock(mutex);
      failed = true;
      c = std::exchange(comm, nullptr);
    }
    return c == nullptr ? "" : abort_within(c, limit);
  }

  // Finalizes and destroys the communicator, giving up after `timeout` (a
  // peer gone, say) and aborting instead. Never throws.
  void close(std::chrono::milliseconds timeout) noexcept {
    std::lock_guard<std::mutex> lock(mutex);
    if (comm == nullptr) return;
    ncclComm_t c = std::exchange(comm, nullptr);
    bool finalized = false;
    try {
      bool pending = EMBER_NCCL_CHECK_ASYNC(ncclCommFinalize(c));
      const auto start = Clock::now();
      while (pending && Clock::now() - start < timeout) {
        std::this_thread::sleep_for(kSpinInterval);
        pending = still_in_progress(c);
      }
      finalized = !pending;
    } catch (const std::exception&) {  // finalizing failed: aborting frees what is left
    }
    try {
      if (finalized) {
        EMBER_NCCL_CHECK(ncclCommDestroy(c));  // local once finalized: does not wait for the peers
      } else {
        abort_within(c, timeout);
      }
    } catch (const std::exception&) {  // a destructor has no one to tell
    }
  }
};

// The Work of one NCCL collective. The worker records its events, then
// marks it issued; the worker or is_completed(), whichever sees the end
// first, finishes it.
class NcclWork : public Work {
 public:
  NcclWork(std::string op, uint64_t seq, std::shared_ptr<Communicator> comm, int device, bool blocking)
      : Work(std::move(op), seq), comm_(std::move(comm)), device_(device), blocking_(blocking) {}

  void wait() override {
    wait_issued();
    if (blocking_) {
      while (!is_completed()) std::this_thread::sleep_for(kSpinInterval);
    }
    if (std::exception_ptr error = exception()) std::rethrow_exception(error);
    done.wait(cuda::current_stream(device_));
  }

  bool is_completed() const override {
    if (Work::is_completed()) return true;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!issued_) return false;
    }
    if (!done.query()) return false;
    // The kernels also end when the communicator is aborted or NCCL failed;
    // then the worker finishes the work with the error.
    std::optional<bool> healthy = comm_->healthy();
    if (!healthy || !*healthy) return false;
    const_cast<NcclWork*>(this)->settle(nullptr);  // recording what was observed; callers see no change
    return true;
  }

  // Finishes the work unless that happened already; wakes wait().
  void settle(std::exception_ptr error) {
    if (settled_.exchange(true)) return;
    finish(std::move(error));
    mark_issued();
  }

  // The events are recorded: wait() and is_completed() may use them.
  void mark_issued() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      issued_ = true;
    }
    issued_cv_.notify_all();
  }

  cuda::Event caller_ready;  // on the caller's current stream, when the collective was called
  cuda::Event started;       // on the communication stream, before the collective's own work
  cuda::Event done;          // on the communication stream, after all of it

 private:
  // Until the worker has handed the collective to NCCL, or failed it; each
  // step of that is bounded by the group's timeout.
  void wait_issued() const {
    std::unique_lock<std::mutex> lock(mutex_);
    issued_cv_.wait(lock, [&] { return issued_; });
  }

  std::shared_ptr<Communicator> comm_;
  int device_;
  bool blocking_;
  mutable std::mutex mutex_;
  mutable std::condition_variable issued_cv_;
  bool issued_ = false;
  std::atomic<bool> settled_{false};
};

// The group's device: the option's, or the caller's current one, checked.
int checked_device(const ProcessGroupOptions& options, int rank, int size) {
  default_nccl_environment();
  const std::string who = "nccl process group (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  EMBER_CHECK(options.nccl_device >= -1, who << ": ProcessGroupOptions::nccl_device is " << options.nccl_device
                                              << "; give a CUDA device id, or -1 for the current device");
  if (cuda::device_count() == 0) {
    std::string why;
    try {
      cuda::check_device(0);
    } catch (const Error& e) {
      why = e.what();
    }
    EMBER_FAIL(who << ": the nccl backend needs a CUDA device for each rank, and this process sees none (" << why
                   << "). For CPU tensors use the gloo backend");
  }
  const int device = options.nccl_device == -1 ? cuda::current_device() : options.nccl_device;
  try {
    cuda::check_device(device);
  } catch (const Error& e) {
    EMBER_FAIL(who << ": ProcessGroupOptions::nccl_device " << device << " is not a device of this process: "
                   << e.what());
  }
  return device;
}

}  // namespace

struct NcclProcessGroup::Impl {
  // A collective and its work: queued, then in flight.
  struct Item {
    Collective c;
    std::shared_ptr<NcclWork> work;
    bool clock_running = false;  // the timeout counts from `since` once the collective could start
    Clock::time_point since;
  };

  NcclProcessGroup* group = nullptr;
  int device = 0;
  bool blocking_wait = false;
  std::shared_ptr<Communicator> comm = std::make_shared<Communicator>();
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

  ~Impl() { comm->close(group != nullptr ? group->timeout() : std::chrono::milliseconds(0)); }

  std::string where() const {
    return "nccl group '" + group->name() + "', rank " + std::to_string(group->rank()) + " of " +
           std::to_string(group->size()) + " on cuda:" + std::to_string(device);
  }

  // Makes the communicator: rank 0's unique id through the store, then
  // ncclCommInitRankConfig, bounded by the timeout.
  void connect() {
    Store& store = *group->store();
    const int rank = group->rank();
    const int size = group->size();
    ncclUniqueId id;
    try {
      if (rank == 0) {
        EMBER_NCCL_CHECK(ncclGetUniqueId(&id));
        store.set("nccl/unique_id", std::string(id.internal, sizeof(id.internal)));
      } else {
        std::string value = store.get("nccl/unique_id");
        EMBER_CHECK(value.size() == sizeof(id.internal), "the NCCL unique id in the store has " << value.size()
                                                             << " bytes, not " << sizeof(id.internal)
                                                             << " (rank 0 runs another NCCL version?)");
        std::memcpy(id.internal, value.data(), sizeof(id.internal));
      }
      store.set("nccl/init/" + std::to_string(rank), "1");
    } catch (const std::exception& e) {
      EMBER_FAIL(where() << ": handing NCCL's unique id from rank 0 to the others failed: " << e.what());
    }

    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    config.commName = group->name().c_str();  // names the communicator in NCCL_DEBUG's log
    ncclComm_t c = nullptr;
    cuda::DeviceGuard guard(device);  // NCCL makes the communicator on the current device
    const auto start = Clock::now();
    bool pending = false;
    try {
      pending = EMBER_NCCL_CHECK_ASYNC(ncclCommInitRankConfig(&c, size, id, rank, &config));
      while (pending && Clock::now() - start < group->timeout()) {
        std::this_thread::sleep_for(kSpinInterval);
        pending = still_in_progress(c);
      }
    } catch (const std::exception& e) {
      if (c != nullptr) abort_within(c, group->timeout());
      EMBER_FAIL(where() << ": creating the NCCL communicator failed: " << e.what()
                         << ". If two ranks share a GPU: each needs its own; call cuda::set_device(LOCAL_RANK) before "
                         << "making the group, or set ProcessGroupOptions::nccl_device");
    }
    if (pending) {
      abort_within(c, group->timeout());
      std::string missing;
      try {
        for (int r = 0; r < size; ++r) {
          if (!store.check({"nccl/init/" + std::to_string(r)}))
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
      } catch (const std::exception& e) {
        missing = std::string("unknown (the store cannot be reached: ") + e.what() + ")";
      }
      EMBER_FAIL(where() << ": creating the NCCL communicator did not finish within the timeout of "
                         << group->timeout().count() << " ms, and was aborted. "
                         << (missing.empty() ? "Every rank started creating it (NCCL's connections between them "
                                               "failed: rerun with NCCL_DEBUG=INFO)"
                                             : "Ranks that never started creating it: " + missing));
    }
    comm->comm = c;
  }

  // Writes this rank's progress (tracker().started) for the peers' failure
  // reports: at once when `now`, else at most every kReportInterval. The
  // worker reports with `now` before it waits for anything (an idle queue,
  // NCCL in progress, a failure), so the record is current whenever this
  // rank could be the one the others wait for.
  void report(bool now) {
    if (unreported.seq == 0 || (!now && Clock::now() - last_report < kReportInterval)) return;
    group->tracker().started(unreported);
    unreported.seq = 0;
    last_report = Clock::now();
  }

  Error unusable(const Collective& c, const char* what, const std::string& reason) const {
    return Error(std::string("nccl ") + c.str() + " on rank " + std::to_string(group->rank()) + " " + what +
                 ": group '" + group->name() + "' is unusable since an earlier collective failed: " + reason);
  }

  // Fails item's collective with `cause`: aborts the communicator and fails
  // everything in flight and queued after it too.
  void fail(Item& item, const std::string& cause) {
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

  // Finishes the collectives in flight that the GPU has done; fails the
  // first one on an NCCL error or when it exceeds the timeout.
  void watch() {
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

  // Staging for all_gather and reduce_scatter when the per-rank tensors are
  // not one block NCCL can work in: allocated on the communication stream
  // (this thread's current stream), so it is safe to free once enqueued.
  Tensor staging(const Collective& c) {
    const Tensor& mine = c.tensors[0];  // the input of all_gather, the output of reduce_scatter
    if (mine.numel() == 0 || (adjacent(c.per_rank) && !overlaps_elsewhere(mine, c.per_rank, group->rank())))
      return Tensor();
    Tensor flat = empty({int64_t(c.per_rank.size()) * mine.numel()}, mine.dtype(), cuda_device(device));
    if (c.kind == CollectiveKind::ReduceScatter) {
      char* p = static_cast<char*>(flat.data_ptr());
      for (const Tensor& t : c.per_rank) {
        EMBER_CUDA_CHECK(cudaMemcpyAsync(p, t.data_ptr(), nbytes(t), cudaMemcpyDeviceToDevice, stream.handle()));
        p += nbytes(t);
      }
    }
    return flat;
  }

  // The NCCL calls of one collective, between ncclGroupStart and ncclGroupEnd.
  void enqueue(const Collective& c, ncclComm_t nc, const Tensor& flat) {
    cudaStream_t s = stream.handle();
    switch (c.kind) {
      case CollectiveKind::AllReduce:
        for (const Tensor& t : c.tensors) {
          if (t.numel() == 0) continue;
          EMBER_NCCL_CHECK(ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()),
                                         nccl_op(c.op), nc, s));
        }
        return;
      case CollectiveKind::Broadcast:
        for (const Tensor& t : c.tensors) {
          if (t.numel() == 0) continue;
          EMBER_NCCL_CHECK(
              ncclBroadcast(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), c.root, nc, s));
        }
        return;
      case CollectiveKind::AllGather: {
        const Tensor& input = c.tensors[0];
        if (input.numel() == 0) return;
        void* out = flat.defined() ? flat.data_ptr() : c.per_rank[0].data_ptr();
        EMBER_NCCL_CHECK(ncclAllGather(input.data_ptr(), out, size_t(input.numel()), nccl_type(input.dtype()), nc, s));
        return;
      }
      case CollectiveKind::ReduceScatter: {
        const Tensor& output = c.tensors[0];
        if (output.numel() == 0) return;
        const void* in = flat.defined() ? flat.data_ptr() : c.per_rank[0].data_ptr();
        EMBER_NCCL_CHECK(ncclReduceScatter(in, output.data_ptr(), size_t(output.numel()), nccl_type(output.dtype()),
                                           nccl_op(c.op), nc, s));
        return;
      }
      case CollectiveKind::Barrier:
        EMBER_NCCL_CHECK(ncclAllReduce(barrier_buffer.data_ptr(), barrier_buffer.data_ptr(), 1, ncclFloat32, ncclSum,
                                       nc, s));
        return;
    }
  }

  // Hands item's collective to NCCL on the communication stream, after the
  // caller's work, and records its events. Throws the cause of a failure.
  void issue(Item& item) {
    const Collective& c = item.c;
    NcclWork& work = *item.work;
    work.caller_ready.wait(stream);
    for (const TensorList* list : {&c.tensors, &c.per_rank})
      for (const Tensor& t : *list) cuda::record_stream(*t.storage(), stream);
    work.started.record(stream);
    const bool staged = c.kind == CollectiveKind::AllGather || c.kind == CollectiveKind::ReduceScatter;
    Tensor flat = staged ? staging(c) : Tensor();
    bool pending = false;
    const auto start = Clock::now();
    {
      std::lock_guard<std::mutex> lock(comm->mutex);
      EMBER_CHECK(comm->comm != nullptr, "the communicator was aborted");
      EMBER_NCCL_CHECK(ncclGroupStart());
      try {
        enqueue(c, comm->comm, flat);
      } catch (...) {
        ncclGroupEnd();  // closes the group; the first error is the one to report
        throw;
      }
      pending = EMBER_NCCL_CHECK_ASYNC(ncclGroupEnd());
    }
    unreported = Collective();  // the tracker needs no tensors
    unreported.kind = c.kind;
    unreported.seq = c.seq;
    report(pending);
    // NCCL goes on in the background (connecting to the peers, say); the
    // kernels are on the stream once it says success.
    while (pending) {
      watch();
      if (ms_since(start) > group->timeout().count()) {
        throw Error("Timed out: NCCL had not finished launching it after " + std::to_string(ms_since(start)) +
                    " ms (it connects to the peers in it first, and they did not answer), and its communicator "
                    "was aborted");
      }
      std::this_thread::sleep_for(kSpinInterval);
      std::lock_guard<std::mutex> lock(comm->mutex);
      EMBER_CHECK(comm->comm != nullptr, "the group failed while NCCL was launching it");
      pending = still_in_progress(comm->comm);
    }
    if (c.kind == CollectiveKind::AllGather && flat.defined()) {
      const char* p = static_cast<const char*>(flat.data_ptr());
      for (const Tensor& t : c.per_rank) {
        EMBER_CUDA_CHECK(cudaMemcpyAsync(t.data_ptr(), p, nbytes(t), cudaMemcpyDeviceToDevice, stream.handle()));
        p += nbytes(t);
      }
    }
    work.done.record(stream);
    work.mark_issued();
  }

  void start(Item item) {
    if (!dead.empty()) {
      item.work->settle(std::make_exception_ptr(Error(dead)));
      return;
    }
    std::string broken = group->broken_reason();
    if (!broken.empty()) {
      item.work->settle(std::make_exception_ptr(unusable(item.c, "was not run", broken)));
      return;
    }
    try {
      issue(item);
    } catch (const std::exception& e) {
      fail(item, e.what());
      return;
    }
    in_flight.push_back(std::move(item));
  }

  // What no collective should meet: fails everything in flight and every
  // later collective, and aborts the communicator (its state is unknown).
  void abandon(const std::string& why) {
    if (dead.empty()) dead = where() + ": the group's worker thread failed: " + why;
    comm->abort(group->timeout());
    for (Item& item : in_flight) item.work->settle(std::make_exception_ptr(Error(dead)));
    in_flight.clear();
  }

  void serve() {
    try {
      cuda::set_device(device);
      cuda::set_current_stream(stream);  // the staging buffers' allocations belong to it
    } catch (const std::exception& e) {
      abandon(std::string("it cannot use the device: ") + e.what());
    }
    while (true) {
      std::optional<Item> next;
      {
        std::unique_lock<std::mutex> lock(mutex);
        auto ready = [&] { return !queue.empty() || (stopping && in_flight.empty()); };
        if (in_flight.empty()) {
          wake.wait(lock, ready);
        } else {
          wake.wait_for(lock, kWatchInterval, ready);
        }
        draining = stopping;
        if (!queue.empty()) {
          next = std::move(queue.front());
          queue.pop_front();
        } else if (stopping && in_flight.empty()) {
          return;
        }
      }
      std::shared_ptr<NcclWork> work = next ? next->work : nullptr;
      try {
        if (next) {
          start(std::move(*next));
          bool idle;
          {
            std::lock_guard<std::mutex> lock(mutex);
            idle = queue.empty();
          }
          report(idle);
        }
        watch();
      } catch (const std::exception& e) {
        if (work) work->settle(std::make_exception_ptr(Error(where() + ": " + e.what())));
        abandon(e.what());
      }
    }
  }
};

NcclProcessGroup::NcclProcessGroup(const std::shared_ptr<Store>& store, int rank, int size,
                                   const ProcessGroupOptions& options)
    : NcclProcessGroup(store, rank, size, options, checked_device(options, rank, size)) {}

NcclProcessGroup::NcclProcessGroup(const std::shared_ptr<Store>& store, int rank, int size,
                                   const ProcessGroupOptions& options, int device)
    : ProcessGroup(store, rank, size, options), impl_(std::make_unique<Impl>()) {
  impl_->group = this;
  impl_->device = device;
  impl_->blocking_wait = options.nccl_blocking_wait;
  impl_->stream = cuda::stream_from_pool(device, /*high_priority=*/true);
  {
    cuda::StreamGuard guard(impl_->stream);
    impl_->barrier_buffer = zeros({1}, DType::Float32, cuda_device(device));
  }
  impl_->connect();
  impl_->worker = std::thread([impl = impl_.get()] { impl->serve(); });
}

NcclProcessGroup::~NcclProcessGroup() {
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake.notify_all();
  impl_->worker.join();
  // ~Impl closes the communicator.
}

int NcclProcessGroup::device() const { return impl_->device; }

void NcclProcessGroup::check_tensors(const Collective& c) const {
  const Device want = cuda_device(impl_->device);
  auto name = [&](bool per_rank, size_t i) {
    switch (c.kind) {
      case CollectiveKind::AllGather: return per_rank ? "outputs[" + std::to_string(i) + "]" : std::string("the input");
      case CollectiveKind::ReduceScatter:
        return per_rank ? "inputs[" + std::to_string(i) + "]" : std::string("the output");
      default: return "tensors[" + std::to_string(i) + "]";
    }
  };
  for (bool per_rank : {false, true}) {
    const TensorList& list = per_rank ? c.per_rank : c.tensors;
    for (size_t i = 0; i < list.size(); ++i) {
      const Tensor& t = list[i];
      if (t.device() == want) continue;
      if (t.device().is_cpu()) {
        EMBER_FAIL("nccl " << c.signature() << ": the nccl backend works on CUDA tensors on this group's device "
                           << want.str() << ", but " << name(per_rank, i) << " is " << describe(t)
                           << "; move it there with t.to(cuda_device(" << impl_->device
                           << ")) (and the result back), or use a gloo group for CPU tensors");
      }
      EMBER_FAIL("nccl " << c.signature() << ": " << name(per_rank, i) << " is " << describe(t) << ", but this rank's "
                         << "group works on " << want.str() << " (ProcessGroupOptions::nccl_device, else the current "
                         << "device when the group was made); move the tensor there, or make the group on its device");
    }
  }
}

std::shared_ptr<Work> NcclProcessGroup::launch(Collective c) {
  const bool blocking = impl_->blocking_wait || c.kind == CollectiveKind::Barrier;
  auto work = std::make_shared<NcclWork>(collective_name(c.kind), c.seq, impl_->comm, impl_->device, blocking);
  work->caller_ready.record(cuda::current_stream(impl_->device));
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    Impl::Item& item = impl_->queue.emplace_back();
    item.c = std::move(c);
    item.work = work;
  }
  impl_->wake.notify_one();
  return work;
}

}  // namespace ember::parallel
