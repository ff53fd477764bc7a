// CUDA layer norm against the CPU kernel: odd and vector-friendly widths,
// every float dtype, with and without affine parameters, gradients.
#include <gtest/gtest.h>

#include "support/cuda_compare.h"

namespace ember {
namespace {

TEST(CudaLayerNorm, ForwardAndBackwardMatchCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (int64_t cols : {1, 7, 64, 1023, 1025, 8192}) {
      Generator g{uint64_t(cols)};
      Tensor x = (randn({5, cols}, DType::Float32, kCPU, &g) * 2.0 + 0.5).to(dt).set_requires_grad();
      Tensor w = randn({cols}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      Tensor b = randn({cols}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      testing::Tolerance tol = testing::tolerance_for(dt);
      if (dt == DType::Float32) tol = {1e-4, 1e-4};  // sums over up to 8192 terms in another order
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [cols](const TensorList& in) { return TensorList{layer_norm(in[0], {cols}, in[1], in[2])}; }, {x, w, b},
          /*grads=*/true, tol))
          << dtype_name(dt) << " cols=" << cols;
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [cols](const TensorList& in) { return TensorList{layer_norm(in[0], {cols})}; }, {x}, true, tol))
          << dtype_name(dt) << " cols=" << cols << " (no affine)";
    }
  }
}

}  // namespace
}  // namespace ember
