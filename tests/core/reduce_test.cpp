// Reductions on CPU: values against naive loops over every dim combination,
// layouts (contiguous, transposed, narrowed, permuted), dtypes (float64,
// float32, half types, integers, bool), NaN, ties, empty dims; gradients by
// finite differences and by hand; error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::error_of;

using ::testing::HasSubstr;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// ---------------- a naive reference ----------------

// x's elements grouped by the output element a reduction over dims (empty =
// all) combines them into, each group in row-major order of x's logical
// shape (the order of the reduced index).
struct Groups {
  Shape out_shape;
  std::vector<std::vector<double>> members;
};

Groups group_by(const Tensor& x, const Shape& dims, bool keepdim) {
  std::vector<double> v = to_vector<double>(x);
  int64_t n = x.dim();
  std::vector<bool> reduced(size_t(n), dims.empty());
  for (int64_t d : dims) reduced[size_t((d + n) % n)] = true;
  Groups g;
  int64_t out_numel = 1;
  for (int64_t d = 0; d < n; ++d) {
    if (!reduced[size_t(d)]) {
      g.out_shape.push_back(x.size(d));
      out_numel *= x.size(d);
    } else if (keepdim) {
      g.out_shape.push_back(1);
    }
  }
  g.members.resize(size_t(out_numel));
  for (int64_t j = 0; j < int64_t(v.size()); ++j) {
    int64_t rest = j, out = 0, scale = 1;
    for (int64_t d = n - 1; d >= 0; --d) {
      int64_t i = rest % x.size(d);
      rest /= x.size(d);
      if (!reduced[size_t(d)]) {
        out += i * scale;
        scale *= x.size(d);
      }
    }
    g.members[size_t(out)].push_back(v[size_t(j)]);
  }
  return g;
}

using Naive = std::function<double(const std::vector<double>&)>;

double naive_sum(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double naive_mean(const std::vector<double>& v) { return naive_sum(v) / double(v.size()); }
double naive_max(const std::vector<double>& v) {
  double m = v[0];
  for (double x : v) m = std::max(m, x);
  return m;
}
double naive_min(const std::vector<double>& v) {
  double m = v[0];
  for (double x : v) m = std::min(m, x);
  return m;
}
double naive_argmax(const std::vector<double>& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) best = v[i] > v[best] ? i : best;
  return double(best);
}
double naive_argmin(const std::vector<double>& v) {
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i) best = v[i] < v[best] ? i : best;
  return double(best);
}
Naive naive_var(int64_t correction) {
  return [correction](const std::vector<double>& v) {
    double m = naive_mean(v), ss = 0;
    for (double x : v) ss += (x - m) * (x - m);
    return ss / std::max(double(v.size()) - double(correction), 0.0);
  };
}
double naive_logsumexp(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::exp(x);
  return std::log(s);
}

// got == want elementwise within atol + rtol * |want| (NaN matches NaN, inf matches inf).
void expect_close(const Tensor& got, const Shape& shape, const std::vector<double>& want, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(got.shape(), shape) << what;
  std::vector<double> g = to_vector<double>(got);
  ASSERT_EQ(g.size(), want.size()) << what;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(g[i])) << what << " element " << i << ": got " << g[i] << ", want NaN";
    } else if (std::isinf(want[i])) {
      EXPECT_EQ(g[i], want[i]) << what << " element " << i;
    } else {
      EXPECT_NEAR(g[i], want[i], atol + rtol * std::fabs(want[i])) << what << " element " << i;
    }
  }
}

void expect_matches_naive(const Tensor& got, const Tensor& x, const Shape& dims, bool keepdim, const Naive& naive,
                          double rtol, double atol, const std::string& what) {
  Groups g = group_by(x, dims, keepdim);
  std::vector<double> want;
  for (const auto& m : g.members) want.push_back(naive(m));
  expect_close(got, g.out_shape, want, rtol, atol, what);
}

