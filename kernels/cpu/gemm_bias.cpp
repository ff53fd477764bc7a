// CPU bias-epilogue GEMM (see core/ops/gemm_kernels.h for the contract).
//
// Each row of C is first set to the bias, then the CPU GEMM adds the product
// with beta = 1. The 16-bit float GEMM adds beta * C to its float
// accumulator before it rounds, so the bias is added in float and the
// result rounded once, as cublasLt's epilogue does.
#include <cstring>

#include "core/ops/gemm_kernels.h"

namespace ember::cpu {
namespace {

bool gemm_bias_kernel(const GemmArgs& g, const void* bias) {
  EMBER_CHECK(g.batch == 1 && g.beta == 0, "gemm_bias: takes one matrix with beta 0, but got a batch of "
                                               << g.batch << " with beta " << g.beta << " for " << gemm_str(g));
  const size_t row_bytes = size_t(g.n) * dtype_size(g.dtype);
  char* c = static_cast<char*>(g.c);
  for (int64_t i = 0; i < g.m; ++i) std::memcpy(c + size_t(i * g.ldc) * dtype_size(g.dtype), bias, row_bytes);
  GemmArgs with_c = g;
  with_c.beta = 1;
  gemm_stub(DeviceType::CPU)(with_c);
  return true;
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_bias_stub, DeviceType::CPU, gemm_bias_kernel);

}  // namespace ember::cpu
