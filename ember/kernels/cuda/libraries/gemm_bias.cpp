// CUDA kernels of linear's fused GEMMs (contracts in
// ember/core/ops/gemm_kernels.h): one cublasLtMatmul each (ember/kernels/cuda/
// lt_matmul.h). The bias epilogue (CUBLASLT_EPILOGUE_BIAS) makes
// y = x W^T + b one pass over y, the bias added to the accumulator before
// the single rounding into C; the bias-gradient epilogue (BGRADB) gives
// dW = g^T x and db = the sums of g's rows in one GEMM, in float32 for
// 16-bit operands when asked; the GELU epilogue (GELU_AUX_BIAS) gives
// y = gelu_tanh(x W^T + b) and the pre-activation x W^T + b, which
// linear_gelu's backward saves, in one pass. Each declines where lt_matmul
// declines.
#include "ember/core/cuda/device.h"
#include "ember/core/ops/gemm_kernels.h"
#include "ember/kernels/cuda/libraries/lt_matmul.h"

namespace ember::cuda {
namespace {

// lt_matmul(g, e) with its errors naming the op and the problem.
bool fused_gemm(const char* op, const GemmArgs& g, const LtEpilogue& e) {
  DeviceGuard guard(g.device);
  try {
    return lt_matmul(g, e);
  } catch (const OutOfMemoryError&) {
    throw;  // the workspace allocation's own message already says what to do
  } catch (const Error& ex) {
    EMBER_FAIL(op << " on cuda:" << g.device << " failed for " << gemm_str(g) << " (C of " << dtype_name(e.c_dtype)
                  << ") with a vector of " << (e.bias ? g.n : g.m) << " elements: " << ex.what());
  }
}

bool gemm_bias_kernel(const GemmArgs& g, const void* bias) {
  EMBER_CHECK(g.batch == 1 && g.beta == 0, "gemm_bias: takes one matrix with beta 0, but got a batch of "
                                               << g.batch << " with beta " << g.beta << " for " << gemm_str(g));
  return fused_gemm("gemm_bias", g, LtEpilogue{g.dtype, bias});
}

bool gemm_bias_gelu_kernel(const GemmArgs& g, const void* bias, void* pre, int64_t ld_pre) {
  EMBER_CHECK(g.batch == 1 && g.beta == 0, "gemm_bias_gelu: takes one matrix with beta 0, but got a batch of "
                                               << g.batch << " with beta " << g.beta << " for " << gemm_str(g));
  // float64 is not asked of cublasLt: ember does not rely on its GELU
  // epilogue for double, and linear_gelu composes then.
  if (g.dtype == DType::Float64) return false;
  return fused_gemm("gemm_bias_gelu", g, LtEpilogue{g.dtype, bias, nullptr, pre, ld_pre});
}

bool gemm_bias_grad_kernel(const GemmArgs& g, DType c_dtype, void* bias_grad) {
  check_gemm_bias_grad(g, c_dtype);
  return fused_gemm("gemm_bias_grad", g, LtEpilogue{c_dtype, nullptr, bias_grad});
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_bias_stub, DeviceType::CUDA, gemm_bias_kernel);
EMBER_REGISTER_KERNEL(gemm_bias_grad_stub, DeviceType::CUDA, gemm_bias_grad_kernel);
EMBER_REGISTER_KERNEL(gemm_bias_gelu_stub, DeviceType::CUDA, gemm_bias_gelu_kernel);

}  // namespace ember::cuda
