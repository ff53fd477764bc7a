// The cuBLAS data and compute types of ember's GEMM dtypes, shared by the
// cuBLAS and cublasLt kernels. Internal (pulls in library_types.h).
//
// Compute types: CUBLAS_COMPUTE_64F for float64; for float32
// CUBLAS_COMPUTE_32F (IEEE float, no TF32) unless allow_tf32() is on, then
// CUBLAS_COMPUTE_32F_FAST_TF32, read at each call; CUBLAS_COMPUTE_32F for
// float16 and bfloat16 (float accumulation, as in PyTorch). Scalars (alpha,
// beta) are double for CUBLAS_COMPUTE_64F and float otherwise.
#pragma once

#include <cublas_api.h>
#include <library_types.h>

#include "ember/core/dtype.h"
#include "ember/core/ops.h"

namespace ember::cuda {

inline cudaDataType_t blas_type(DType t) {
  switch (t) {
    case DType::Float32: return CUDA_R_32F;
    case DType::Float64: return CUDA_R_64F;
    case DType::Float16: return CUDA_R_16F;
    case DType::BFloat16: return CUDA_R_16BF;
    default: break;
  }
  EMBER_FAIL("gemm: cuBLAS has no GEMM for dtype " << dtype_name(t) << "; use a floating dtype");
}

inline cublasComputeType_t blas_compute_type(DType t) {
  if (t == DType::Float64) return CUBLAS_COMPUTE_64F;
  if (t == DType::Float32 && allow_tf32()) return CUBLAS_COMPUTE_32F_FAST_TF32;
  return CUBLAS_COMPUTE_32F;
}

// alpha and beta as the compute type of `t` wants them.
struct BlasScalars {
  explicit BlasScalars(DType t, double alpha, double beta)
      : is_double(t == DType::Float64), alpha64(alpha), beta64(beta), alpha32(float(alpha)), beta32(float(beta)) {}
  const void* alpha() const { return is_double ? static_cast<const void*>(&alpha64) : &alpha32; }
  const void* beta() const { return is_double ? static_cast<const void*>(&beta64) : &beta32; }

  bool is_double;
  double alpha64, beta64;
  float alpha32, beta32;
};

}  // namespace ember::cuda
