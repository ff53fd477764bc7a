// CUDA layer norm against the CPU kernel: odd and vector-friendly widths
// (rows kept in registers up to 2048 vectors, two passes beyond), every
// float dtype, with and without affine parameters, gradients, many rows per
// block in the one-pass backward, rows that start off 16-byte alignment;
// and add_layer_norm's fused kernels against the CPU's composition.
#include <gtest/gtest.h>

#include <string>
#include <utility>

#include "support/cuda_compare.h"

namespace ember {
namespace {

TEST(CudaLayerNorm, ForwardAndBackwardMatchCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (int64_t cols : {1, 7, 64, 1023, 1025, 4104, 8192, 16384}) {
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

// Many rows per block: the one-pass backward (dx, dweight and dbias from one
// read of the rows: a warp per row for rows of up to 96 bytes of sums per
// lane, 768 columns (384 in float64), a block per row for up to 4 vectors
// per thread) walks several rows in each
// block and sums the blocks' parameter partials; a weight without a bias
// asks for dweight alone. Widths of 1, 2 and 6 vectors per lane (128, 200,
// 768 float32; 768 is 3 vectors in bfloat16), of 1, 2 and 4 per block thread, and one past them (the
// two-kernel path).
TEST(CudaLayerNorm, ManyRowsMatchCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::BFloat16}) {
    for (int64_t cols : {128, 200, 768, 1000, 2048, 4104}) {
      Generator g{uint64_t(cols) + 7};
      Tensor x = (randn({1031, cols}, DType::Float32, kCPU, &g) * 2.0 + 0.5).to(dt).set_requires_grad();
      Tensor w = randn({cols}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      Tensor b = randn({cols}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      testing::Tolerance tol = testing::tolerance_for(dt);
      if (dt == DType::Float32) tol = {1e-4, 1e-4};  // parameter sums over 1031 rows in another order
      if (dt == DType::BFloat16) tol = {2e-2, 2e-2};
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [cols](const TensorList& in) { return TensorList{layer_norm(in[0], {cols}, in[1], in[2])}; }, {x, w, b},
          /*grads=*/true, tol))
          << dtype_name(dt) << " cols=" << cols;
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [cols](const TensorList& in) { return TensorList{layer_norm(in[0], {cols}, in[1])}; }, {x, w}, true, tol))
          << dtype_name(dt) << " cols=" << cols << " (weight only)";
    }
  }
}

// add_layer_norm's fused kernels against the CPU's composition: x and delta
// of one dtype, and bfloat16 and float16 deltas beside a float32 x; widths
// the one-pass backward takes and one it declines (4104 float32: 5 vectors
// a thread, so layer_norm's backward and the add run instead); both
// outputs' gradients, then the sum's alone and the normalized output's
// alone; with and without parameters.
TEST(CudaAddLayerNorm, MatchesTheCpusComposition) {
  EMBER_REQUIRE_CUDA();
  const std::pair<DType, DType> pairs[] = {{DType::Float32, DType::Float32},
                                           {DType::Float32, DType::BFloat16},
                                           {DType::Float32, DType::Float16},
                                           {DType::BFloat16, DType::BFloat16},
                                           {DType::Float64, DType::Float64}};
  for (const auto& [dt, delta_dt] : pairs) {
    for (int64_t cols : {768, 1000, 4104}) {
      Generator g{uint64_t(cols) + 11};
      Tensor x = (randn({517, cols}, DType::Float32, kCPU, &g) * 2.0 + 0.5).to(dt).set_requires_grad();
      Tensor d = randn({517, cols}, DType::Float32, kCPU, &g).to(delta_dt).set_requires_grad();
      Tensor w = randn({cols}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      Tensor b = randn({cols}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      testing::Tolerance tol = testing::tolerance_for(delta_dt == dt ? dt : delta_dt);
      if (dt == DType::Float32 && delta_dt == DType::Float32) tol = {1e-4, 1e-4};
      if (dt == DType::BFloat16) tol = {2e-2, 2e-2};
      const std::string what =
          std::string(dtype_name(dt)) + " + " + dtype_name(delta_dt) + " cols=" + std::to_string(cols);
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [cols](const TensorList& in) {
            const auto [sum, normed] = add_layer_norm(in[0], in[1], {cols}, in[2], in[3]);
            return TensorList{sum, normed};
          },
          {x, d, w, b}, /*grads=*/true, tol))
          << what;
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [cols](const TensorList& in) { return TensorList{add_layer_norm(in[0], in[1], {cols}).second}; }, {x, d},
          true, tol))
          << what << " (normalized output alone, no parameters)";
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [cols](const TensorList& in) { return TensorList{add_layer_norm(in[0], in[1], {cols}).first}; }, {x, d}, true,
          tol))
          << what << " (sum alone)";
    }
  }
}

// normed_dtype of delta's half type beside a float32 x (a GPT's residual
// stream under autocast): the kernels write the normalized output in it and
// read its gradient in it; against the CPU's composition converted once.
// 4104 columns: the one-pass backward declines, layer_norm's runs on the
// gradient converted back.
TEST(CudaAddLayerNorm, AHalfNormedOutputMatchesTheCpusComposition) {
  EMBER_REQUIRE_CUDA();
  for (DType half : {DType::BFloat16, DType::Float16}) {
    for (int64_t cols : {200, 768, 1000, 4104}) {
      Generator g{uint64_t(cols) + 13};
      Tensor x = (randn({517, cols}, DType::Float32, kCPU, &g) * 2.0 + 0.5).set_requires_grad();
      Tensor d = randn({517, cols}, DType::Float32, kCPU, &g).to(half).set_requires_grad();
      Tensor w = randn({cols}, DType::Float32, kCPU, &g).set_requires_grad();
      Tensor b = randn({cols}, DType::Float32, kCPU, &g).set_requires_grad();
      const std::string what = std::string(dtype_name(half)) + " cols=" + std::to_string(cols);
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [cols, half](const TensorList& in) {
            const auto [sum, normed] = add_layer_norm(in[0], in[1], {cols}, in[2], in[3], 1e-5, half);
            EXPECT_EQ(normed.dtype(), half);
            return TensorList{sum, normed};
          },
          {x, d, w, b}, /*grads=*/true, testing::tolerance_for(half)))
          << what;
    }
  }
}

// A contiguous view that starts one element into its storage: no 16-byte
// vectors may be used on it.
TEST(CudaLayerNorm, MisalignedRowsMatchCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float16}) {
    for (int64_t cols : {64, 8192}) {
      Generator g{uint64_t(cols) + 1};
      Tensor x = (randn({3, cols}, DType::Float32, kCPU, &g) * 2.0 + 0.5).to(dt).set_requires_grad();
      auto shifted_norm = [cols](const TensorList& in) {
        const int64_t n = in[0].numel();
        Tensor storage = zeros({n + 1}, in[0].dtype(), in[0].device());
        Tensor view = storage.narrow(0, 1, n).view(in[0].shape());
        view.copy_(in[0].detach());
        return TensorList{layer_norm(view, {cols}),
                          layer_norm(in[0].detach(), {cols}, view.select(0, 0), view.select(0, 1))};
      };
      EXPECT_TRUE(testing::cuda_matches_cpu(shifted_norm, {x}, /*grads=*/false, testing::Tolerance{1e-3, 1e-3}))
          << dtype_name(dt) << " cols=" << cols;
    }
  }
}

}  // namespace
}  // namespace ember
