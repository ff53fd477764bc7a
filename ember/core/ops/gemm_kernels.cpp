// The GEMM stubs and the description of a GEMM problem that kernel errors
// use (see ember/core/ops/gemm_kernels.h).
#include "ember/core/ops/gemm_kernels.h"

#include <sstream>

namespace ember {

KernelStub<GemmKernelFn> gemm_stub("gemm");
KernelStub<GemmBiasKernelFn> gemm_bias_stub("gemm_bias");
KernelStub<GemmBiasGradKernelFn> gemm_bias_grad_stub("gemm_bias_grad");
KernelStub<GemmBiasGeluKernelFn> gemm_bias_gelu_stub("gemm_bias_gelu");
KernelStub<GemmGeluGradKernelFn> gemm_dgelu_bgrad_stub("gemm_dgelu_bgrad");

bool gemm_bias_grad_pairs(DType dtype, DType c_dtype) {
  const bool half = dtype == DType::Float16 || dtype == DType::BFloat16;
  return is_floating(dtype) && (c_dtype == dtype || (half && c_dtype == DType::Float32));
}

void check_gemm_bias_grad(const GemmArgs& g, DType c_dtype) {
  EMBER_CHECK(g.batch == 1 && g.alpha == 1 && g.beta == 0,
              "gemm_bias_grad: takes one matrix with alpha 1 and beta 0, but got a batch of "
                  << g.batch << " with alpha " << g.alpha << " and beta " << g.beta << " for " << gemm_str(g));
  EMBER_CHECK(gemm_bias_grad_pairs(g.dtype, c_dtype),
              "gemm_bias_grad: C of " << dtype_name(c_dtype) << " from operands of " << dtype_name(g.dtype)
                                      << "; the operands must be floating and C of their dtype, or float32 for "
                                         "float16 and bfloat16, for "
                                      << gemm_str(g));
}

std::string gemm_str(const GemmArgs& g) {
  std::ostringstream s;
  s << dtype_name(g.dtype) << " C [";
  if (g.batch != 1) s << g.batch << " x ";
  s << g.m << " x " << g.n << "] = op(A) [" << g.m << " x " << g.k << "] * op(B) [" << g.k << " x " << g.n << "] (A"
    << (g.trans_a ? "^T" : "") << " lda " << g.lda << " batch stride " << g.stride_a << ", B" << (g.trans_b ? "^T" : "")
    << " ldb " << g.ldb << " batch stride " << g.stride_b << ", C ldc " << g.ldc << " batch stride " << g.stride_c
    << ")";
  return s.str();
}

}  // namespace ember