// [3, 5, 7] in four layouts: contiguous, transposed, narrowed, permuted.
std::vector<std::pair<std::string, Tensor>> layouts(DType dtype = DType::Float64) {
  Generator g(11);
  return {
      {"contiguous", randn({3, 5, 7}, dtype, kCPU, &g)},
      {"transposed", randn({7, 5, 3}, dtype, kCPU, &g).transpose(0, 2)},
      {"narrowed", randn({3, 8, 7}, dtype, kCPU, &g).narrow(1, 2, 5)},
      {"permuted", randn({5, 7, 3}, dtype, kCPU, &g).permute({2, 0, 1})},
  };
}

// Every subset of {0, 1, 2} (the empty one meaning all dims), with some dims
// written negative, plus the explicit full list.
std::vector<Shape> dim_sets() {
  std::vector<Shape> sets;
  for (int mask = 0; mask < 8; ++mask) {
    Shape dims;
    for (int64_t d = 0; d < 3; ++d) {
      if (mask & (1 << d)) dims.push_back((mask + d) % 2 ? d - 3 : d);
    }
    sets.push_back(dims);
  }
  sets.push_back({2, 0, -2});
  return sets;
}

std::string label(const std::string& op, const std::string& layout, const Shape& dims, bool keepdim) {
  return op + " " + layout + " dims=" + shape_str(dims) + (keepdim ? " keepdim" : "");
}

using ReduceFn = std::function<Tensor(const Tensor&, const Shape&, bool)>;

// float64 runs every layout; other dtypes (whose layouts take the same code
// paths) the contiguous and transposed ones, to keep the test fast.
void check_all_dims(const std::string& op, const ReduceFn& fn, const Naive& naive, DType dtype, double rtol,
                    double atol) {
  auto all = layouts(dtype);
  if (dtype != DType::Float64) all.resize(2);
  for (const auto& [name, x] : all) {
    for (const Shape& dims : dim_sets()) {
      for (bool keepdim : {false, true}) {
        Tensor y = fn(x, dims, keepdim);
        EXPECT_EQ(y.dtype(), dtype);
        expect_matches_naive(y, x, dims, keepdim, naive, rtol, atol, label(op, name, dims, keepdim));
      }
    }
  }
}

// ---------------- values ----------------

TEST(Reduce, SumAndMeanMatchNaiveOverEveryDimSetAndLayout) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    double tol = dt == DType::Float64 ? 1e-12 : 1e-5;
    check_all_dims(
        "sum", [](const Tensor& x, const Shape& d, bool k) { return sum(x, d, k); }, naive_sum, dt, tol, tol);
    check_all_dims(
        "mean", [](const Tensor& x, const Shape& d, bool k) { return x.mean(d, k); }, naive_mean, dt, tol, tol);
  }
}

TEST(Reduce, AmaxAndAminMatchNaiveOverEveryDimSetAndLayout) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    check_all_dims(
        "amax", [](const Tensor& x, const Shape& d, bool k) { return amax(x, d, k); }, naive_max, dt, 0, 0);
    check_all_dims(
        "amin", [](const Tensor& x, const Shape& d, bool k) { return amin(x, d, k); }, naive_min, dt, 0, 0);
  }
}

TEST(Reduce, VarAndStdMatchNaiveForEachCorrection) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    double tol = dt == DType::Float64 ? 1e-12 : 1e-5;
    for (int64_t c : dt == DType::Float64 ? Shape{0, 1, 2} : Shape{1}) {
      std::string tag = " correction=" + std::to_string(c);
      check_all_dims(
          "var" + tag, [c](const Tensor& x, const Shape& d, bool k) { return x.var(d, c, k); }, naive_var(c), dt, tol,
          tol);
      Naive var = naive_var(c);
      check_all_dims(
          "std" + tag, [c](const Tensor& x, const Shape& d, bool k) { return ember::std(x, d, c, k); },
          [var](const std::vector<double>& v) { return std::sqrt(var(v)); }, dt, tol, tol);
    }
  }
}

