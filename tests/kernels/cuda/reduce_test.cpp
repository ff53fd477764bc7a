// CUDA reductions against the CPU kernels: every ReduceOp and the dtypes it
// takes; row lengths that reach the warp kernel (1 .. 1024, several rows per
// warp), the block kernel (1025, 4097) and the split block kernel (65537, a
// full reduction); inner > 1 through the column kernel (scalar and 16-byte
// lanes, with and without a split); several dims, keepdim, non-contiguous
// inputs; NaN, infinities and ties (first index wins); empty dims;
// gradients through every differentiable reduction.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "support/cuda_compare.h"

namespace ember {
namespace {

using testing::cuda_matches_cpu;
using testing::Tolerance;
using testing::tolerance_for;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

const DType kFloatTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
const DType kAllTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                           DType::Int32,   DType::Int64,   DType::Bool};
const int64_t kRowLengths[] = {1, 7, 31, 32, 33, 1023, 1024, 1025, 4097, 65537};

// Many short rows (several per warp, a partial last block), few long ones.
int64_t rows_for(int64_t n) { return n <= 1024 ? 37 : 3; }

// Multiples of 1/8 in [-4, 4], exact in every float dtype: every partial sum
// is exact in float, so sums agree in any order.
Tensor eighths(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return (randint(-32, 33, shape, DType::Int64, kCPU, &g).to(DType::Float64) / 8.0).to(dtype);
}

// Few distinct values, so maxima tie; 0/1 for bool.
Tensor ties(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randint(dtype == DType::Bool ? 0 : -3, dtype == DType::Bool ? 2 : 4, shape, DType::Int64, kCPU, &g).to(dtype);
}

Tensor normal(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return (randn(shape, DType::Float64, kCPU, &g) * 2.0 + 0.5).to(dtype);
}

// x with the given flat elements replaced.
Tensor with_values(const Tensor& x, const std::vector<std::pair<int64_t, double>>& values) {
  std::vector<double> v = to_vector<double>(x);
  for (auto [i, value] : values) v[size_t(i)] = value;
  return from_vector(v, x.shape()).to(x.dtype());
}

// Var's float32 Welford merges in another order than the CPU's sequential one.
Tolerance stats_tolerance(DType dt) { return dt == DType::Float32 ? Tolerance{1e-4, 1e-5} : tolerance_for(dt); }

TEST(CudaReduce, SumAndMeanEveryRowLengthAndFloatDtype) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    for (int64_t n : kRowLengths) {
      Tensor x = eighths({rows_for(n), n}, dt, uint64_t(n));
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{sum(in[0], {1}), mean(in[0], {1}), sum(in[0]), mean(in[0]), sum(in[0], {1}, true)};
          },
          {x}))
          << dtype_name(dt) << " n=" << n;
    }
  }
}

TEST(CudaReduce, IntegerAndBoolSumsAccumulateInInt64) {
  EMBER_REQUIRE_CUDA();
  for (int64_t n : kRowLengths) {
    Generator g{uint64_t(n)};
    // Large int32 values: an int32 accumulator would overflow.
    Tensor i32 = randint(int64_t(1) << 28, int64_t(1) << 30, {rows_for(n), n}, DType::Int32, kCPU, &g);
    Tensor i64 = randint(-(int64_t(1) << 40), int64_t(1) << 40, {rows_for(n), n}, DType::Int64, kCPU, &g);
    Tensor b = ties({rows_for(n), n}, DType::Bool, uint64_t(n));
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          return TensorList{sum(in[0], {1}), sum(in[0]), sum(in[1], {1}), sum(in[1]), sum(in[2], {1}), sum(in[2])};
        },
        {i32, i64, b}))
        << "n=" << n;
  }
}

TEST(CudaReduce, MaxMinAndArgsEveryRowLengthAndDtypeWithTies) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kAllTypes) {
    for (int64_t n : kRowLengths) {
      Tensor x = ties({rows_for(n), n}, dt, uint64_t(n) + 7);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            auto [vmax, imax] = max(in[0], 1);
            auto [vmin, imin] = min(in[0], 1);
            return TensorList{amax(in[0], {1}), amin(in[0], {1}), vmax,          imax,         vmin, imin,
                              argmax(in[0], 1), argmin(in[0], 1), argmax(in[0]), argmin(in[0])};
          },
          {x}))
          << dtype_name(dt) << " n=" << n;
    }
  }
}

