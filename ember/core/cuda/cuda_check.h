// Check macros for the CUDA runtime and for kernel launches. Internal to
// ember: only its .cpp/.cu files include this (it pulls in cuda_runtime_api.h).
//
// Contract:
// - EMBER_CUDA_CHECK(expr) throws ember::Error when expr is not cudaSuccess.
//   The message names the error, its description, the failing expression and
//   ember's file and line, plus what to do about it (e.g. that an illegal
//   address has lost the CUDA context and the process must restart). A
//   recoverable error is cleared first, so the process keeps working after
//   the throw.
// - EMBER_CUDA_CHECK_LAUNCH() goes right after a kernel launch. It catches
//   launch errors (bad grid, too much shared memory) at once. Errors of the
//   kernel's execution only surface at a later synchronizing call, far from
//   the op; with EMBER_LAUNCH_BLOCKING=1 or CUDA_LAUNCH_BLOCKING=1 in the
//   environment (read once) it also synchronizes the current stream, so the
//   error points at the op that caused it.
#pragma once

#include <cuda_runtime_api.h>

namespace ember::cuda::detail {

[[noreturn]] void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line);
// True when EMBER_LAUNCH_BLOCKING=1 or CUDA_LAUNCH_BLOCKING=1 (read once).
bool launch_blocking();
// The rare path of EMBER_CUDA_CHECK_LAUNCH: throws err, or synchronizes the
// current stream under launch blocking and throws what that reports.
void check_launch(cudaError_t err, const char* file, int line);

}  // namespace ember::cuda::detail

#define EMBER_CUDA_CHECK(expr)                                                             \
  do {                                                                                     \
    const cudaError_t ember_cuda_err_ = (expr);                                            \
    if (ember_cuda_err_ != cudaSuccess) [[unlikely]]                                       \
      ::ember::cuda::detail::throw_cuda_error(ember_cuda_err_, #expr, __FILE__, __LINE__); \
  } while (0)

#define EMBER_CUDA_CHECK_LAUNCH()                                                                \
  do {                                                                                           \
    const cudaError_t ember_cuda_err_ = cudaGetLastError();                                      \
    if (ember_cuda_err_ != cudaSuccess || ::ember::cuda::detail::launch_blocking()) [[unlikely]] \
      ::ember::cuda::detail::check_launch(ember_cuda_err_, __FILE__, __LINE__);                  \
  } while (0)
