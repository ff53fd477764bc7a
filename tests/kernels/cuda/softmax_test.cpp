// CUDA softmax and log_softmax against the CPU kernels, forward and
// backward: row lengths that reach the warp kernel (1 .. 1024, scalar and
// 16-byte lanes), the block kernel with the row cached in shared memory
// (1025 .. 8192, above 48 KB for float64 backward) and without (65536,
// 65537), inner > 1 (strided kernel), every float dtype, non-contiguous and
// integer inputs, NaN and infinite rows, empty tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/cuda_compare.h"
#include "support/error_message.h"

#if defined(EMBER_WITH_CUDA)
#include "ember/kernels/cuda/softmax_path.h"
#endif

namespace ember {
namespace {

using testing::cuda_matches_cpu;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const DType kFloatTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
const int64_t kRowLengths[] = {1, 7, 31, 32, 33, 64, 1023, 1024, 1025, 4096, 4097, 8192, 65536, 65537};

int64_t rows_for(int64_t n) { return n <= 1024 ? 37 : 3; }

Tensor normal(const Shape& shape, DType dtype, uint64_t seed, double scale = 3.0) {
  Generator g(seed);
  return (randn(shape, DType::Float64, kCPU, &g) * scale).to(dtype);
}

TensorList both_kinds(const Tensor& x, int64_t dim) { return {softmax(x, dim), log_softmax(x, dim)}; }

// The CPU sums a float32 row in order, the GPU in a tree: over thousands of
// terms the sums differ by about 1e-5 relative.
// Long float32 rows: the backward's sum over n products is accumulated in
// another order on each device, and dx = y * (g - sum) cancels, so the
// relative error grows with n (2e-4 seen at n = 65537 on an H200).
testing::Tolerance tolerance(DType dt, int64_t n) {
  if (dt != DType::Float32 || n <= 1024) return testing::tolerance_for(dt);
  return n > 16384 ? testing::Tolerance{1e-3, 1e-3} : testing::Tolerance{1e-4, 1e-4};
}

// Gradients of the 16-bit types stop at 8192: log_softmax's dx = g - exp(y) *
// sum(g) scales a one-ulp difference of y by |sum(g)| ~ sqrt(n), beyond the
// 16-bit tolerances for the longest rows.
TEST(CudaSoftmax, ForwardAndBackwardEveryRowLengthAndDtype) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    for (int64_t n : kRowLengths) {
      Tensor x = normal({rows_for(n), n}, dt, uint64_t(n)).set_requires_grad();
      const bool grads = dtype_size(dt) > 2 || n <= 8192;
      EXPECT_TRUE(
          cuda_matches_cpu([](const TensorList& in) { return both_kinds(in[0], 1); }, {x}, grads, tolerance(dt, n)))
          << dtype_name(dt) << " n=" << n;
    }
  }
}

// The sum of a row of values offset by 1e4 only survives with the max
// subtracted.
TEST(CudaSoftmax, LargeValuesAreStable) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (int64_t n : {int64_t(33), int64_t(4097), int64_t(65537)}) {
      Tensor x = normal({2, n}, dt, 3) + 1e4;
      EXPECT_TRUE(
          cuda_matches_cpu([](const TensorList& in) { return both_kinds(in[0], 1); }, {x}, false, tolerance(dt, n)))
          << dtype_name(dt) << " n=" << n;
      EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return both_kinds(in[0], 0); }, {x.t().contiguous()},
                                   false, tolerance(dt, n)))
          << dtype_name(dt) << " n=" << n << " over dim 0";
    }
  }
}

// inner > 1 (the strided kernel), and softmax over the last dim of
// non-contiguous views (the front-end copies them).
TEST(CudaSoftmax, MiddleAndLeadingDimsAndViews) {
  EMBER_REQUIRE_CUDA();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{{1025, 7}, 0}, {{3, 1025, 5}, 1}, {{4, 33, 64}, 1}, {{2, 5, 40}, 0},
                        {{3, 1, 9}, 1}, {{2, 700, 2}, 1},  {{6, 3, 1}, 1}};
  for (DType dt : kFloatTypes) {
    for (const Case& c : cases) {
      Tensor x = normal(c.shape, dt, uint64_t(c.shape[1])).set_requires_grad();
      const int64_t d = c.dim;
      EXPECT_TRUE(cuda_matches_cpu([d](const TensorList& in) { return both_kinds(in[0], d); }, {x}, true))
          << dtype_name(dt) << " " << shape_str(c.shape) << " dim " << d;
    }
    // A contiguous view starting mid-allocation: rows misaligned for 16-byte loads.
    Tensor w = normal({3, 4097}, dt, 9).set_requires_grad();
    EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return both_kinds(in[0].narrow(0, 1, 2), 1); }, {w}, true,
                                 tolerance(dt, 4097)))
        << dtype_name(dt) << " offset rows";
    Tensor y = normal({40, 70}, dt, 8).set_requires_grad();
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          TensorList out = both_kinds(in[0].t(), 1);
          for (const Tensor& t : both_kinds(in[0].narrow(1, 3, 60), -1)) out.push_back(t);
          for (const Tensor& t : both_kinds(in[0].t().narrow(0, 1, 50), 0)) out.push_back(t);
          return out;
        },
        {y}, true))
        << dtype_name(dt);
  }
}

