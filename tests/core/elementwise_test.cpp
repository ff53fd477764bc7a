// Elementwise ops (ember/core/ops/elementwise.cpp, ember/kernels/cpu/elementwise.cpp,
// ember/core/ops/elementwise_args.cpp) against std:: math in double: every unary
// and binary op on odd sizes, strided, broadcast and stride-0 inputs, scalar
// overloads and operators, PyTorch's type promotion, 16-bit floats,
// comparisons, where, NaN propagation and integer pow.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;

const double kNaN = std::numeric_limits<double>::quiet_NaN();

// n values spread over [lo, hi] in a scrambled order, so that neighbours differ.
std::vector<double> spread(int64_t n, double lo, double hi) {
  std::vector<double> v(size_t(n), lo);
  for (int64_t i = 0; n > 1 && i < n; ++i) v[size_t(i)] = lo + (hi - lo) * double((i * 7919) % n) / double(n - 1);
  return v;
}

enum class Layout { Contiguous, Strided, Broadcast };
const char* layout_name(Layout l) {
  return l == Layout::Contiguous ? "contiguous" : l == Layout::Strided ? "strided" : "stride-0";
}

// A 1-D tensor of dtype holding v (Broadcast: v[0] repeated) in the given layout.
Tensor make_1d(const std::vector<double>& v, DType dtype, Layout layout) {
  int64_t n = int64_t(v.size());
  Tensor dense = from_vector<double>(v).to(dtype);
  if (layout == Layout::Contiguous) return dense;
  if (layout == Layout::Broadcast) return dense.narrow(0, 0, 1).expand({n});
  Tensor base = full({n, 3}, -7.0, dtype);
  base.select(1, 1).copy_(dense);
  Tensor out = base.select(1, 1);
  EXPECT_EQ(out.stride(0), 3);
  return out;
}

// The element of a (of shape `shape`, broadcast to out) at out index `idx`.
double broadcast_at(const std::vector<double>& a, const Shape& shape, const Shape& idx) {
  int64_t flat = 0, lead = int64_t(idx.size()) - int64_t(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + (shape[d] == 1 ? 0 : idx[d + size_t(lead)]);
  return a[size_t(flat)];
}

// NumPy broadcasting of two shapes known to be compatible.
Shape broadcast_shape(const Shape& a, const Shape& b) {
  Shape out(std::max(a.size(), b.size()), 1);
  for (size_t i = 0; i < out.size(); ++i) {
    int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1, db = i < b.size() ? b[b.size() - 1 - i] : 1;
    out[out.size() - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<Shape> all_indices(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<Shape> out;
  Shape idx(shape.size(), 0);
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(idx);
    for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
      if (++idx[d] < shape[d]) break;
      idx[d] = 0;
    }
  }
  return out;
}

bool close(double got, double want, double rtol, double atol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= atol + rtol * std::fabs(want);
}

// rtol/atol for results of dtype, computed from inputs exactly representable in it.
double rtol_of(DType t) {
  switch (t) {
    case DType::Float64: return 1e-12;
    case DType::Float32: return 2e-6;
    case DType::Float16: return 1.5e-3;
    case DType::BFloat16: return 1e-2;
    default: return 0;
  }
}

// ---------------- unary ----------------

struct UnaryCase {
  const char* name;
  Tensor (*op)(const Tensor&);
  double (*ref)(double);
  double lo, hi;
};

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }

const std::vector<UnaryCase>& unary_cases() {
  static const std::vector<UnaryCase> cases = {
      {"neg", [](const Tensor& x) { return neg(x); }, [](double x) { return -x; }, -3, 3},
      {"exp", [](const Tensor& x) { return exp(x); }, [](double x) { return std::exp(x); }, -4, 4},
      {"log", [](const Tensor& x) { return log(x); }, [](double x) { return std::log(x); }, 0.01, 50},
      {"sqrt", [](const Tensor& x) { return sqrt(x); }, [](double x) { return std::sqrt(x); }, 0, 50},
      {"rsqrt", [](const Tensor& x) { return rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 0.01, 50},
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }, -5, 5},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, [](double x) { return 1 / (1 + std::exp(-x)); }, -8, 8},
      {"relu", [](const Tensor& x) { return relu(x); }, [](double x) { return x > 0 ? x : 0.0; }, -3, 3},
      {"gelu", [](const Tensor& x) { return gelu(x); }, gelu_ref, -5, 5},
      {"abs", [](const Tensor& x) { return abs(x); }, [](double x) { return std::fabs(x); }, -3, 3},
      {"sign", [](const Tensor& x) { return sign(x); }, [](double x) { return double((x > 0) - (x < 0)); }, -3, 3},
      {"sin", [](const Tensor& x) { return sin(x); }, [](double x) { return std::sin(x); }, -6, 6},
      {"cos", [](const Tensor& x) { return cos(x); }, [](double x) { return std::cos(x); }, -6, 6},
      {"reciprocal", [](const Tensor& x) { return reciprocal(x); }, [](double x) { return 1 / x; }, 0.05, 9},
      {"erf", [](const Tensor& x) { return erf(x); }, [](double x) { return std::erf(x); }, -3, 3},
      {"square", [](const Tensor& x) { return square(x); }, [](double x) { return x * x; }, -9, 9},
  };
  return cases;
}