TEST(CudaReduce, MaxAndArgmaxTakeTheFirstNanThenTheFirstExtreme) {
  EMBER_REQUIRE_CUDA();
  auto check = [](const Tensor& x, int64_t dim, const char* what) {
    EXPECT_TRUE(cuda_matches_cpu(
        [dim](const TensorList& in) {
          auto [v, i] = max(in[0], dim);
          auto [w, j] = min(in[0], dim);
          return TensorList{v, i, w, j, argmax(in[0], dim), argmin(in[0], dim), amax(in[0], {dim}), argmax(in[0])};
        },
        {x}))
        << what << " " << dtype_name(x.dtype());
  };
  for (DType dt : kFloatTypes) {
    // Long rows (split block kernel): row 0 has NaNs in two splits, row 1 a
    // NaN in the last element, row 2 ties of +-inf and of 9 across splits.
    const int64_t n = 65537;
    Tensor x = with_values(eighths({3, n}, dt, 1), {{40000, kNaN},
                                                    {50000, kNaN},
                                                    {n + 65536, kNaN},
                                                    {n + 3, 9},
                                                    {2 * n + 30001, 9},
                                                    {2 * n + 60000, 9},
                                                    {2 * n + 7, -kInf},
                                                    {2 * n + 30000, -kInf}});
    check(x, 1, "long rows");
    // Short rows (warp kernel) and the same data reduced over dim 0 (column kernel).
    Tensor y = with_values(ties({37, 33}, dt, 2), {{5, kNaN}, {20, kNaN}, {33 + 32, kNaN}, {66 + 4, 9}, {66 + 31, 9}});
    check(y, 1, "short rows");
    check(y, 0, "columns");
    // Signed zeros tie: the first one's sign is kept.
    Tensor z = with_values(zeros({2, 1025}, dt), {{3, -0.0}, {1025 + 1024, -0.0}});
    check(z, 1, "signed zeros");
    Tensor c = with_values(ties({1025, 7}, dt, 3), {{7 * 100 + 2, kNaN}, {7 * 900 + 2, kNaN}, {7 * 1000 + 4, 9}});
    check(c, 0, "long columns");
  }
}

TEST(CudaReduce, VarStdLogsumexpEveryRowLengthAndFloatDtype) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    for (int64_t n : kRowLengths) {
      Tensor x = normal({rows_for(n), n}, dt, uint64_t(n) + 11);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{var(in[0], {1}), std(in[0], {1}, 0), var(in[0], {1}, 3), std(in[0]), var(in[0], {}, 0)};
          },
          {x}, false, stats_tolerance(dt)))
          << "var/std " << dtype_name(dt) << " n=" << n;
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{logsumexp(in[0], {1}), logsumexp(in[0], {0, 1})};
          },
          {x * 20.0}))  // large values: the max must be subtracted
          << "logsumexp " << dtype_name(dt) << " n=" << n;
    }
  }
}

TEST(CudaReduce, LogsumexpAndVarEdgeValues) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    for (int64_t n : {int64_t(33), int64_t(4097), int64_t(65537)}) {
      // Rows: all -inf; -inf and finite; a +inf; a NaN; +inf and -inf; a lone finite value among -inf.
      Tensor x = normal({6, n}, dt, 5);
      std::vector<std::pair<int64_t, double>> edits;
      for (int64_t k = 0; k < n; ++k) edits.push_back({k, -kInf});
      for (int64_t k = 0; k < n; k += 3) edits.push_back({n + k, -kInf});
      edits.push_back({2 * n + n / 2, kInf});
      edits.push_back({3 * n + n - 1, kNaN});
      edits.push_back({4 * n + 1, kInf});
      edits.push_back({4 * n + 2, -kInf});
      for (int64_t k = 0; k < n; ++k) edits.push_back({5 * n + k, k == n / 3 ? 2.5 : -kInf});
      Tensor e = with_values(x, edits);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{logsumexp(in[0], {1}), var(in[0], {1}), std(in[0], {1}, 0), logsumexp(in[0].t(), {0})};
          },
          {e}))
          << dtype_name(dt) << " n=" << n;
    }
    // correction >= count: inf, or NaN where M2 == 0.
    Tensor one = normal({4, 1}, dt, 6), two = normal({4, 2}, dt, 7);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          return TensorList{var(in[0], {1}), std(in[0], {1}), var(in[1], {1}, 2), var(in[1], {1}, 5)};
        },
        {one, two}))
        << dtype_name(dt);
  }
}

