// Out-of-range indices found on a GPU and reported by the host later,
// without waiting for the device (ember/kernels/cuda/index.cu's checks).
//
// Contract:
// - begin_index_check(device, op, dim, dim_size) is called on the host by
//   each CUDA index check before it launches. It gives the check an id and
//   keeps what the message needs (op, dim, dim_size, the calling thread's
//   IndexErrorContext) in a ring of the last kCheckRecords checks, and
//   returns the target the check kernel writes to: the device's record (in
//   mapped pinned host memory, so the host reads it without a copy) and the
//   device's claim word (device memory).
// - The first check on a device makes its record and claim word and waits
//   for the device once (cudaDeviceSynchronize); later checks never wait.
//   A CUDA graph capture makes them first (prepare_index_checks). A check
//   captured in a graph keeps its id, so each replay's bad index is
//   reported with the message of the captured call.
// - The check kernel that finds a bad index claims the device (atomicCAS of
//   the claim from 0 to its id). Only the winner writes: position and value
//   into the record, a system-wide fence, then the id. So the first bad
//   check to run on a device is the one reported. A check that finds a bad
//   index while the claim is held is dropped: when a second bad op was
//   queued before the first error is raised, its results (zeros where the
//   indices were bad) are not behind an error of their own.
// - raise_pending_index_error() throws, when some device's record holds an
//   id, the ember::Error the CPU would have thrown for that call (the same
//   text, ember/core/ops/index_kernels.h; if kCheckRecords or more checks began
//   since, the call's record is gone and the text names only the value),
//   followed by where and why it is raised late. It clears that device's
//   record, then releases the claim, so the process and the device keep
//   working. Nothing pending costs one load per device that ever ran a
//   check.
// - Who calls it: every CUDA index check (before and after its launch), and
//   the calls that wait for the device, after they waited: cuda::synchronize,
//   Stream::synchronize, Event::synchronize and device-to-host copies (so
//   item(), cpu() and to(kCPU)). The values computed from the reported
//   check's bad indices are therefore behind an error before they can reach
//   the host. Under EMBER_LAUNCH_BLOCKING=1 the check's launch waits, and the
//   op itself throws.
// - Meanwhile the gather and scatter-add kernels skip the bad indices
//   (gather writes zeros, scatter-add adds nothing), so no memory outside
//   the tensors is touched.
// Internal to ember (ember/kernels/cuda and ember/core/cuda).
#pragma once

#include <cstdint>

namespace ember::cuda {

// What a check kernel finds, in mapped pinned memory; id 0: nothing.
struct PendingIndexError {
  unsigned long long id;
  long long position;  // in the dense index
  long long value;
};

struct IndexCheckTarget {
  unsigned long long id = 0;
  PendingIndexError* record = nullptr;  // the device's view of the record
  unsigned long long* claim = nullptr;  // device memory, 0 while unclaimed
};

inline constexpr int kCheckRecords = 1024;

IndexCheckTarget begin_index_check(int device, const char* op, int64_t dim, int64_t dim_size);

// Makes the device's record and claim word now if no check has (the first
// check's wait cannot happen inside a CUDA graph capture).
void prepare_index_checks(int device);

void raise_pending_index_error();

}  // namespace ember::cuda
