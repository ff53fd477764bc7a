// cuBLAS and cublasLt handles for the calling thread, bound to the current
// stream, with a workspace from ember's caching allocator. Internal to the
// CUDA kernels (pulls in cublas_v2.h and cublasLt.h).
//
// Contract:
// - One handle pair per (device, thread), made on the thread's first GEMM
//   on that device (cublasCreate costs milliseconds) and reused for every
//   later call. When the thread ends, its handles go back to a per-device
//   pool for the next thread rather than being destroyed; the pool lives as
//   long as the process, so no handle is destroyed during static
//   destruction, after the CUDA context may be gone.
// - blas_handle(device) binds the cuBLAS handle to the thread's current
//   stream of `device` (cublasSetStream) and then to a workspace made for
//   that stream (cublasSetWorkspace: cublasSetStream resets it), so cuBLAS
//   never cudaMallocs. Call it right before each cuBLAS call, with `device`
//   current (under a DeviceGuard), and never rebind the handle yourself.
// - The workspace of a (handle, stream) pair is taken once from the caching
//   allocator on that stream and kept: work on one stream runs in order, so
//   every call on that stream may reuse it. cublasLt calls on the same
//   stream share it (lt_handle gives its pointer and size).
// - Handles are made with CUBLAS_DEFAULT_MATH plus
//   CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION: split-K partial sums
//   of float16/bfloat16 GEMMs are kept in float, so a result is rounded to
//   16 bits once (the contract of ember/core/ops/gemm_kernels.h). Whether float32
//   may use TF32 is chosen per call through the compute type.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>

#include <cstddef>

namespace ember::cuda {

// The calling thread's cuBLAS handle for `device`, bound to its current
// stream and workspace.
cublasHandle_t blas_handle(int device);

struct LtContext {
  cublasLtHandle_t handle;
  void* workspace;  // for the current stream of the device; pass with every cublasLtMatmul
  size_t workspace_size;
};
// The calling thread's cublasLt handle for `device` and the workspace of its
// current stream (cublasLt takes both per call).
LtContext lt_handle(int device);

}  // namespace ember::cuda
