// The nccl group's worker, issuing side (contract in
// ember/parallel/distributed/backend/nccl_worker.h): takes the queued collectives
// in order, hands each to NCCL on the communication stream after the
// caller's work, and keeps this rank's progress record in the store for the
// peers' failure reports. The watching side is nccl_watchdog.cpp.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "ember/core/cuda/caching_allocator.h"
#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/nccl_check.h"
#include "ember/core/error.h"
#include "ember/core/ops.h"
#include "ember/parallel/distributed/backend/nccl_common.h"
#include "ember/parallel/distributed/backend/nccl_worker.h"
#include "ember/parallel/distributed/collective_tracker.h"

namespace ember::parallel {

using detail::NcclWork;

namespace {

using Clock = detail::Clock;

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

}  // namespace

Tensor NcclProcessGroup::Impl::staging(const Collective& c) {
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

void NcclProcessGroup::Impl::enqueue(const Collective& c, ncclComm_t nc, const Tensor& flat) {
  cudaStream_t s = stream.handle();
  switch (c.kind) {
    case CollectiveKind::AllReduce:
      for (const Tensor& t : c.tensors) {
        if (t.numel() == 0) continue;
        EMBER_NCCL_CHECK(
            ncclAllReduce(t.data_ptr(), t.data_ptr(), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(c.op), nc, s));
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
      EMBER_NCCL_CHECK(
          ncclAllReduce(barrier_buffer.data_ptr(), barrier_buffer.data_ptr(), 1, ncclFloat32, ncclSum, nc, s));
      return;
  }
}

void NcclProcessGroup::Impl::issue(Item& item) {
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
    std::this_thread::sleep_for(detail::kNcclSpinInterval);
    std::lock_guard<std::mutex> lock(comm->mutex);
    EMBER_CHECK(comm->comm != nullptr, "the group failed while NCCL was launching it");
    pending = detail::still_in_progress(comm->comm);
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

void NcclProcessGroup::Impl::start(Item item) {
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

void NcclProcessGroup::Impl::report(bool now) {
  if (unreported.seq == 0 || (!now && Clock::now() - last_report < detail::kReportInterval)) return;
  group->tracker().started(unreported);
  unreported.seq = 0;
  last_report = Clock::now();
}

void NcclProcessGroup::Impl::serve() {
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
        wake.wait_for(lock, detail::kWatchInterval, ready);
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

}  // namespace ember::parallel