// inner > 1: the column kernel, scalar lanes (inner not a multiple of the
// vector width) and 16-byte lanes, split over `reduce` when few outputs.
TEST(CudaReduce, MiddleAndLeadingDimsEveryOp) {
  EMBER_REQUIRE_CUDA();
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const Case cases[] = {{{1025, 7}, 0},    {{3, 1025, 5}, 1}, {{4097, 64}, 0}, {{2, 33, 1024}, 1},
                        {{7, 3, 1000}, 1}, {{5, 1025}, 0},    {{65537, 2}, 0}, {{2, 1, 9}, 1}};
  for (DType dt : kFloatTypes) {
    for (const Case& c : cases) {
      Tensor x = eighths(c.shape, dt, uint64_t(c.shape[0]));
      const int64_t d = c.dim;
      EXPECT_TRUE(cuda_matches_cpu(
          [d](const TensorList& in) {
            auto [v, i] = max(in[0], d);
            return TensorList{sum(in[0], {d}),  mean(in[0], {d}),     amax(in[0], {d}), amin(in[0], {d}), v, i,
                              argmin(in[0], d), logsumexp(in[0], {d})};
          },
          {x}))
          << dtype_name(dt) << " " << shape_str(c.shape) << " dim " << d;
      EXPECT_TRUE(cuda_matches_cpu(
          [d](const TensorList& in) {
            return TensorList{var(in[0], {d}), std(in[0], {d}, 0)};
          },
          {x}, false, stats_tolerance(dt)))
          << "var/std " << dtype_name(dt) << " " << shape_str(c.shape) << " dim " << d;
    }
  }
  for (DType dt : {DType::Int32, DType::Int64, DType::Bool}) {
    for (const Case& c : cases) {
      Tensor x = ties(c.shape, dt, 9);
      const int64_t d = c.dim;
      EXPECT_TRUE(cuda_matches_cpu(
          [d](const TensorList& in) {
            auto [v, i] = min(in[0], d);
            return TensorList{sum(in[0], {d}), amax(in[0], {d}), v, i, argmax(in[0], d)};
          },
          {x}))
          << dtype_name(dt) << " " << shape_str(c.shape) << " dim " << d;
    }
  }
}

TEST(CudaReduce, SeveralDimsKeepdimAndNonContiguousInputs) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    Tensor x = eighths({6, 35, 9}, dt, 21);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          const Tensor& a = in[0];
          return TensorList{sum(a, {0, 2}),
                            mean(a, {1, 2}, true),
                            sum(a.transpose(0, 2), {1}),
                            amax(a.narrow(1, 3, 30), {1}),
                            amin(a.permute({2, 0, 1}), {1, 2}),
                            argmax(a.transpose(1, 2), 2),
                            argmin(a.narrow(2, 1, 7)),
                            logsumexp(a, {-1, 0}),
                            sum(a.transpose(0, 1)),
                            max(a.narrow(0, 1, 4), 0, true).second,
                            sum(a.view({210, 9}).narrow(0, 1, 200), {1}),  // contiguous, misaligned rows
                            argmax(a.view({6, 315}).narrow(0, 1, 5), 1)};
        },
        {x}))
        << dtype_name(dt);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          return TensorList{var(in[0], {0, 2}), std(in[0].transpose(0, 1), {0}, 0, true),
                            var(in[0].narrow(1, 2, 20), {1})};
        },
        {x}, false, stats_tolerance(dt)))
        << dtype_name(dt);
  }
}

TEST(CudaReduce, EmptyDimsWriteTheIdentity) {
  EMBER_REQUIRE_CUDA();
  Tensor x = zeros({3, 0, 4}), e = zeros({0, 5}), i = zeros({3, 0}, DType::Int32);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        return TensorList{sum(in[0], {1}),       mean(in[0], {1}), var(in[0], {1}), std(in[0], {1}, 0),
                          logsumexp(in[0], {1}), sum(in[0]),       sum(in[1], {1}), amax(in[1], {1}),
                          argmax(in[1], 1),      sum(in[2], {1})};
      },
      {x, e, i}));
}

TEST(CudaReduce, GradientsMatchCpu) {
  EMBER_REQUIRE_CUDA();
  Tensor x = normal({5, 1025}, DType::Float64, 31).set_requires_grad();
  Tensor t = ties({9, 66}, DType::Float64, 32).set_requires_grad();  // ties share max/min gradients
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        const Tensor& a = in[0];
        return TensorList{sum(a, {1}),
                          mean(a, {0}),
                          var(a, {1}),
                          std(a.t(), {0}, 0),
                          logsumexp(a, {1}),
                          max(a, 1).first,
                          sum(a.narrow(1, 3, 1000)),
                          mean(a.t(), {1}, true)};
      },
      {x}, /*grads=*/true));
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        const Tensor& a = in[0];
        return TensorList{amax(a, {1}), amin(a, {0}), a.max(), min(a, 0).first, amax(a.t(), {0, 1})};
      },
      {t}, /*grads=*/true));
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    Tensor h = eighths({33, 40}, dt, 33).set_requires_grad();
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          return TensorList{sum(in[0], {0}), mean(in[0], {1}), amax(in[0], {1})};
        },
        {h},
        /*grads=*/true))
        << dtype_name(dt);
  }
}

}  // namespace
}  // namespace ember
