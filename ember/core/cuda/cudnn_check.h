// EMBER_CUDNN_CHECK(expr): throws ember::Error when a cuDNN call does not
// return CUDNN_STATUS_SUCCESS, with the status, cuDNN's own account of the
// last error (cudnnGetLastErrorString), the expression and ember's file and
// line. Internal to ember and kept apart from cuda_check.h, so cudnn.h is
// only compiled where cuDNN is used.
#pragma once

#include <cudnn.h>

namespace ember::cuda::detail {
[[noreturn]] void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file, int line);
}  // namespace ember::cuda::detail

#define EMBER_CUDNN_CHECK(expr)                                                                 \
  do {                                                                                          \
    const cudnnStatus_t ember_cudnn_status_ = (expr);                                           \
    if (ember_cudnn_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                               \
      ::ember::cuda::detail::throw_cudnn_error(ember_cudnn_status_, #expr, __FILE__, __LINE__); \
  } while (0)
