// EMBER_NCCL_CHECK(expr): throws ember::Error when an NCCL call returns
// anything but ncclSuccess (ncclInProgress included: ember uses blocking
// communicators), with the result, NCCL's last error text, the expression,
// ember's file and line, and the advice to rerun with NCCL_DEBUG=INFO.
// Internal to ember and kept apart from cuda_check.h, so nccl.h is only
// compiled where NCCL is used.
#pragma once

#include <nccl.h>

namespace ember::cuda::detail {
[[noreturn]] void throw_nccl_error(ncclResult_t result, const char* expr, const char* file, int line);
}  // namespace ember::cuda::detail

#define EMBER_NCCL_CHECK(expr)                                                             \
  do {                                                                                     \
    const ncclResult_t ember_nccl_result_ = (expr);                                        \
    if (ember_nccl_result_ != ncclSuccess) [[unlikely]]                                    \
      ::ember::cuda::detail::throw_nccl_error(ember_nccl_result_, #expr, __FILE__, __LINE__); \
  } while (0)
