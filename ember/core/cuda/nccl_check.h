// EMBER_NCCL_CHECK(expr): throws ember::Error when an NCCL call returns
// anything but ncclSuccess (ncclInProgress included), with the result,
// NCCL's last error text, the expression, ember's file and line, and the
// advice to rerun with NCCL_DEBUG=INFO.
// EMBER_NCCL_CHECK_ASYNC(expr): the same for the calls of a non-blocking
// communicator (ncclConfig_t::blocking = 0, as parallel/'s nccl backend
// makes them), which may return ncclInProgress: the call then goes on in
// the background, and ncclCommGetAsyncError must be polled until it stops
// saying ncclInProgress before the next call on that communicator. It is
// an expression: true for ncclInProgress, false for ncclSuccess.
// Internal to ember and kept apart from cuda_check.h, so nccl.h is only
// compiled where NCCL is used.
#pragma once

#include <nccl.h>

namespace ember::cuda::detail {
[[noreturn]] void throw_nccl_error(ncclResult_t result, const char* expr, const char* file, int line);

inline bool nccl_in_progress(ncclResult_t result, const char* expr, const char* file, int line) {
  if (result == ncclSuccess) [[likely]]
    return false;
  if (result == ncclInProgress) return true;
  throw_nccl_error(result, expr, file, line);
}
}  // namespace ember::cuda::detail

#define EMBER_NCCL_CHECK(expr)                                                                \
  do {                                                                                        \
    const ncclResult_t ember_nccl_result_ = (expr);                                           \
    if (ember_nccl_result_ != ncclSuccess) [[unlikely]]                                       \
      ::ember::cuda::detail::throw_nccl_error(ember_nccl_result_, #expr, __FILE__, __LINE__); \
  } while (0)

#define EMBER_NCCL_CHECK_ASYNC(expr) ::ember::cuda::detail::nccl_in_progress((expr), #expr, __FILE__, __LINE__)
