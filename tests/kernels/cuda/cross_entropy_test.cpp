// The fused cross-entropy loss on CUDA against its CPU kernel, forward and
// backward: row lengths on both sides of the warp kernel's limit (1 .. 1024
// classes) and the block kernel (1025, 5000), odd row counts (1, 7, 1025),
// every float dtype, int32 and int64 targets, every reduction, label
// smoothing and ignored rows, transposed logits, GPT-sized rows (aligned or
// not), -inf and NaN logits, 16-bit logits under autocast against the
// float32 loss, and a bad target reported (the lowest bad row) without a
// crash, the device working on after it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "ember/parallel/amp/autocast.h"
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

// GPT-sized rows: 50257 classes (rows off 16-byte boundaries, so every row
// has its own unaligned head) and 50304 (aligned), 16-bit logits, and
// logits starting one element into their storage (so the backward's logits
// and gradient are aligned differently and it takes the element path).
TEST(CudaCrossEntropy, VocabularySizedRowsAndUnalignedLogits) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    for (int64_t c : {50257, 50304}) {
      for (int64_t offset : {0, 1}) {
        const int64_t n = 5;
        Generator g(uint64_t(c + offset));
        Tensor base = (randn({n * c + offset}, DType::Float32, kCPU, &g) * 3.0).to(dt).set_requires_grad();
        Tensor t = targets(n, c, -100, DType::Int64, uint64_t(c));
        EXPECT_TRUE(cuda_matches_cpu(
            [&](const TensorList& in) {
              Tensor x = in[0].narrow(0, offset, n * c).view({n, c});
              return TensorList{cross_entropy_loss(x, in[1], -100, 0.1, Reduction::Mean),
                                cross_entropy_loss(x, in[1], -100, 0.0, Reduction::None)};
            },
            {base, t}, /*grads=*/true, tolerance(dt)))
            << dtype_name(dt) << " c " << c << " offset " << offset;
      }
    }
  }
}

// -inf logits (masked classes) in every position of a row, a row of only
// -inf, and a NaN: the one-pass statistics give the CPU kernel's values.
TEST(CudaCrossEntropy, InfiniteAndNanLogitsAsOnTheCpu) {
  EMBER_REQUIRE_CUDA();
  const double inf = std::numeric_limits<double>::infinity();
  for (int64_t c : {5, 40, 2000}) {
    Generator g{uint64_t(c)};
    Tensor x = randn({6, c}, DType::Float32, kCPU, &g);
    x[0][0].fill_(-inf);  // the row's first logit
    x[1].narrow(0, 1, c - 1).fill_(-inf);
    x[2][c - 1].fill_(-inf);
    x[3].fill_(-inf);
    x[4][c / 2].fill_(std::nan(""));
    x.set_requires_grad();
    Tensor t = from_vector<int64_t>({1, 0, 0, 2, 1, 3});
    for (double e : {0.0, 0.2}) {
      EXPECT_TRUE(cuda_matches_cpu(
          [&](const TensorList& in) { return TensorList{cross_entropy_loss(in[0], in[1], -100, e, Reduction::None)}; },
          {x, t}, /*grads=*/true, tolerance(DType::Float32)))
          << "c " << c << " smoothing " << e;
    }
  }
}

// Under CUDA autocast the kernels read 16-bit logits as they are: the loss
// is float32 and equals the loss of the logits cast to float32 (PyTorch's
// autocast makes that cast), and the gradient is that loss's gradient
// rounded once to the logits' dtype.
TEST(CudaCrossEntropy, HalfLogitsUnderAutocastGiveTheFloat32Loss) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    Generator g(11);
    const int64_t n = 64, c = 50257;
    Tensor x = (randn({n, c}, DType::Float32, kCPU, &g) * 2.0).to(dt).to(cuda_device(0)).set_requires_grad();
    Tensor t = targets(n, c, -100, DType::Int64, 12);
    nn::CrossEntropyOptions options;
    options.label_smoothing = 0.1;
    Tensor loss;
    {
      amp::autocast guard(dt);
      loss = nn::functional::cross_entropy(x, t.to(cuda_device(0)), options);
    }
    ASSERT_EQ(loss.dtype(), DType::Float32);
    loss.backward();
    ASSERT_EQ(x.grad().dtype(), dt);
    Tensor ref_x = x.detach().cpu().to(DType::Float32).set_requires_grad();
    Tensor ref = nn::functional::cross_entropy(ref_x, t, options);
    ref.backward();
    EXPECT_TRUE(testing::tensors_close(loss, ref, {1e-5, 1e-6})) << dtype_name(dt);
    EXPECT_TRUE(testing::tensors_close(x.grad(), ref_x.grad().to(dt), testing::tolerance_for(dt))) << dtype_name(dt);
  }
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
