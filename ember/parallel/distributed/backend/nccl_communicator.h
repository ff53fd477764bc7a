// The NCCL communicator of one nccl process group: made through the group's
// store, polled, finalized or aborted, each step bounded by a timeout.
// Internal to the nccl backend (it includes nccl.h).
//
// Why non-blocking communicators (ncclConfig_t::blocking = 0): a blocking
// NCCL call may wait inside NCCL for the peers (creation, and a collective
// that first connects to them), where no timeout reaches it. A non-blocking
// call returns at once, possibly with ncclInProgress, and the caller polls
// ncclCommGetAsyncError (still_in_progress) against the group's timeout.
// Nothing else may be called on the communicator while that poll says
// ncclInProgress; one worker per group, which alone launches, keeps that rule.
//
// Contract:
// - connect_communicator() makes the communicator of `rank` of `size` on
//   `device`: rank 0's unique id travels through the store, then
//   ncclCommInitRankConfig runs until done or `timeout`; a timeout aborts it
//   and throws naming the ranks that never started (`where` names the group
//   in every error).
// - Communicator is shared by the group's worker and its works (which may
//   outlive the group); every NCCL call on it holds `mutex`. abort() and
//   close() never wait longer than the timeout they are given
//   (ncclCommAbort can hang in some NCCL versions; it is then left running
//   in the background). close() never throws.
#pragma once

#include <nccl.h>

#include <chrono>
#include <mutex>
#include <optional>
#include <string>

#include "ember/parallel/distributed/store/store.h"

namespace ember::parallel::detail {

using Clock = std::chrono::steady_clock;

// How long a blocking wait() or a poll of ncclInProgress sleeps between looks.
inline constexpr auto kNcclSpinInterval = std::chrono::microseconds(50);

// NCCL's asynchronous error `state` of `comm`, in words.
std::string async_error_text(ncclComm_t comm, ncclResult_t state);

// Polls a non-blocking communicator: true while its last call goes on;
// throws its asynchronous error.
bool still_in_progress(ncclComm_t comm);

// Aborts a communicator, waiting at most `limit` for ncclCommAbort, which
// can hang itself in some NCCL versions (NVIDIA/nccl#829); it is then left
// to finish in the background. Returns what went wrong, or "".
std::string abort_within(ncclComm_t comm, std::chrono::milliseconds limit);

ncclComm_t connect_communicator(Store& store, int rank, int size, int device, const std::string& name,
                                std::chrono::milliseconds timeout, const std::string& where);

struct Communicator {
  std::mutex mutex;
  ncclComm_t comm = nullptr;  // null once finalized or aborted
  bool failed = false;        // aborted after a failure: no work on it may count as a success

  // NCCL's asynchronous error, "" when there is none. Call with `mutex` held.
  std::string error_locked();
  // Whether the work that ended on the GPU succeeded: false when NCCL has an
  // error or the group failed; nullopt when another thread holds the
  // communicator (never blocks).
  std::optional<bool> healthy();
  // Marks the communicator failed and aborts it (which ends NCCL's kernels
  // on the GPU), waiting at most `limit`; returns what went wrong, or "".
  std::string abort(std::chrono::milliseconds limit);
  // Finalizes and destroys the communicator, giving up after `timeout` (a
  // peer gone, say) and aborting instead.
  void close(std::chrono::milliseconds timeout) noexcept;
};

}  // namespace ember::parallel::detail
