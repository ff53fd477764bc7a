// One GEMM on cublasLt with an optional bias, bias-gradient or GELU
// epilogue, and the choice of its algorithm per problem. Internal to the
// CUDA kernels: gemm_stub's and the fused GEMM stubs' CUDA kernels call it.
//
// Contract:
// - lt_matmul(g, e) computes, for one matrix (g.batch == 1),
//     C = alpha * op(A) * op(B) + beta * C
//   exactly as gemm_stub's contract says (ember/core/ops/gemm_kernels.h), with C of
//   e.c_dtype (g.dtype, or float32 for float16 and bfloat16 A and B) and at
//   most one epilogue: e.bias, a dense vector of n elements of e.c_dtype
//   added in every row of C to the accumulator before the single rounding
//   (cublasLt's BIAS), or e.bias_grad, a dense vector of m elements of
//   e.c_dtype that receives the row sums of op(A) (BGRADB); or e.bias with
//   e.gelu_aux (GELU_AUX_BIAS): C = gelu_tanh(acc + bias) and gelu_aux
//   (m x n of e.c_dtype, leading dim e.ld_aux, a multiple of 8 as cublasLt
//   requires, 16-byte aligned) = acc + bias, both rounded once; or
//   e.gelu_input, laid out as gelu_aux, with C of g.dtype (DGELU):
//   C = acc * gelu_tanh'(gelu_input), and with it optionally e.bias_grad,
//   here a dense vector of n elements that receives the sums of C's columns
//   (DGELU_BGRAD: the bias gradient of the layer gelu_input came from),
//   both rounded once. It runs on the current stream of g.device (the
//   caller holds a DeviceGuard for it) and returns true; or it declines,
//   returns false and writes nothing: for
//   non-floating dtypes, the shapes PyTorch also keeps off cublasLt (a dim
//   of 1, or one of 65535 * 32 or more), leading dims narrower than the rows
//   they hold (the caller's cuBLAS fallback names those in its error), and
//   when cublasLt offers no algorithm.
// - The algorithm depends only on the problem (device, dtypes, compute type,
//   transposes, sizes, leading dims, pointer alignments, epilogue) and is
//   chosen once per problem, then kept for the life of the process, so that
//   every later call (and every replay of a graph that captured one) runs
//   the same kernel and gives the same bits. Its cublasLt descriptors are
//   made once per (problem, thread) and kept too. With gemm_autotune() on (the
//   default) and the stream not capturing a graph, the first call times each
//   of cublasLt's first kCandidates heuristic answers
//   (ember/kernels/cuda/libraries/fastest_candidate.h, writing a scratch copy of C when beta
//   reads it) and keeps the fastest: that call waits for the device.
//   Otherwise, or when no candidate ran, the heuristic's
//   first answer is kept.
// - A product of 2^28 multiply-adds or more whose operands' rows do not
//   start on 16-byte boundaries (a pointer or a leading dim that does not),
//   or whose n or k is not a multiple of 16 bytes' elements, runs on
//   copies from the caching allocator on the current stream: A and B
//   zero-padded in k (B in n too, unless a bias or GELU epilogue fixes n)
//   with aligned rows, and C computed in an aligned buffer and copied out.
//   cublasLt has only its slow align-1 kernels for the originals. When the
//   copies do not fit in memory, or would make n or k too large for
//   cublasLt, the product runs on the operands as they are.
// - For float16 and bfloat16 operands only split-K schemes that reduce in
//   the compute type (float) are allowed, so the result is rounded once.
#pragma once

#include "ember/core/ops/gemm_kernels.h"

namespace ember::cuda {

inline constexpr int kCandidates = 8;

// What C is and what the GEMM's epilogue adds (at most one of bias and
// bias_grad; gelu_aux only with bias; gelu_input without bias).
struct LtEpilogue {
  DType c_dtype;
  const void* bias = nullptr;
  void* bias_grad = nullptr;
  void* gelu_aux = nullptr;          // GELU_AUX_BIAS writes the pre-activation here
  int64_t ld_aux = 0;                // gelu_aux's or gelu_input's leading dim
  const void* gelu_input = nullptr;  // DGELU reads the pre-activation here
};

bool lt_matmul(const GemmArgs& g, const LtEpilogue& e);

}  // namespace ember::cuda