TEST(Reduce, LogsumexpMatchesNaive) {
  for (DType dt : {DType::Float64, DType::Float32}) {
    double tol = dt == DType::Float64 ? 1e-12 : 1e-5;
    check_all_dims(
        "logsumexp", [](const Tensor& x, const Shape& d, bool k) { return x.logsumexp(d, k); }, naive_logsumexp, dt,
        tol, tol);
  }
}

TEST(Reduce, LogsumexpIsStableAndHandlesInfinities) {
  Tensor x = from_vector<double>({1000, 1000, -kInf, -kInf, kInf, 0, 1, kNaN}, {4, 2});
  double ln2 = std::log(2.0);
  expect_close(logsumexp(x, {1}), {4}, {1000 + ln2, -kInf, kInf, kNaN}, 1e-15, 0, "logsumexp");
  Tensor f = from_vector<float>({-1000, -1000.5f}, {2});
  expect_close(logsumexp(f, {0}), {}, {-1000 + std::log(1 + std::exp(-0.5))}, 1e-6, 0, "float32 logsumexp");
}

TEST(Reduce, LogsumexpPromotesIntegersToFloat32) {
  Tensor x = from_vector<int64_t>({0, 1, 2, 3}, {2, 2});
  Tensor y = logsumexp(x, {1});
  EXPECT_EQ(y.dtype(), DType::Float32);
  expect_close(y, {2}, {std::log(1 + std::exp(1.0)), std::log(std::exp(2.0) + std::exp(3.0))}, 1e-6, 0, "int");
}

TEST(Reduce, MaxMinWithDimGiveValuesAndFirstIndexOfTies) {
  // Small integers make many ties, so "first index" is exercised.
  Generator g(5);
  Tensor base = randint(0, 4, {7, 5, 3}, DType::Int64, kCPU, &g);
  for (DType dt : {DType::Float64, DType::Float32, DType::Int32, DType::Int64}) {
    Tensor x = base.to(dt).transpose(0, 2);  // [3, 5, 7], non-contiguous
    for (int64_t dim : {0, 1, 2, -1, -3}) {
      for (bool keepdim : {false, true}) {
        std::string what = std::string(dtype_name(dt)) + " dim " + std::to_string(dim) + (keepdim ? " keepdim" : "");
        auto [vmax, imax] = x.max(dim, keepdim);
        auto [vmin, imin] = ember::min(x, dim, keepdim);
        EXPECT_EQ(vmax.dtype(), dt);
        EXPECT_EQ(imax.dtype(), DType::Int64);
        expect_matches_naive(vmax, x, {dim}, keepdim, naive_max, 0, 0, "max values " + what);
        expect_matches_naive(imax, x, {dim}, keepdim, naive_argmax, 0, 0, "max indices " + what);
        expect_matches_naive(vmin, x, {dim}, keepdim, naive_min, 0, 0, "min values " + what);
        expect_matches_naive(imin, x, {dim}, keepdim, naive_argmin, 0, 0, "min indices " + what);
        expect_matches_naive(x.argmax(dim, keepdim), x, {dim}, keepdim, naive_argmax, 0, 0, "argmax " + what);
        expect_matches_naive(argmin(x, dim, keepdim), x, {dim}, keepdim, naive_argmin, 0, 0, "argmin " + what);
      }
    }
  }
}

TEST(Reduce, TiesPickTheFirstIndexByHand) {
  Tensor x = from_vector<float>({1, 5, 5, 0, 2, 2, 0, 1}, {2, 4});
  EXPECT_EQ(to_vector<int64_t>(argmax(x, 1)), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(to_vector<int64_t>(argmin(x, 1)), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x).item<int64_t>(), 3);
}

TEST(Reduce, FlattenedArgmaxIsTheRowMajorIndexOfTheView) {
  Tensor base = from_vector<double>({0, 1, 9, 3, 4, -7}, {2, 3});
  Tensor t = base.t();  // [[0, 3], [1, 4], [9, -7]]
  EXPECT_EQ(argmax(t).item<int64_t>(), 4);
  EXPECT_EQ(argmin(t).item<int64_t>(), 5);
  EXPECT_EQ(argmax(t).dim(), 0);
  for (const auto& [name, x] : layouts()) {
    std::vector<double> v = to_vector<double>(x);
    EXPECT_EQ(argmax(x).item<int64_t>(), int64_t(naive_argmax(v))) << name;
    EXPECT_EQ(argmin(x).item<int64_t>(), int64_t(naive_argmin(v))) << name;
    EXPECT_EQ(x.max().item<double>(), naive_max(v)) << name;
    EXPECT_EQ(x.min().item<double>(), naive_min(v)) << name;
  }
}

