// GEMM: the strided-batched matrix multiply every matmul-shaped op
// dispatches to, and its epilogue variants for linear, linear_gelu and
// linear_gelu_linear; ember/kernels/cpu and ember/kernels/cuda register one
// implementation of each per device type.
//
// Contract, in row-major terms (strides and leading dims in elements):
//
//   for b in [0, batch):  C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b]
//
// - X[b] starts at x + b * stride_x. op(A) is m x k, op(B) is k x n, C is
//   m x n. A matrix is stored row-major; its leading dim ld is the distance
//   between consecutive rows of the *stored* matrix:
//     A without trans_a: stored m x k, op(A)(i, p) = a[i * lda + p]
//     A with trans_a:    stored k x m, op(A)(i, p) = a[p * lda + i]
//   and likewise B (stored k x n, or n x k with trans_b). C is never
//   transposed: C(i, j) = c[i * ldc + j].
// - Each ld is >= max(1, columns of its stored matrix): lda >= k (m with
//   trans_a), ldb >= n (k with trans_b), ldc >= n.
// - m, n, k and batch are >= 1: the front-end handles empty products itself.
// - stride_a or stride_b may be 0, which broadcasts one matrix to every
//   batch. C's batches do not overlap one another, A or B.
// - With beta == 0, C is write-only: what it held (NaN included) never
//   reaches the result, as in BLAS.
// - `device` is the CUDA device index of A, B and C (0 on the CPU); a CUDA
//   kernel runs under a DeviceGuard for it, on its current stream.
// - A, B and C share `dtype`. alpha and beta are given as double and
//   converted to the compute type. float64 computes in double; float32 in
//   float (on CUDA with TF32 tensor cores only when allow_tf32() of
//   ember/core/ops.h is on, read at each call); float16 and bfloat16 accumulate in
//   float and round once into C; int32 and int64 compute in their own type
//   (no widening, as in PyTorch). bool is not a GEMM dtype.
//
// Mapping onto cuBLAS, which is column-major. A row-major matrix with
// leading dim ld is, read column-major with the same ld, its transpose. So
// the row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T:
// swap the operands and m with n, and keep each operand's own flag:
//
//   cublasGemmStridedBatchedEx_64(handle,
//       trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
//       n, m, k, &alpha, b, type, ldb, stride_b, a, type, lda, stride_a,
//       &beta, c, type, ldc, stride_c, batch, compute, CUBLAS_GEMM_DEFAULT);
//
// with compute CUBLAS_COMPUTE_64F (alpha, beta as double), CUBLAS_COMPUTE_32F
// or CUBLAS_COMPUTE_32F_FAST_TF32 for float32, and CUBLAS_COMPUTE_32F for
// float16/bfloat16 (alpha, beta as float). The ld rule above is exactly
// cuBLAS's ld >= max(1, rows) of the column-major view. cublasLt takes the
// same swap: its A is our b (op from trans_b), its B our a (op from
// trans_a), its C and D our c; each matrix layout is the stored row-major
// shape reversed (rows = stored columns) with our ld, batch count and batch
// stride. cuBLAS has no int32/int64 GEMM, so the integer dtypes need a CUDA
// kernel of their own that honours this same contract.
#pragma once

#include <cstdint>
#include <string>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

struct GemmArgs {
  int device = 0;
  DType dtype = DType::Float32;
  bool trans_a = false, trans_b = false;
  int64_t m = 1, n = 1, k = 1;
  int64_t batch = 1;
  double alpha = 1, beta = 0;
  const void* a = nullptr;
  int64_t lda = 1, stride_a = 0;
  const void* b = nullptr;
  int64_t ldb = 1, stride_b = 0;
  void* c = nullptr;
  int64_t ldc = 1, stride_c = 0;
};

using GemmKernelFn = void(const GemmArgs& args);
extern KernelStub<GemmKernelFn> gemm_stub;

// The bias-epilogue GEMM (linear's fused path): for one matrix (batch 1),
//
//   C(i, j) = alpha * (op(A) * op(B))(i, j) + bias[j]
//
// with everything as for gemm_stub except that beta must be 0 (C is
// write-only) and batch 1; bias is a dense vector of n elements of `dtype`.
// The 16-bit float types add the bias to the float accumulator and round
// once. A kernel may decline a problem it has no fast algorithm for (cublasLt
// finds none for the shapes, alignment or dtype): it then returns false
// having written nothing, and the caller computes the product unfused. The
// CPU kernel never declines.
using GemmBiasKernelFn = bool(const GemmArgs& args, const void* bias);
extern KernelStub<GemmBiasKernelFn> gemm_bias_stub;

