// EMBER_CUBLAS_CHECK(expr): throws ember::Error when a cuBLAS call does not
// return CUBLAS_STATUS_SUCCESS, with the status name, its description, the
// expression, ember's file and line and a hint where one helps. Internal to
// ember (pulls in cublas_v2.h).
#pragma once

#include <cublas_v2.h>

namespace ember::cuda::detail {
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line);
}  // namespace ember::cuda::detail

#define EMBER_CUBLAS_CHECK(expr)                                                                  \
  do {                                                                                            \
    const cublasStatus_t ember_cublas_status_ = (expr);                                           \
    if (ember_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                               \
      ::ember::cuda::detail::throw_cublas_error(ember_cublas_status_, #expr, __FILE__, __LINE__); \
  } while (0)