void expect_unary(const UnaryCase& c, const Tensor& x, const std::string& what) {
  Tensor y = c.op(x);
  ASSERT_EQ(y.shape(), x.shape()) << what;
  ASSERT_EQ(y.dtype(), x.dtype()) << what;
  // Laid out as a dense input (transposed too, as PyTorch), else contiguous.
  if (!x.is_contiguous() && x.is_non_overlapping_and_dense()) {
    EXPECT_EQ(y.strides(), x.strides()) << what;
  } else {
    EXPECT_TRUE(y.is_contiguous()) << what;
  }
  std::vector<double> in = to_vector<double>(x), out = to_vector<double>(y);
  double rtol = rtol_of(x.dtype());
  int bad = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    double want = c.ref(in[i]);
    if (!close(out[i], want, rtol, rtol) && ++bad <= 3) {
      ADD_FAILURE() << what << " element " << i << ": " << c.name << "(" << in[i] << ") = " << out[i] << ", want "
                    << want;
    }
  }
}

TEST(Elementwise, EveryUnaryOpMatchesStdMath) {
  for (const UnaryCase& c : unary_cases()) {
    for (int64_t n : {1, 7, 1023, 1025}) {
      for (Layout l : {Layout::Contiguous, Layout::Strided, Layout::Broadcast}) {
        for (DType dt : {DType::Float32, DType::Float64}) {
          std::vector<double> v = spread(n, c.lo, c.hi);
          if (l == Layout::Broadcast) v[0] = 0.5 * (c.lo + c.hi) + 0.25;
          expect_unary(c, make_1d(v, dt, l),
                       std::string(c.name) + " n=" + std::to_string(n) + " " + layout_name(l) + " " + dtype_name(dt));
        }
      }
    }
  }
}

TEST(Elementwise, UnaryOnTransposedAndExpandedMatrices) {
  for (const UnaryCase& c : unary_cases()) {
    std::vector<double> v = spread(35, c.lo, c.hi);
    Tensor m = from_vector<double>(v, {7, 5}).to(DType::Float32);
    expect_unary(c, m.t(), std::string(c.name) + " transposed");
    expect_unary(c, m.narrow(1, 1, 3).t(), std::string(c.name) + " narrowed+transposed");
    expect_unary(c, m.select(1, 2).unsqueeze(1).expand({7, 4}), std::string(c.name) + " expanded");
  }
}

TEST(Elementwise, UnaryOn16BitFloats) {
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {DType::Float16, DType::BFloat16}) {
      // Inputs rounded to dtype first, so the reference sees the same values.
      expect_unary(c, make_1d(spread(257, c.lo, c.hi), dt, Layout::Contiguous),
                   std::string(c.name) + " " + dtype_name(dt));
      expect_unary(c, make_1d(spread(33, c.lo, c.hi), dt, Layout::Strided),
                   std::string(c.name) + " strided " + dtype_name(dt));
    }
  }
}