// The bias-and-GELU-epilogue GEMM (linear_gelu's fused path): for one
// matrix (batch 1), with everything as for gemm_bias_stub,
//
//   pre(i, j) = alpha * (op(A) * op(B))(i, j) + bias[j]
//   C(i, j)   = gelu_tanh(pre(i, j))
//
// gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))), the
// "tanh" form of ember::gelu. pre is of `dtype` with leading dim ld_pre (>=
// n); it is the input linear_gelu's backward saves. Both are computed from
// the float accumulator for the 16-bit types and rounded once. A kernel may
// decline as gemm_bias_stub's does (returns false having written nothing).
// Only CUDA registers one (cublasLt's GELU_AUX_BIAS epilogue; it declines
// float64); callers test has() and compose linear and gelu otherwise.
using GemmBiasGeluKernelFn = bool(const GemmArgs& args, const void* bias, void* pre, int64_t ld_pre);
extern KernelStub<GemmBiasGeluKernelFn> gemm_bias_gelu_stub;

// The GELU-gradient-epilogue GEMM (linear_gelu_linear's backward: the
// gradient of the pre-activation from the second layer's output gradient):
// for one matrix (batch 1), alpha 1 and beta 0,
//
//   C(i, j) = (op(A) * op(B))(i, j) * gelu_tanh'(pre(i, j))
//   and, when bias_grad is not null,
//   bias_grad[j] = sum_i C(i, j)       for j in [0, n)
//
// gelu_tanh' is the derivative of gemm_bias_gelu's gelu_tanh; pre (m x n of
// `dtype`, leading dim ld_pre >= n) is the pre-activation gemm_bias_gelu
// wrote. C and bias_grad (a dense vector of n elements: the sums over C's
// rows, the first layer's bias gradient) are of `dtype`; the 16-bit types
// compute from the float accumulator and round once. A kernel may decline as
// gemm_bias_stub's does (returns false having written nothing). Only CUDA
// registers one (cublasLt's DGELU_BGRAD epilogue, DGELU without bias_grad;
// it takes float16 and bfloat16 only); callers test has() and compose
// gelu_backward and the product otherwise.
using GemmGeluGradKernelFn = bool(const GemmArgs& args, const void* pre, int64_t ld_pre, void* bias_grad);
extern KernelStub<GemmGeluGradKernelFn> gemm_dgelu_bgrad_stub;

// The bias-gradient-epilogue GEMM (linear's weight and bias gradients in one
// pass): for one matrix (batch 1), alpha 1 and beta 0,
//
//   C = op(A) * op(B)                and, when bias_grad is not null,
//   bias_grad[i] = sum_p op(A)(i, p)  for i in [0, m)
//
// A and B are of `dtype`; C and bias_grad (a dense vector of m elements) are
// of c_dtype, which is `dtype`, or float32 when `dtype` is float16 or
// bfloat16 (the float32 gradients of float32 weights that autocast
// multiplies in half precision). Products and sums accumulate in the compute
// type (float for the 16-bit types) and are rounded once into c_dtype. A
// kernel may decline as gemm_bias_stub's does (returns false having written
// nothing); the CPU kernel never declines.
using GemmBiasGradKernelFn = bool(const GemmArgs& args, DType c_dtype, void* bias_grad);
extern KernelStub<GemmBiasGradKernelFn> gemm_bias_grad_stub;
// True when gemm_bias_grad takes operands of `dtype` into a C of c_dtype
// (the pairings above); a caller with another pairing computes otherwise.
bool gemm_bias_grad_pairs(DType dtype, DType c_dtype);
// The checks each gemm_bias_grad kernel makes first (an ember::Error naming
// the problem when the arguments break the contract above).
void check_gemm_bias_grad(const GemmArgs& args, DType c_dtype);

// "float16 C [3 x 7 x 5] = op(A) [7 x 33] * op(B) [33 x 5] (A^T lda 7 batch
// stride 0, B ldb 5 batch stride 165, C ldc 5 batch stride 35)": the problem,
// for the errors of kernels that fail on it.
std::string gemm_str(const GemmArgs& args);

}  // namespace ember
