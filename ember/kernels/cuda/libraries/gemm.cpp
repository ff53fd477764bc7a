// CUDA GEMM (contract and the row-major -> column-major mapping in
// ember/core/ops/gemm_kernels.h).
//
// float32, float64, float16 and bfloat16 go to cuBLAS with the operands
// swapped (C^T = op(B)^T op(A)^T in cuBLAS's column-major view), on the
// calling thread's cached handle bound to the current stream and a caching-
// allocator workspace (ember/kernels/cuda/libraries/cublas_handle.h): no allocation, copy or
// host synchronization per call. The compute types (TF32 only when
// allow_tf32() is on) are those of ember/kernels/cuda/libraries/blas_types.h.
//
// One matrix goes to cublasLt (ember/kernels/cuda/libraries/lt_matmul.h: the algorithm
// chosen once per problem, timed among cublasLt's candidates when
// gemm_autotune() is on), or to cublasGemmEx where cublasLt declines; a
// batch goes to cublasGemmStridedBatchedEx (a batch stride of 0 broadcasts
// an operand). A problem with a size or leading dim past INT_MAX takes
// cublasGemmStridedBatchedEx_64. int32 and int64, which cuBLAS lacks,
// take ember's tiled kernel (ember/kernels/cuda/integer_gemm.cu).
#include <climits>

#include "ember/core/cuda/cublas_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/ops/gemm_kernels.h"
#include "ember/kernels/cuda/integer_gemm.h"
#include "ember/kernels/cuda/libraries/blas_types.h"
#include "ember/kernels/cuda/libraries/cublas_handle.h"
#include "ember/kernels/cuda/libraries/lt_matmul.h"

namespace ember::cuda {
namespace {

bool fits_int(const GemmArgs& g) {
  for (int64_t v : {g.m, g.n, g.k, g.lda, g.ldb, g.ldc, g.batch}) {
    if (v > INT_MAX) return false;
  }
  return true;
}

void cublas_gemm(const GemmArgs& g) {
  const cudaDataType_t type = blas_type(g.dtype);
  const cublasComputeType_t compute = blas_compute_type(g.dtype);
  const BlasScalars scalars(g.dtype, g.alpha, g.beta);
  const void* alpha = scalars.alpha();
  const void* beta = scalars.beta();
  // cuBLAS's A is our B and its B our A (see the header of gemm_kernels.h).
  const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;

  DeviceGuard guard(g.device);
  try {
    if (lt_matmul(g, LtEpilogue{g.dtype})) return;
    cublasHandle_t handle = blas_handle(g.device);
    if (fits_int(g) && g.batch == 1) {
      EMBER_CUBLAS_CHECK(cublasGemmEx(handle, op_b, op_a, int(g.n), int(g.m), int(g.k), alpha, g.b, type, int(g.ldb),
                                      g.a, type, int(g.lda), beta, g.c, type, int(g.ldc), compute,
                                      CUBLAS_GEMM_DEFAULT));
    } else if (fits_int(g)) {
      EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
          handle, op_b, op_a, int(g.n), int(g.m), int(g.k), alpha, g.b, type, int(g.ldb), g.stride_b, g.a, type,
          int(g.lda), g.stride_a, beta, g.c, type, int(g.ldc), g.stride_c, int(g.batch), compute, CUBLAS_GEMM_DEFAULT));
    } else {
      EMBER_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(handle, op_b, op_a, g.n, g.m, g.k, alpha, g.b, type, g.ldb,
                                                       g.stride_b, g.a, type, g.lda, g.stride_a, beta, g.c, type, g.ldc,
                                                       g.stride_c, g.batch, compute, CUBLAS_GEMM_DEFAULT));
    }
  } catch (const OutOfMemoryError&) {
    throw;  // the workspace allocation's own message already says what to do
  } catch (const Error& e) {
    EMBER_FAIL("gemm on cuda:" << g.device << " failed for " << gemm_str(g) << ": " << e.what());
  }
}

void gemm_kernel(const GemmArgs& g) {
  switch (g.dtype) {
    case DType::Float32:
    case DType::Float64:
    case DType::Float16:
    case DType::BFloat16: return cublas_gemm(g);
    case DType::Int32:
    case DType::Int64: return integer_gemm(g);
    case DType::Bool: break;
  }
  EMBER_FAIL("gemm: dtype " << dtype_name(g.dtype)
                            << " has no GEMM; use a floating or integer dtype (convert with .to(dtype))");
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_stub, DeviceType::CUDA, gemm_kernel);

}  // namespace ember::cuda