// A NaN makes its row NaN; a row of -inf is NaN; +inf gives NaN (inf - inf);
// -inf elements get 0 (softmax) and -inf (log_softmax).
TEST(CudaSoftmax, NanAndInfiniteRows) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    for (int64_t n : {int64_t(7), int64_t(33), int64_t(1024), int64_t(4097), int64_t(65537)}) {
      std::vector<double> v = to_vector<double>(normal({5, n}, DType::Float64, 4));
      v[size_t(n / 2)] = kNaN;                                          // row 0
      for (int64_t k = 0; k < n; ++k) v[size_t(n + k)] = -kInf;         // row 1
      v[size_t(2 * n + n - 1)] = kInf;                                  // row 2
      for (int64_t k = 0; k < n; k += 2) v[size_t(3 * n + k)] = -kInf;  // row 3
      v[size_t(4 * n)] = kNaN;                                          // row 4
      Tensor x = from_vector(v, {5, n}).to(dt);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            TensorList out = both_kinds(in[0], 1);
            for (const Tensor& t : both_kinds(in[0].t().contiguous(), 0)) out.push_back(t);
            return out;
          },
          {x}, false, tolerance(dt, n)))
          << dtype_name(dt) << " n=" << n;
    }
  }
}

TEST(CudaSoftmax, IntegerInputsAndEmptyTensors) {
  EMBER_REQUIRE_CUDA();
  Tensor i = randint(-5, 5, {9, 130}, DType::Int64);
  Tensor e0 = zeros({0, 5}), e1 = zeros({5, 0}), e2 = zeros({2, 0, 3});
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        TensorList out = both_kinds(in[0], 1);
        for (size_t k = 1; k < in.size(); ++k) {
          for (const Tensor& t : both_kinds(in[k], 1)) out.push_back(t);
        }
        return out;
      },
      {i, e0, e1, e2}));
}

#if defined(EMBER_WITH_CUDA)

// Forces every CUDA softmax onto one path for its scope.
class ForcedPath {
 public:
  explicit ForcedPath(cuda::SoftmaxPath path) : before_(cuda::force_softmax_path(path)) {}
  ~ForcedPath() { cuda::force_softmax_path(before_); }
  ForcedPath(const ForcedPath&) = delete;
  ForcedPath& operator=(const ForcedPath&) = delete;

 private:
  cuda::SoftmaxPath before_;
};

// Each path on every shape it takes, whatever the shape's own choice would
// be: rows of odd lengths, rows of whole vectors, inner > 1 (strided only).
// Register is a forward kernel, so its backward is not forced.
TEST(CudaSoftmax, EveryForcedPathMatchesTheCpu) {
  EMBER_REQUIRE_CUDA();
  struct Case {
    cuda::SoftmaxPath path;
    std::vector<int64_t> row_lengths;
  };
  const Case cases[] = {
      {cuda::SoftmaxPath::Warp, {1, 7, 64, 1000, 1024}},      {cuda::SoftmaxPath::Register, {8, 64, 1024, 4096, 8192}},
      {cuda::SoftmaxPath::Cached, {7, 64, 1025, 4096, 4097}}, {cuda::SoftmaxPath::Online, {7, 64, 1025, 4097, 65537}},
      {cuda::SoftmaxPath::Strided, {1, 7, 1025, 4097}},
  };
  for (const Case& c : cases) {
    for (DType dt : kFloatTypes) {
      for (int64_t n : c.row_lengths) {
        // The register kernel takes rows of whole 16-byte vectors, up to 2048 of them.
        if (c.path == cuda::SoftmaxPath::Register &&
            (n % (16 / int64_t(dtype_size(dt))) != 0 || n > 2048 * (16 / int64_t(dtype_size(dt))))) {
          continue;
        }
        ForcedPath forced(c.path);
        const bool grads = c.path != cuda::SoftmaxPath::Register && (dtype_size(dt) > 2 || n <= 8192);
        Tensor x = normal({5, n}, dt, uint64_t(n) + 7).set_requires_grad(grads);
        EXPECT_TRUE(
            cuda_matches_cpu([](const TensorList& in) { return both_kinds(in[0], 1); }, {x}, grads, tolerance(dt, n)))
            << cuda::softmax_path_name(c.path) << " " << dtype_name(dt) << " n=" << n;
      }
    }
  }
  ForcedPath strided(cuda::SoftmaxPath::Strided);
  Tensor x = normal({3, 33, 17}, DType::Float32, 5).set_requires_grad();
  EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return both_kinds(in[0], 1); }, {x}, true));
}

TEST(CudaSoftmax, AForcedPathThatCannotTakeTheShapeSaysWhy) {
  EMBER_REQUIRE_CUDA();
  Tensor long_rows = randn({2, 2048}, DType::Float32, cuda_device());
  {
    ForcedPath forced(cuda::SoftmaxPath::Warp);
    EXPECT_TRUE(testing::throws_with([&] { softmax(long_rows, 1); },
                                     {"softmax", "'warp'", "dim 2048", "at most 1024", "SoftmaxPath::Auto"}));
  }
  {
    ForcedPath forced(cuda::SoftmaxPath::Online);
    EXPECT_TRUE(testing::throws_with(
        [&] {
          softmax(randn({2, 8, 3}, DType::Float32, cuda_device()), 1);
        },
        {"softmax", "'online'", "inner 3", "inner == 1"}));
  }
  {
    Tensor x = long_rows.clone().set_requires_grad();
    Tensor y = softmax(x, 1);
    ForcedPath forced(cuda::SoftmaxPath::Register);
    EXPECT_TRUE(testing::throws_with([&] { y.sum().backward(); }, {"softmax_backward", "'register'", "forward"}));
  }
  EXPECT_EQ(cuda::forced_softmax_path(), cuda::SoftmaxPath::Auto);
  EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return both_kinds(in[0], 1); }, {long_rows.cpu()}));
}

#endif

}  // namespace
}  // namespace ember