TEST(Elementwise, FloatingOnlyOpsPromoteIntegersToFloat32) {
  Tensor i = from_vector<int32_t>({1, 4, 9});
  Tensor r = sqrt(i);
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(to_vector<float>(r), (std::vector<float>{1, 2, 3}));
  EXPECT_EQ(exp(from_vector<int64_t>({0})).dtype(), DType::Float32);
  // Ops defined on integers keep the dtype and are exact.
  Tensor a = from_vector<int64_t>({-5, 0, 7, (int64_t(1) << 40) + 1});
  EXPECT_EQ(neg(a).dtype(), DType::Int64);
  EXPECT_EQ(to_vector<int64_t>(neg(a)), (std::vector<int64_t>{5, 0, -7, -(int64_t(1) << 40) - 1}));
  EXPECT_EQ(to_vector<int64_t>(abs(a)), (std::vector<int64_t>{5, 0, 7, (int64_t(1) << 40) + 1}));
  EXPECT_EQ(to_vector<int64_t>(sign(a)), (std::vector<int64_t>{-1, 0, 1, 1}));
  EXPECT_EQ(to_vector<int64_t>(relu(a)), (std::vector<int64_t>{0, 0, 7, (int64_t(1) << 40) + 1}));
  EXPECT_EQ(to_vector<int64_t>(square(from_vector<int64_t>({-3, 3037000499}))),
            (std::vector<int64_t>{9, int64_t(3037000499) * 3037000499}));
  EXPECT_TRUE(throws_with([] { neg(from_vector<bool>({true})); }, {"neg", "bool"}));
}

TEST(Elementwise, ReluAndClampPropagateNaN) {
  Tensor x = from_vector<double>({kNaN, -1, 2});
  std::vector<double> r = to_vector<double>(relu(x));
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_EQ(r[1], 0.0);
  std::vector<double> c = to_vector<double>(clamp(x, -0.5, 0.5));
  EXPECT_TRUE(std::isnan(c[0]));
  EXPECT_EQ(c[1], -0.5);
  EXPECT_EQ(c[2], 0.5);
}

// ---------------- binary ----------------

struct BinaryCase {
  const char* name;
  Tensor (*op)(const Tensor&, const Tensor&);
  double (*ref)(double, double);
  double lo, hi;  // domain of the first operand (pow needs a positive base)
};