TEST(Reduce, NaNPropagatesThroughMaxAndMin) {
  Tensor x = from_vector<double>({1, kNaN, 3, kNaN, 0, 2, -1, 4}, {2, 4});
  auto [v, i] = max(x, 1);
  expect_close(v, {2}, {kNaN, 4}, 0, 0, "max values");
  EXPECT_EQ(to_vector<int64_t>(i), (std::vector<int64_t>{1, 3}));
  auto [vn, in] = min(x, 1);
  expect_close(vn, {2}, {kNaN, -1}, 0, 0, "min values");
  EXPECT_EQ(to_vector<int64_t>(in), (std::vector<int64_t>{1, 2}));
  expect_close(amax(x, {0}), {4}, {1, kNaN, 3, kNaN}, 0, 0, "amax");
  expect_close(amin(x, {0}), {4}, {0, kNaN, -1, kNaN}, 0, 0, "amin");
  EXPECT_TRUE(std::isnan(x.max().item<double>()));
  EXPECT_EQ(argmax(x).item<int64_t>(), 1);
  EXPECT_EQ(argmin(x).item<int64_t>(), 1);
  Tensor h = x.to(DType::Float16);
  EXPECT_TRUE(std::isnan(h.min().item<double>()));
  EXPECT_EQ(to_vector<int64_t>(argmax(h, 1)), (std::vector<int64_t>{1, 3}));
}

TEST(Reduce, IntegerAndBoolInputs) {
  Generator g(9);
  Tensor x = randint(-50, 50, {3, 5, 7}, DType::Int32, kCPU, &g).transpose(0, 1);  // [5, 3, 7]
  for (const Shape& dims : dim_sets()) {
    Tensor s = sum(x, dims);
    EXPECT_EQ(s.dtype(), DType::Int64);
    expect_matches_naive(s, x, dims, false, naive_sum, 0, 0, "int32 sum dims=" + shape_str(dims));
    Tensor m = amax(x, dims, true);
    EXPECT_EQ(m.dtype(), DType::Int32);
    expect_matches_naive(m, x, dims, true, naive_max, 0, 0, "int32 amax dims=" + shape_str(dims));
  }
  // Beyond float precision: int64 sums stay exact.
  Tensor big = from_vector<int64_t>({int64_t(1) << 60, 1, 1}, {3});
  EXPECT_EQ(sum(big).item<int64_t>(), (int64_t(1) << 60) + 2);
  EXPECT_EQ(big.max().item<int64_t>(), int64_t(1) << 60);
  Tensor b = from_vector<bool>({true, false, true, true}, {2, 2});
  EXPECT_EQ(sum(b).dtype(), DType::Int64);
  EXPECT_EQ(to_vector<int64_t>(sum(b, {0})), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(to_vector<int64_t>(argmax(b, 1)), (std::vector<int64_t>{0, 0}));
  EXPECT_EQ(to_vector<int64_t>(argmin(b, 1)), (std::vector<int64_t>{1, 0}));
}

TEST(Reduce, HalfTypesMatchFloat64WithinTheirPrecision) {
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    double rtol = dt == DType::Float16 ? 2e-3 : 1.6e-2;
    std::string t = dtype_name(dt);
    check_all_dims(
        "sum " + t, [](const Tensor& x, const Shape& d, bool k) { return sum(x, d, k); }, naive_sum, dt, rtol, rtol);
    check_all_dims(
        "mean " + t, [](const Tensor& x, const Shape& d, bool k) { return mean(x, d, k); }, naive_mean, dt, rtol, rtol);
    check_all_dims(
        "amax " + t, [](const Tensor& x, const Shape& d, bool k) { return amax(x, d, k); }, naive_max, dt, 0, 0);
    check_all_dims(
        "var " + t, [](const Tensor& x, const Shape& d, bool k) { return var(x, d, 1, k); }, naive_var(1), dt, 2 * rtol,
        rtol);
    check_all_dims(
        "logsumexp " + t, [](const Tensor& x, const Shape& d, bool k) { return logsumexp(x, d, k); }, naive_logsumexp,
        dt, rtol, rtol);
  }
}

