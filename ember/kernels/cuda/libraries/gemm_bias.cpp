// CUDA kernels of linear's fused GEMMs (contracts in
// ember/core/ops/gemm_kernels.h): one cublasLtMatmul each (ember/kernels/cuda/
// lt_matmul.h). The bias epilogue (CUBLASLT_EPILOGUE_BIAS) makes
// y = x W^T + b one pass over y, the bias added to the accumulator before
// the single rounding into C; the bias-gradient epilogue (BGRADB) gives
// dW = g^T x and db = the sums of g's rows in one GEMM, in float32 for
// 16-bit operands when asked; the GELU epilogue (GELU_AUX_BIAS) gives
// y = gelu_tanh(x W^T + b) and the pre-activation x W^T + b, which
// linear_gelu's backward saves, in one pass; the GELU-gradient epilogue
// (DGELU_BGRAD, or DGELU without a bias gradient) gives
// d_pre = (g W2) * gelu_tanh'(pre) and the first layer's bias gradient, the
// sums of d_pre's columns, for linear_gelu_linear's backward, reading the
// pre-activation GELU_AUX_BIAS wrote. Each declines where lt_matmul
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
                  << ") with a vector of " << (e.bias || e.gelu_input ? g.n : g.m) << " elements: " << ex.what());
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

bool gemm_dgelu_bgrad_kernel(const GemmArgs& g, const void* pre, int64_t ld_pre, void* bias_grad) {
  EMBER_CHECK(g.batch == 1 && g.alpha == 1 && g.beta == 0,
              "gemm_dgelu_bgrad: takes one matrix with alpha 1 and beta 0, but got a batch of "
                  << g.batch << " with alpha " << g.alpha << " and beta " << g.beta << " for " << gemm_str(g));
  // 16-bit types only: in float32 the epilogue's gelu' is further from the
  // composition's than float32 GEMMs are from each other (2.6e-5 relative
  // in dx at a depth of 512 on an H100, where two GEMMs differ by about
  // 5e-6), and float32 users get the composition's precision.
  if (g.dtype != DType::Float16 && g.dtype != DType::BFloat16) return false;
  LtEpilogue e{g.dtype};
  e.bias_grad = bias_grad;
  e.gelu_input = pre;
  e.ld_aux = ld_pre;
  return fused_gemm("gemm_dgelu_bgrad", g, e);
}

bool gemm_bias_grad_kernel(const GemmArgs& g, DType c_dtype, void* bias_grad) {
  check_gemm_bias_grad(g, c_dtype);
  return fused_gemm("gemm_bias_grad", g, LtEpilogue{c_dtype, nullptr, bias_grad});
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_bias_stub, DeviceType::CUDA, gemm_bias_kernel);
EMBER_REGISTER_KERNEL(gemm_bias_grad_stub, DeviceType::CUDA, gemm_bias_grad_kernel);
EMBER_REGISTER_KERNEL(gemm_bias_gelu_stub, DeviceType::CUDA, gemm_bias_gelu_kernel);
EMBER_REGISTER_KERNEL(gemm_dgelu_bgrad_stub, DeviceType::CUDA, gemm_dgelu_bgrad_kernel);

}  // namespace ember::cuda
