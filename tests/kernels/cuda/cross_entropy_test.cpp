// The fused cross-entropy loss on CUDA against its CPU kernel, forward and
// backward: row lengths on both sides of the warp kernel's limit (1 .. 1024
// classes) and the block kernel (1025, 5000), odd row counts (1, 7, 1025),
// every float dtype, int32 and int64 targets, every reduction, label
// smoothing and ignored rows, transposed logits, and a bad target reported
// (the lowest bad row) without a crash, the device working on after it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "support/cuda_compare.h"

#if defined(EMBER_WITH_CUDA)
#include "ember/core/cuda/device.h"
#endif

namespace ember {
namespace {

using testing::cuda_matches_cpu;
using ::testing::HasSubstr;

// Targets in [0, c) with every fourth row (from the third) ignore_index.
Tensor targets(int64_t n, int64_t c, int64_t ignore_index, DType dtype, uint64_t seed) {
  Generator g(seed);
  Tensor t = randint(0, c, {n}, DType::Int64, kCPU, &g);
  for (int64_t i = 2; i < n; i += 4) t[i].fill_(ignore_index);
  return t.to(dtype);
}

// float32 row sums over thousands of classes are formed in another order on
// each device; the mean over rows likewise.
testing::Tolerance tolerance(DType dt) {
  if (dt == DType::Float32) return {1e-4, 1e-5};
  return testing::tolerance_for(dt);
}

TEST(CudaCrossEntropy, MatchesTheCpuForwardAndBackward) {
  EMBER_REQUIRE_CUDA();
  const Reduction reductions[] = {Reduction::None, Reduction::Mean, Reduction::Sum};
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (int64_t c : {1, 10, 33, 1024, 1025, 5000}) {
      for (int64_t n : {1, 7, 1025}) {
        if (c >= 1024 && n > 7 && dt != DType::Float32) continue;  // the large cases once
        for (Reduction r : reductions) {
          const double e = c % 2 == 0 ? 0.1 : 0.0;
          const DType tdt = n == 7 ? DType::Int32 : DType::Int64;
          Generator g(uint64_t(c * 31 + n));
          Tensor x = (randn({n, c}, DType::Float64, kCPU, &g) * 2.0).to(dt).set_requires_grad();
          Tensor t = targets(n, c, -100, tdt, uint64_t(c + n));
          EXPECT_TRUE(cuda_matches_cpu(
              [&](const TensorList& in) { return TensorList{cross_entropy_loss(in[0], in[1], -100, e, r)}; }, {x, t},
              /*grads=*/true, tolerance(dt)))
              << dtype_name(dt) << " n " << n << " c " << c << " reduction " << int(r) << " smoothing " << e;
        }
      }
    }
  }
}

TEST(CudaCrossEntropy, TransposedLogitsAndAnotherIgnoreIndex) {
  EMBER_REQUIRE_CUDA();
  Generator g(3);
  Tensor base = randn({12, 37}, DType::Float32, kCPU, &g).set_requires_grad();
  Tensor t = targets(37, 12, 5, DType::Int64, 4);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) { return TensorList{cross_entropy_loss(in[0].t(), in[1], 5, 0.05, Reduction::Mean)}; },
      {base, t}, true, tolerance(DType::Float32)));
}

#if defined(EMBER_WITH_CUDA)

TEST(CudaCrossEntropy, ABadTargetIsReportedWithTheLowestRow) {
  EMBER_REQUIRE_CUDA();
  Tensor x = zeros({6, 4}, DType::Float32, cuda_device(0)).set_requires_grad();
  try {
    Tensor loss = cross_entropy_loss(x, from_vector<int64_t>({0, 1, -100, 9, 2, -5}).cuda(), -100, 0, Reduction::Mean);
    loss.backward();
    loss.item<double>();
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("cross_entropy: a target is not a class index for 4 classes"));
    EXPECT_THAT(e.what(), HasSubstr("index 9 is out of bounds for dim 1 with size 4"));
    EXPECT_THAT(e.what(), HasSubstr("found on cuda:0 at position 3"));
  }
  EXPECT_NO_THROW(cuda::synchronize(0)) << "the error is raised once";
  Tensor ok = cross_entropy_loss(x, from_vector<int64_t>({0, 1, -100, 3, 2, 1}).cuda(), -100, 0, Reduction::Mean);
  EXPECT_NEAR(ok.item<double>(), std::log(4.0), 1e-6);
}

#endif  // EMBER_WITH_CUDA

}  // namespace
}  // namespace ember