const std::vector<BinaryCase>& binary_cases() {
  static const std::vector<BinaryCase> cases = {
      {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, [](double a, double b) { return a + b; }, -5,
       5},
      {"add alpha", [](const Tensor& a, const Tensor& b) { return add(a, b, 2.5); },
       [](double a, double b) { return a + 2.5 * b; }, -5, 5},
      {"sub", [](const Tensor& a, const Tensor& b) { return sub(a, b); }, [](double a, double b) { return a - b; }, -5,
       5},
      {"sub alpha", [](const Tensor& a, const Tensor& b) { return sub(a, b, -3); },
       [](double a, double b) { return a + 3 * b; }, -5, 5},
      {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, [](double a, double b) { return a * b; }, -5,
       5},
      {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, [](double a, double b) { return a / b; }, -5,
       5},
      {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -5, 5},
      {"minimum", [](const Tensor& a, const Tensor& b) { return minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -5, 5},
      {"pow", [](const Tensor& a, const Tensor& b) { return pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.1, 4},
  };
  return cases;
}

// Second operand values: nonzero (for div), both signs.
std::vector<double> second_operand(int64_t n) {
  std::vector<double> v = spread(n, -2.5, 2.75);
  for (double& x : v) {
    if (std::fabs(x) < 0.1) x = 0.375;
  }
  return v;
}

void expect_binary(const BinaryCase& c, const Tensor& a, const Tensor& b, const std::string& what) {
  Tensor y = c.op(a, b);
  Shape out_shape = broadcast_shape(a.shape(), b.shape());
  ASSERT_EQ(y.shape(), out_shape) << what;
  EXPECT_EQ(y.dtype(), promote_types(a.dtype(), b.dtype())) << what;
  std::vector<double> va = to_vector<double>(a), vb = to_vector<double>(b), vy = to_vector<double>(y);
  double rtol = rtol_of(y.dtype()) * 4;
  int bad = 0;
  std::vector<Shape> idx = all_indices(out_shape);
  for (size_t i = 0; i < idx.size(); ++i) {
    double x = broadcast_at(va, a.shape(), idx[i]), z = broadcast_at(vb, b.shape(), idx[i]);
    double want = c.ref(x, z);
    if (!close(vy[i], want, rtol, rtol) && ++bad <= 3) {
      ADD_FAILURE() << what << " element " << i << ": " << c.name << "(" << x << ", " << z << ") = " << vy[i]
                    << ", want " << want;
    }
  }
}

TEST(Elementwise, EveryBinaryOpMatchesStdMathOnOddSizesAndLayouts) {
  const Layout kAll[] = {Layout::Contiguous, Layout::Strided, Layout::Broadcast};
  for (const BinaryCase& c : binary_cases()) {
    for (int64_t n : {1, 7, 1023, 1025}) {
      for (Layout la : kAll) {
        for (Layout lb : kAll) {
          // Every pairing on small sizes; on large ones, each layout once per side.
          if (n > 7 && la == lb && la != Layout::Contiguous) continue;
          if (n > 7 && la != lb && la == Layout::Contiguous) continue;
          for (DType dt : {DType::Float32, DType::Float64}) {
            Tensor a = make_1d(spread(n, c.lo, c.hi), dt, la);
            Tensor b = make_1d(second_operand(n), dt, lb);
            expect_binary(c, a, b,
                          std::string(c.name) + " n=" + std::to_string(n) + " " + layout_name(la) + "/" +
                              layout_name(lb) + " " + dtype_name(dt));
          }
        }
      }
    }
  }
}

TEST(Elementwise, BinaryBroadcastsAcrossRanks) {
  for (const BinaryCase& c : binary_cases()) {
    Tensor a = from_vector<double>(spread(15, c.lo, c.hi), {3, 1, 5});
    Tensor b = from_vector<double>(second_operand(4), {4, 1});
    expect_binary(c, a, b, std::string(c.name) + " [3,1,5] x [4,1]");
    expect_binary(c, a.select(2, 1), b.t(), std::string(c.name) + " strided [3,1] x [1,4]");
    // Non-contiguous operands of the full shape, and a 0-dim operand.
    Tensor big = from_vector<double>(spread(60, c.lo, c.hi), {5, 4, 3}).permute({2, 1, 0});
    expect_binary(c, big, b, std::string(c.name) + " permuted [3,4,5] x [4,1]");
    expect_binary(c, a, from_vector<double>({1.5}).view({}), std::string(c.name) + " with 0-dim");
  }
}

TEST(Elementwise, BinaryOn16BitFloats) {
  for (const BinaryCase& c : binary_cases()) {
    for (DType dt : {DType::Float16, DType::BFloat16}) {
      Tensor a = from_vector<double>(spread(30, c.lo, c.hi), {5, 6}).to(dt);
      Tensor b = from_vector<double>(second_operand(6), {6}).to(dt);
      expect_binary(c, a, b, std::string(c.name) + " " + dtype_name(dt));
      expect_binary(c, a.t(), b.narrow(0, 1, 5), std::string(c.name) + " transposed " + dtype_name(dt));
    }
  }
}

TEST(Elementwise, IncompatibleShapesNameBoth) {
  Tensor a = zeros({2, 3}), b = zeros({4});
  EXPECT_TRUE(throws_with([&] { add(a, b); }, {"add", "[2, 3]", "[4]", "broadcast"}));
  EXPECT_TRUE(throws_with([&] { mul(zeros({2, 3, 1}), zeros({2, 4})); }, {"mul", "[2, 3, 1]", "[2, 4]"}));
  EXPECT_TRUE(throws_with([&] { lt(a, b); }, {"lt", "[2, 3]", "[4]"}));
  EXPECT_TRUE(throws_with([&] { where(zeros({2}, DType::Bool), a, b); }, {"where", "[2, 3]", "[4]"}));
  EXPECT_TRUE(throws_with([&] { where(zeros({2, 3}), a, a); }, {"where", "bool", "float32"}));
  EXPECT_TRUE(throws_with([&] { sub(from_vector<bool>({true}), from_vector<bool>({false})); }, {"sub", "bool"}));
}

TEST(Elementwise, ScalarOverloadsAndOperators) {
  Tensor a = from_vector<float>({1, 2, 4, -8});
  auto v = [](const Tensor& t) { return to_vector<double>(t); };
  EXPECT_EQ(v(a + 2.0f), (std::vector<double>{3, 4, 6, -6}));
  EXPECT_EQ(v(2.0f + a), (std::vector<double>{3, 4, 6, -6}));
  EXPECT_EQ(v(a - 1), (std::vector<double>{0, 1, 3, -9}));
  EXPECT_EQ(v(2.0 - a), (std::vector<double>{1, 0, -2, 10}));
  EXPECT_EQ(v(a * 2.0f), (std::vector<double>{2, 4, 8, -16}));
  EXPECT_EQ(v(3 * a), (std::vector<double>{3, 6, 12, -24}));
  EXPECT_EQ(v(a / 4), (std::vector<double>{0.25, 0.5, 1, -2}));
  EXPECT_EQ(v(1 / a), (std::vector<double>{1, 0.5, 0.25, -0.125}));
  EXPECT_EQ(v(-a), (std::vector<double>{-1, -2, -4, 8}));
  EXPECT_EQ(v(a + a), (std::vector<double>{2, 4, 8, -16}));
  EXPECT_EQ(v(a - a * a), (std::vector<double>{0, -2, -12, -72}));
  EXPECT_EQ(v(a / a), (std::vector<double>{1, 1, 1, 1}));
  EXPECT_EQ(v(pow(a, 2)), (std::vector<double>{1, 4, 16, 64}));
  EXPECT_EQ(v(pow(from_vector<float>({4, 16, 0.25f}), 0.5)), (std::vector<double>{2, 4, 0.5}));
  EXPECT_EQ(v(clamp(a, 1.5, 3)), (std::vector<double>{1.5, 2, 3, 1.5}));
  EXPECT_EQ(v(clamp(a, std::nullopt, 3)), (std::vector<double>{1, 2, 3, -8}));
  EXPECT_EQ(v(clamp(a, -2, std::nullopt)), (std::vector<double>{1, 2, 4, -2}));
  EXPECT_TRUE(throws_with([&] { clamp(a, std::nullopt, std::nullopt); }, {"clamp", "min", "max"}));
  // A scalar on a non-contiguous tensor.
  Tensor m = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3}).t();
  EXPECT_EQ(v(m - 1), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(Elementwise, TypePromotionFollowsPyTorch) {
  Tensor i32 = from_vector<int32_t>({7, -3, 4});
  Tensor i64 = from_vector<int64_t>({2, 2, 2});
  Tensor f16 = from_vector<float>({0.5f, 0.25f, 2.0f}).to(DType::Float16);
  Tensor bf16 = from_vector<float>({1, 2, 3}).to(DType::BFloat16);
  Tensor f32 = from_vector<float>({1, 2, 3});
  Tensor f64 = from_vector<double>({1, 2, 3});
  Tensor b = from_vector<bool>({true, false, true});

  Tensor r = i32 + f16;  // int32 + float16 -> float16
  EXPECT_EQ(r.dtype(), DType::Float16);
  EXPECT_EQ(to_vector<double>(r), (std::vector<double>{7.5, -2.75, 6}));
  r = i32 * 2.5;  // int tensor * float scalar -> float32
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(to_vector<double>(r), (std::vector<double>{17.5, -7.5, 10}));
  r = i32 * 2;  // an int scalar keeps int32
  EXPECT_EQ(r.dtype(), DType::Int32);
  EXPECT_EQ(to_vector<int32_t>(r), (std::vector<int32_t>{14, -6, 8}));
  r = i32 / i64;  // true division
  EXPECT_EQ(r.dtype(), DType::Float32);
  EXPECT_EQ(to_vector<double>(r), (std::vector<double>{3.5, -1.5, 2}));
  EXPECT_EQ((i32 / 2).dtype(), DType::Float32);
  EXPECT_EQ(to_vector<double>(1 / i64), (std::vector<double>{0.5, 0.5, 0.5}));
  r = b + i32;  // bool + int -> int
  EXPECT_EQ(r.dtype(), DType::Int32);
  EXPECT_EQ(to_vector<int32_t>(r), (std::vector<int32_t>{8, -3, 5}));
  r = b + 3;  // bool tensor + int scalar -> int64
  EXPECT_EQ(r.dtype(), DType::Int64);
  EXPECT_EQ(to_vector<int64_t>(r), (std::vector<int64_t>{4, 3, 4}));
  EXPECT_EQ((b * 1.5).dtype(), DType::Float32);
  EXPECT_EQ((i32 + i64).dtype(), DType::Int64);
  EXPECT_EQ((f16 + bf16).dtype(), DType::Float32);
  EXPECT_EQ((f16 * 2.5).dtype(), DType::Float16);
  EXPECT_EQ((f32 + f64).dtype(), DType::Float64);
  EXPECT_EQ((bf16 + f32).dtype(), DType::Float32);
  EXPECT_EQ(maximum(i32, f16).dtype(), DType::Float16);
  EXPECT_EQ(pow(i32, 2).dtype(), DType::Int32);
  EXPECT_EQ(pow(i32, 0.5).dtype(), DType::Float32);
  // int64 arithmetic stays exact beyond 2^53.
  Tensor big = from_vector<int64_t>({(int64_t(1) << 60) + 1});
  EXPECT_EQ(to_vector<int64_t>(big + 1)[0], (int64_t(1) << 60) + 2);
  EXPECT_EQ(to_vector<int64_t>(big * (big - big + 3))[0], 3 * ((int64_t(1) << 60) + 1));
}

TEST(Elementwise, ZeroDimTensorsPromoteLikeScalars) {
  // PyTorch: a 0-dim tensor only lifts the category of a dimensioned one.
  Tensor f16 = from_vector<float>({1, 2}).to(DType::Float16);
  Tensor scale32 = full({}, 0.5, DType::Float32);
  Tensor r = f16 * scale32;
  EXPECT_EQ(r.dtype(), DType::Float16);
  EXPECT_EQ(to_vector<double>(r), (std::vector<double>{0.5, 1}));
  EXPECT_EQ((from_vector<int32_t>({1}) + full({}, 2, DType::Int64)).dtype(), DType::Int32);
  EXPECT_EQ((from_vector<int32_t>({1}) + full({}, 2.5, DType::Float64)).dtype(), DType::Float64);
  EXPECT_EQ((from_vector<bool>({true}) + full({}, 2, DType::Int64)).dtype(), DType::Int64);
  EXPECT_EQ((full({}, 1, DType::Float64) + full({}, 2, DType::Float32)).dtype(), DType::Float64);
  EXPECT_EQ(where(from_vector<bool>({true, false}), f16, full({}, 3.0, DType::Float64)).dtype(), DType::Float16);
  EXPECT_EQ(lt(f16, full({}, 1.5, DType::Float64)).dtype(), DType::Bool);
}

// ---------------- comparisons, logical ops, where ----------------

TEST(Elementwise, ComparisonsGiveBoolWithBroadcasting) {
  Tensor a = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector<float>({2, 2, 5}, {3});
  using V = std::vector<bool>;
  EXPECT_EQ(eq(a, b).dtype(), DType::Bool);
  EXPECT_EQ(to_vector<bool>(eq(a, b)), (V{0, 1, 0, 0, 0, 0}));
  EXPECT_EQ(to_vector<bool>(a != b), (V{1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(to_vector<bool>(a < b), (V{1, 0, 1, 0, 0, 0}));
  EXPECT_EQ(to_vector<bool>(a <= b), (V{1, 1, 1, 0, 0, 0}));
  EXPECT_EQ(to_vector<bool>(a > b), (V{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(to_vector<bool>(a >= b), (V{0, 1, 0, 1, 1, 1}));
  EXPECT_EQ(to_vector<bool>(a.t() > b.narrow(0, 0, 2)), (V{0, 1, 0, 1, 1, 1}));
  EXPECT_EQ(to_vector<bool>(a > 3), (V{0, 0, 0, 1, 1, 1}));
  EXPECT_EQ(to_vector<bool>(a <= 2), (V{1, 1, 0, 0, 0, 0}));
  EXPECT_EQ(to_vector<bool>(eq(a, 4)), (V{0, 0, 0, 1, 0, 0}));
  EXPECT_EQ(to_vector<bool>(ne(a, 4)), (V{1, 1, 1, 0, 1, 1}));
  EXPECT_EQ(to_vector<bool>(ge(a, 5.5)), (V{0, 0, 0, 0, 0, 1}));
  EXPECT_EQ(to_vector<bool>(lt(a, 1.5)), (V{1, 0, 0, 0, 0, 0}));
  // A float scalar is compared as a float, not truncated to the int dtype.
  Tensor i = from_vector<int32_t>({1, 2, 3});
  EXPECT_EQ(to_vector<bool>(i < 2.5), (V{1, 1, 0}));
  EXPECT_EQ(to_vector<bool>(eq(i, 2.5)), (V{0, 0, 0}));
  // Mixed dtypes compare in the promoted type; NaN compares false except !=.
  EXPECT_EQ(to_vector<bool>(i > from_vector<double>({0.5, 2.5, 2.5})), (V{1, 0, 1}));
  Tensor n = from_vector<double>({kNaN, 1});
  EXPECT_EQ(to_vector<bool>(eq(n, n)), (V{0, 1}));
  EXPECT_EQ(to_vector<bool>(ne(n, n)), (V{1, 0}));
  // Half types.
  Tensor h = from_vector<float>({0.1f, 0.2f}).to(DType::Float16);
  EXPECT_EQ(to_vector<bool>(h < 0.15), (V{1, 0}));
}

TEST(Elementwise, LogicalOps) {
  Tensor a = from_vector<bool>({true, true, false, false});
  Tensor b = from_vector<bool>({true, false, true, false});
  using V = std::vector<bool>;
  EXPECT_EQ(to_vector<bool>(logical_and(a, b)), (V{1, 0, 0, 0}));
  EXPECT_EQ(to_vector<bool>(logical_or(a, b)), (V{1, 1, 1, 0}));
  EXPECT_EQ(to_vector<bool>(logical_not(a)), (V{0, 0, 1, 1}));
  // Non-bool inputs are truthy when nonzero.
  Tensor f = from_vector<float>({0, 2.5, -1, 0});
  EXPECT_EQ(logical_not(f).dtype(), DType::Bool);
  EXPECT_EQ(to_vector<bool>(logical_not(f)), (V{1, 0, 0, 1}));
  EXPECT_EQ(to_vector<bool>(logical_and(f, b)), (V{0, 0, 1, 0}));
  EXPECT_EQ(to_vector<bool>(logical_or(f, from_vector<int32_t>({0}))), (V{0, 1, 1, 0}));
}

TEST(Elementwise, WhereBroadcastsAndPromotes) {
  Tensor cond = from_vector<bool>({true, false, true}, {3, 1});
  Tensor a = from_vector<float>({1, 2, 3, 4}, {1, 4});
  Tensor b = from_vector<float>({-1, -2}, {2, 1, 1});
  Tensor r = where(cond, a, b);
  ASSERT_EQ(r.shape(), (Shape{2, 3, 4}));
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) want.push_back(j != 1 ? k + 1 : -(i + 1));
  EXPECT_EQ(to_vector<double>(r), want);
  // Scalars on either side; int32 with float16 promotes to float16.
  Tensor c2 = from_vector<bool>({true, false});
  EXPECT_EQ(to_vector<double>(where(c2, from_vector<float>({5, 6}), 0.5)), (std::vector<double>{5, 0.5}));
  EXPECT_EQ(to_vector<double>(where(c2, 7, from_vector<float>({5, 6}))), (std::vector<double>{7, 6}));
  Tensor w = where(c2, from_vector<int32_t>({1, 2}), from_vector<float>({0.5f, 0.25f}).to(DType::Float16));
  EXPECT_EQ(w.dtype(), DType::Float16);
  EXPECT_EQ(to_vector<double>(w), (std::vector<double>{1, 0.25}));
  EXPECT_EQ(where(c2, from_vector<int32_t>({1, 2}), 2.5).dtype(), DType::Float32);
  // Non-contiguous condition.
  Tensor cm = from_vector<bool>({true, false, false, true, true, false}, {2, 3}).t();
  EXPECT_EQ(to_vector<double>(where(cm, 1.0, zeros({3, 2}))), (std::vector<double>{1, 1, 0, 1, 0, 0}));
}

TEST(Elementwise, MaximumMinimumPropagateNaN) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor a = from_vector<double>({kNaN, 1, 2, kNaN}).to(dt);
    Tensor b = from_vector<double>({1, kNaN, 3, kNaN}).to(dt);
    for (const Tensor& r : {maximum(a, b), minimum(a, b), maximum(b, a), minimum(b, a)}) {
      std::vector<double> v = to_vector<double>(r);
      EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1]) && std::isnan(v[3])) << dtype_name(dt);
    }
    EXPECT_EQ(to_vector<double>(maximum(a, b))[2], 3.0);
    EXPECT_EQ(to_vector<double>(minimum(a, b))[2], 2.0);
  }
  // Integers: no NaN, plain max/min, exact for int64.
  Tensor i = from_vector<int64_t>({int64_t(1) << 62, -5});
  Tensor j = from_vector<int64_t>({(int64_t(1) << 62) + 1, -6});
  EXPECT_EQ(to_vector<int64_t>(maximum(i, j)), (std::vector<int64_t>{(int64_t(1) << 62) + 1, -5}));
  EXPECT_EQ(to_vector<int64_t>(minimum(i, j)), (std::vector<int64_t>{int64_t(1) << 62, -6}));
}

TEST(Elementwise, IntegerPowIsExact) {
  Tensor a = from_vector<int32_t>({2, 3, -2, 0, 5, -1});
  EXPECT_EQ(to_vector<int32_t>(pow(a, 3)), (std::vector<int32_t>{8, 27, -8, 0, 125, -1}));
  EXPECT_EQ(to_vector<int32_t>(pow(a, 0)), (std::vector<int32_t>{1, 1, 1, 1, 1, 1}));
  Tensor e = from_vector<int32_t>({10, 0, 3, 2, 1, 7});
  EXPECT_EQ(to_vector<int32_t>(pow(a, e)), (std::vector<int32_t>{1024, 1, -8, 0, 5, -1}));
  // Negative integer tensor exponents: 0 unless the base is 1 or -1; a
  // negative integer scalar exponent is an error, as in PyTorch.
  EXPECT_TRUE(throws_with([] { pow(from_vector<int64_t>({2}), -1); }, {"pow", "negative integer powers", "int64"}));
  Tensor base = from_vector<int64_t>({2, -1, 1, -1, 3});
  Tensor neg_e = from_vector<int64_t>({-1, -3, -5, -2, -1});
  EXPECT_EQ(to_vector<int64_t>(pow(base, neg_e)), (std::vector<int64_t>{0, -1, 1, 1, 0}));
  // 3^39 needs all 62 bits: a float computation would round it.
  Tensor t = from_vector<int64_t>({3});
  EXPECT_EQ(to_vector<int64_t>(pow(t, 39))[0], int64_t(4052555153018976267));
  EXPECT_EQ(to_vector<int64_t>(pow(t, from_vector<int64_t>({39})))[0], int64_t(4052555153018976267));
}

TEST(Elementwise, ManyDimsWorkWhenTheyMerge) {
  Tensor x = ones({1}).view(Shape(20, 1));
  EXPECT_EQ(exp(x).dim(), 20);
  Tensor y = ones(Shape(14, 2));
  EXPECT_EQ((y + 1.0).sum().item<double>(), 2.0 * 16384);
}

TEST(Elementwise, TooManyUnmergeableDimsIsAnError) {
  // Every other element of every dim: 13 dims no layout merge can fold (a
  // permuted dense tensor would fold into one, in its memory order).
  Tensor x = zeros(Shape(13, 3));
  for (int64_t d = 0; d < 13; ++d) x = x.slice(d, 0, 3, 2);
  EXPECT_TRUE(throws_with([&] { exp(x); }, {"exp", "13 dims after merging", "12", "contiguous()"}));
  EXPECT_EQ(exp(x.contiguous()).dim(), 13);
  Shape reversed;
  for (int64_t d = 12; d >= 0; --d) reversed.push_back(d);
  EXPECT_EQ(exp(zeros(Shape(13, 2)).permute(reversed)).dim(), 13);
}

}  // namespace
}  // namespace ember
