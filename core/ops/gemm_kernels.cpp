// The GEMM stubs and the description of a GEMM problem that kernel errors
// use (see core/ops/gemm_kernels.h).
#include "core/ops/gemm_kernels.h"

#include <sstream>

namespace ember {

KernelStub<GemmKernelFn> gemm_stub("gemm");
KernelStub<GemmBiasKernelFn> gemm_bias_stub("gemm_bias");

std::string gemm_str(const GemmArgs& g) {
  std::ostringstream s;
  s << dtype_name(g.dtype) << " C [";
  if (g.batch != 1) s << g.batch << " x ";
  s << g.m << " x " << g.n << "] = op(A) [" << g.m << " x " << g.k << "] * op(B) [" << g.k << " x " << g.n
    << "] (A" << (g.trans_a ? "^T" : "") << " lda " << g.lda << " batch stride " << g.stride_a << ", B"
    << (g.trans_b ? "^T" : "") << " ldb " << g.ldb << " batch stride " << g.stride_b << ", C ldc " << g.ldc
    << " batch stride " << g.stride_c << ")";
  return s.str();
}

}  // namespace ember