TEST(Reduce, HalfTypesAccumulateInFloat) {
  // In half, 2048 + 1 rounds back to 2048 (in bfloat16, 256 + 1 to 256); a
  // float accumulator gets the count right.
  EXPECT_EQ(ones({4096}, DType::Float16).sum().item<double>(), 4096.0);
  EXPECT_EQ(ones({512}, DType::BFloat16).sum().item<double>(), 512.0);
  EXPECT_EQ(ones({2, 4096}, DType::Float16).mean({1}).to(DType::Float64).sum().item<double>(), 2.0);
  EXPECT_EQ(logsumexp(zeros({4096}, DType::Float16), {0}).item<float>(), float(Half(std::log(4096.0f))));
}

TEST(Reduce, ZeroDimTensors) {
  Tensor x = full({}, 2.5, DType::Float64);
  EXPECT_EQ(sum(x).item<double>(), 2.5);
  EXPECT_EQ(mean(x, {0}).item<double>(), 2.5);
  EXPECT_EQ(amax(x, {-1}, true).dim(), 0);
  auto [v, i] = max(x, 0);
  EXPECT_EQ(v.item<double>(), 2.5);
  EXPECT_EQ(i.item<int64_t>(), 0);
  EXPECT_EQ(argmax(x).item<int64_t>(), 0);
  EXPECT_TRUE(std::isnan(var(x).item<double>()));  // one element, correction 1
  EXPECT_EQ(var(x, {}, 0).item<double>(), 0.0);
}

TEST(Reduce, EmptyDims) {
  Tensor x = zeros({0, 3}, DType::Float32);
  Tensor s = sum(x, {0});
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(to_vector<float>(s), (std::vector<float>{0, 0, 0}));
  EXPECT_EQ(sum(zeros({0}, DType::Int32)).item<int64_t>(), 0);
  expect_close(mean(x, {0}), {3}, {kNaN, kNaN, kNaN}, 0, 0, "mean over empty");
  expect_close(var(x, {0}), {3}, {kNaN, kNaN, kNaN}, 0, 0, "var over empty");
  expect_close(logsumexp(x, {0}), {3}, {-kInf, -kInf, -kInf}, 0, 0, "logsumexp over empty");
  // Reducing a non-empty dim of an empty tensor is fine for every op.
  EXPECT_EQ(amax(x, {1}).shape(), (Shape{0}));
  EXPECT_EQ(max(x, 1).second.shape(), (Shape{0}));
  EXPECT_EQ(mean(x, {1}).shape(), (Shape{0}));
}

TEST(Reduce, VarWithCorrectionAtLeastTheCountIsInfOrNaN) {
  Tensor x = from_vector<double>({1, 3, 2, 2}, {2, 2});
  // divisor max(2 - correction, 0) = 0: M2 > 0 gives inf, M2 == 0 NaN.
  for (int64_t c : {2, 3}) {
    expect_close(var(x, {1}, c), {2}, {kInf, kNaN}, 0, 0, "var correction " + std::to_string(c));
    expect_close(ember::std(x, {1}, c), {2}, {kInf, kNaN}, 0, 0, "std correction " + std::to_string(c));
  }
  expect_close(var(x, {1}, 1), {2}, {2, 0}, 0, 0, "var correction 1");
  expect_close(var(x, {}, 0), {}, {0.5}, 1e-15, 0, "population var");
}

// ---------------- errors ----------------

