// CUDA bias-epilogue GEMM (contract in core/ops/gemm_kernels.h): one
// cublasLtMatmul with CUBLASLT_EPILOGUE_BIAS (kernels/cuda/lt_matmul.h), so
// y = x W^T + b costs one pass over y; the bias is added to the accumulator
// before the single rounding into C. Declines where lt_matmul declines.
#include "core/cuda/device.h"
#include "core/ops/gemm_kernels.h"
#include "kernels/cuda/lt_matmul.h"

namespace ember::cuda {
namespace {

bool gemm_bias_kernel(const GemmArgs& g, const void* bias) {
  EMBER_CHECK(g.batch == 1 && g.beta == 0, "gemm_bias: takes one matrix with beta 0, but got a batch of "
                                               << g.batch << " with beta " << g.beta << " for " << gemm_str(g));
  DeviceGuard guard(g.device);
  try {
    return lt_matmul(g, bias);
  } catch (const OutOfMemoryError&) {
    throw;  // the workspace allocation's own message already says what to do
  } catch (const Error& e) {
    EMBER_FAIL("gemm_bias on cuda:" << g.device << " failed for " << gemm_str(g) << " plus a bias of " << g.n
                                    << " elements: " << e.what());
  }
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_bias_stub, DeviceType::CUDA, gemm_bias_kernel);

}  // namespace ember::cuda