TEST(Reduce, BadDimNamesTheShape) {
  Tensor x = zeros({3, 5, 7});
  for (const std::string& msg : {
           error_of([&] { sum(x, {3}); }),
           error_of([&] { mean(x, {-4}); }),
           error_of([&] {
             amax(x, {0, 3});
           }),
           error_of([&] { max(x, 3); }),
           error_of([&] { argmin(x, -4); }),
           error_of([&] { var(x, {5}); }),
           error_of([&] { logsumexp(x, {3}); }),
       }) {
    EXPECT_THAT(msg, HasSubstr("out of range for a tensor of shape [3, 5, 7]"));
    EXPECT_THAT(msg, HasSubstr("valid dims: -3 to 2"));
  }
  EXPECT_THAT(error_of([&] { sum(x, {1, -2}); }), HasSubstr("sum: dim 1 appears twice"));
}

TEST(Reduce, MeanAndVarOfIntegersNameTheDtype) {
  Tensor i = zeros({2, 3}, DType::Int64);
  std::string msg = error_of([&] { i.mean(); });
  EXPECT_THAT(msg, HasSubstr("mean"));
  EXPECT_THAT(msg, HasSubstr("must be floating point, but got int64"));
  EXPECT_THAT(msg, HasSubstr("[2, 3]"));
  EXPECT_THAT(error_of([&] { var(zeros({4}, DType::Int32)); }), HasSubstr("var: could not infer the output dtype"));
  EXPECT_THAT(error_of([&] { ember::std(zeros({4}, DType::Bool)); }), HasSubstr("got bool"));
}

TEST(Reduce, MaxOverAnEmptyDimIsAnError) {
  Tensor x = zeros({0, 3});
  std::string msg = error_of([&] { max(x, 0); });
  EXPECT_THAT(msg, HasSubstr("max: cannot reduce over a zero-size dimension of a tensor of shape [0, 3]"));
  EXPECT_THAT(error_of([&] { x.max(); }), HasSubstr("max: cannot reduce over a zero-size dimension"));
  EXPECT_THAT(error_of([&] { x.min(); }), HasSubstr("min: cannot reduce"));
  EXPECT_THAT(error_of([&] { amin(x, {0}); }), HasSubstr("amin: cannot reduce"));
  EXPECT_THAT(error_of([&] { argmax(x); }), HasSubstr("argmax: cannot reduce"));
  EXPECT_THAT(error_of([&] { argmin(zeros({2, 0}), 1); }), HasSubstr("shape [2, 0]"));
}

// ---------------- gradients ----------------

using testing::gradcheck;
using testing::random_leaf;

// A [2, 3, 5] float64 leaf that is non-contiguous (a permuted view).
Tensor permuted_leaf(uint64_t seed) {
  return random_leaf({5, 3, 2}, seed).detach().permute({2, 1, 0}).set_requires_grad();
}

TEST(ReduceGrad, MeanSumLogsumexp) {
  for (const Tensor& x : {random_leaf({2, 3, 5}, 1), permuted_leaf(2)}) {
    for (const Shape& dims : {Shape{}, Shape{1}, Shape{0, -1}}) {
      bool keepdim = dims.size() == 1;
      EXPECT_TRUE(gradcheck([&](const TensorList& in) { return mean(in[0], dims, keepdim); }, {x}));
      EXPECT_TRUE(gradcheck([&](const TensorList& in) { return sum(in[0], dims, !keepdim); }, {x}));
      EXPECT_TRUE(gradcheck([&](const TensorList& in) { return logsumexp(in[0], dims, keepdim); }, {x}));
    }
  }
}

TEST(ReduceGrad, AmaxAminMaxMin) {
  for (const Tensor& x : {random_leaf({2, 3, 5}, 3), permuted_leaf(4)}) {
    for (const Shape& dims : {Shape{}, Shape{1}, Shape{0, -1}}) {
      EXPECT_TRUE(gradcheck([&](const TensorList& in) { return amax(in[0], dims, true); }, {x}));
      EXPECT_TRUE(gradcheck([&](const TensorList& in) { return amin(in[0], dims); }, {x}));
    }
    for (int64_t dim : {0, 1, -1}) {
      bool keepdim = dim == 1;
      EXPECT_TRUE(gradcheck([&](const TensorList& in) { return max(in[0], dim, keepdim).first; }, {x}));
      EXPECT_TRUE(gradcheck([&](const TensorList& in) { return in[0].min(dim, !keepdim).first; }, {x}));
    }
    EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].max(); }, {x}));
    EXPECT_TRUE(gradcheck([](const TensorList& in) { return in[0].min(); }, {x}));
  }
}

TEST(ReduceGrad, VarStd) {
  for (const Tensor& x : {random_leaf({2, 3, 5}, 5), permuted_leaf(6)}) {
    for (const Shape& dims : {Shape{}, Shape{1}, Shape{0, -1}}) {
      for (int64_t c : {0, 1}) {
        EXPECT_TRUE(gradcheck([&](const TensorList& in) { return var(in[0], dims, c, true); }, {x}));
        EXPECT_TRUE(gradcheck([&](const TensorList& in) { return in[0].std(dims, c); }, {x}));
      }
    }
  }
}

TEST(ReduceGrad, TiesShareTheGradientOfAmaxAndFullMax) {
  Tensor x = from_vector<double>({1, 3, 3, 2, 4, 4, 4, 0}, {2, 4}).set_requires_grad();
  amax(x, {1}).sum().backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{0, 0.5, 0.5, 0, 1.0 / 3, 1.0 / 3, 1.0 / 3, 0}));
  Tensor y = from_vector<double>({5, 1, 5, 5}, {2, 2}).set_requires_grad();
  (y.max() * 6.0).backward();
  EXPECT_EQ(to_vector<double>(y.grad()), (std::vector<double>{2, 0, 2, 2}));
  EXPECT_EQ(y.max().grad_fn()->name(), "MaxBackward");
  EXPECT_EQ(amin(y, {0}).grad_fn()->name(), "AminBackward");
}

TEST(ReduceGrad, MaxWithDimSendsTheGradientToTheSelectedIndex) {
  Tensor x = from_vector<double>({1, 3, 3, 2, 0, -1}, {2, 3}).set_requires_grad();
  auto [v, i] = max(x, 1, true);
  EXPECT_FALSE(i.requires_grad());
  (v * from_vector<double>({10, 20}, {2, 1})).sum().backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{0, 10, 0, 20, 0, 0}));
  Tensor z = from_vector<double>({1, 3, 3, 2, 0, -1}, {2, 3}).set_requires_grad();
  min(z, 0).first.sum().backward();
  EXPECT_EQ(to_vector<double>(z.grad()), (std::vector<double>{1, 0, 0, 0, 1, 1}));
}

TEST(ReduceGrad, MeanVarStdByHand) {
  Tensor x = from_vector<double>({1, 2, 3, 6}, {4}).set_requires_grad();
  mean(x).backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{0.25, 0.25, 0.25, 0.25}));
  // var = sum((x - 3)^2) / 3; d/dx = 2 (x - 3) / 3.
  Tensor y = from_vector<double>({1, 2, 3, 6}, {4}).set_requires_grad();
  var(y).backward();
  expect_close(y.grad(), {4}, {-4.0 / 3, -2.0 / 3, 0, 2}, 1e-15, 0, "var grad");
  // std of a constant is 0: its gradient is taken as 0, not NaN.
  Tensor c = full({3}, 2.0, DType::Float64).set_requires_grad();
  ember::std(c).backward();
  EXPECT_EQ(to_vector<double>(c.grad()), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(var(y).grad_fn()->name(), "VarBackward");
}

TEST(ReduceGrad, HalfPrecisionGradientsKeepTheirDtype) {
  Tensor x = from_vector<float>({1, 4, 4, 2}, {2, 2}).to(DType::Float16).set_requires_grad();
  amax(x, {1}).sum().backward();
  EXPECT_EQ(x.grad().dtype(), DType::Float16);
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{0, 1, 1, 0}));
}

}  // namespace
}  // namespace ember
