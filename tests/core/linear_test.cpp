// linear: values against a naive float64 loop for every rank of x, with and
// without bias, on the fused path (gemm_bias_stub) and the unfused one;
// which layouts take which path and what the fused kernel receives; empty
// shapes; gradients (first and second order); error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "ember/core/ops/gemm_kernels.h"
#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"
#include "support/stub_swap.h"

namespace ember {
namespace {

using testing::error_of;

using ::testing::HasSubstr;

// y[..., j] = sum_p x[..., p] * w[j, p] + b[j], in float64 by its definition.
struct Reference {
  Shape shape;
  std::vector<double> values;
  std::vector<double> scale;  // sum_p |x w| + |b| per element, for tolerances
};

Reference reference_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  std::vector<double> vx = to_vector<double>(x), vw = to_vector<double>(w);
  std::vector<double> vb = b.defined() ? to_vector<double>(b) : std::vector<double>(size_t(w.size(0)), 0.0);
  const int64_t n = w.size(0), k = w.size(1);
  Reference r;
  r.shape = x.shape();
  r.shape.back() = n;
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double acc = vb[size_t(j)], scale = std::fabs(vb[size_t(j)]);
      for (int64_t p = 0; p < k; ++p) {
        double t = vx[size_t(i * k + p)] * vw[size_t(j * k + p)];
        acc += t;
        scale += std::fabs(t);
      }
      r.values.push_back(acc);
      r.scale.push_back(scale);
    }
  }
  return r;
}

::testing::AssertionResult matches_reference(const Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b,
                                             double rtol, double atol) {
  Reference r = reference_linear(x, w, b);
  if (y.shape() != r.shape) {
    return ::testing::AssertionFailure() << "shape " << shape_str(y.shape()) << ", expected " << shape_str(r.shape);
  }
  if (y.dtype() != x.dtype()) return ::testing::AssertionFailure() << "dtype " << dtype_name(y.dtype());
  std::vector<double> got = to_vector<double>(y);
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = rtol * std::fabs(r.values[i]) + atol * (r.scale[i] + 1e-300);
    if (!(std::fabs(got[i] - r.values[i]) <= tol)) {
      return ::testing::AssertionFailure()
             << "element " << i << " of " << shape_str(y.shape()) << ": got " << got[i] << ", expected " << r.values[i];
    }
  }
  return ::testing::AssertionSuccess();
}

Tensor random(const Shape& shape, DType dtype = DType::Float32, uint64_t seed = 1) {
  Generator g(seed);
  if (is_integral(dtype)) return randint(-5, 5, shape, dtype, kCPU, &g);
  return randn(shape, DType::Float64, kCPU, &g).to(dtype);
}

Shape input_shape(int64_t rank, int64_t k) {
  switch (rank) {
    case 1: return {k};
    case 2: return {5, k};
    case 3: return {2, 3, k};
    default: return {2, 1, 3, k};
  }
}

// Swaps the CPU bias GEMM for one that records its arguments and forwards them.
class GemmBiasSpy {
 public:
  GemmBiasSpy() : real_(gemm_bias_stub(DeviceType::CPU)) {
    real() = real_;
    calls().clear();
    gemm_bias_stub.set(DeviceType::CPU, &spy);
  }
  ~GemmBiasSpy() { gemm_bias_stub.set(DeviceType::CPU, real_); }
  GemmBiasSpy(const GemmBiasSpy&) = delete;
  GemmBiasSpy& operator=(const GemmBiasSpy&) = delete;

  struct Call {
    GemmArgs args;
    const void* bias;
  };
  static std::vector<Call>& calls() {
    static std::vector<Call> c;
    return c;
  }
  // How many calls since the last take(), and the last one.
  static size_t count() { return calls().size(); }
  static Call take() {
    EXPECT_EQ(calls().size(), 1u);
    Call c = calls().empty() ? Call{} : calls().back();
    calls().clear();
    return c;
  }

 private:
  static GemmBiasKernelFn*& real() {
    static GemmBiasKernelFn* fn = nullptr;
    return fn;
  }
  static bool spy(const GemmArgs& g, const void* bias) {
    calls().push_back({g, bias});
    return real()(g, bias);
  }
  GemmBiasKernelFn* real_;
};

// ---------------- values ----------------

TEST(Linear, EveryRankWithAndWithoutBiasMatchesTheNaiveLoop) {
  const int64_t k = 7, n = 4;
  for (int64_t rank = 1; rank <= 4; ++rank) {
    for (DType dt : {DType::Float32, DType::Float64, DType::Int32, DType::Int64}) {
      Tensor x = random(input_shape(rank, k), dt, uint64_t(rank)), w = random({n, k}, dt, 10), b = random({n}, dt, 11);
      double tol = dt == DType::Float32 ? 1e-6 : dt == DType::Float64 ? 1e-14 : 0;
      EXPECT_TRUE(matches_reference(linear(x, w, b), x, w, b, tol, tol)) << rank << "-D " << dtype_name(dt);
      EXPECT_TRUE(matches_reference(linear(x, w), x, w, Tensor(), tol, tol)) << rank << "-D " << dtype_name(dt);
    }
  }
}

TEST(Linear, AgreesWithMatmulPlusAdd) {
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int64}) {
    Tensor x = random({2, 3, 33}, dt, 1), w = random({9, 33}, dt, 2), b = random({9}, dt, 3);
    // The fused path rounds the 16-bit types once, matmul + add twice.
    double tol = dt == DType::BFloat16  ? 0x1p-7
                 : dt == DType::Float16 ? 0x1p-10
                 : dt == DType::Float32 ? 1e-6
                 : dt == DType::Float64 ? 1e-12
                                        : 0;
    EXPECT_TRUE(allclose(linear(x, w, b).to(DType::Float64), (matmul(x, w.t()) + b).to(DType::Float64), tol, tol))
        << dtype_name(dt);
    EXPECT_TRUE(equal(linear(x, w), matmul(x, w.t()))) << dtype_name(dt);
  }
}

TEST(Linear, HalfTypesAddTheBiasInFloatAndRoundOnce) {
  struct Case {
    DType dtype;
    double ulp;
  };
  for (Case c : {Case{DType::Float16, 0x1p-10}, Case{DType::BFloat16, 0x1p-7}}) {
    Tensor x = random({7, 33}, c.dtype, 1), w = random({5, 33}, c.dtype, 2), b = random({5}, c.dtype, 3);
    EXPECT_TRUE(matches_reference(linear(x, w, b), x, w, b, c.ulp, 1e-6)) << dtype_name(c.dtype);
  }
}

// ---------------- which path, and what the fused kernel receives ----------------

TEST(Linear, TwoDAbleInputsTakeTheFusedPathWithoutCopies) {
  GemmBiasSpy spy;
  const int64_t k = 5, n = 4;
  Tensor w = random({n, k}, DType::Float32, 1), b = random({n}, DType::Float32, 2);

  Tensor x3 = random({2, 3, k}, DType::Float32, 3);
  Tensor y = linear(x3, w, b);
  GemmBiasSpy::Call c = GemmBiasSpy::take();
  EXPECT_EQ((Shape{c.args.m, c.args.k, c.args.n, c.args.batch}), (Shape{6, k, n, 1}));
  EXPECT_EQ(c.args.a, x3.data_ptr());
  EXPECT_FALSE(c.args.trans_a);
  EXPECT_EQ(c.args.lda, k);
  EXPECT_EQ(c.args.b, w.data_ptr());  // op(B) = W^T: W stored n x k, transposed
  EXPECT_TRUE(c.args.trans_b);
  EXPECT_EQ(c.args.ldb, k);
  EXPECT_EQ(c.args.c, y.data_ptr());
  EXPECT_EQ(c.args.ldc, n);
  EXPECT_EQ(c.bias, b.data_ptr());
  EXPECT_TRUE(matches_reference(y, x3, w, b, 1e-6, 1e-6));

  // x with unit-stride rows (a transpose) whose batch dims still collapse.
  Tensor xp = random({k, 2, 3}, DType::Float32, 4).permute({1, 2, 0});
  y = linear(xp, w, b);
  c = GemmBiasSpy::take();
  EXPECT_EQ(c.args.a, xp.data_ptr());
  EXPECT_TRUE(c.args.trans_a);
  EXPECT_EQ(c.args.lda, 6);
  EXPECT_TRUE(matches_reference(y, xp, w, b, 1e-6, 1e-6));

  // A transposed weight ([k, n] storage) is op(B) as it is.
  Tensor wt = random({k, n}, DType::Float32, 5).t();
  Tensor x1 = random({k}, DType::Float32, 6);
  y = linear(x1, wt, b);
  c = GemmBiasSpy::take();
  EXPECT_EQ(c.args.m, 1);
  EXPECT_EQ(c.args.b, wt.data_ptr());
  EXPECT_FALSE(c.args.trans_b);
  EXPECT_EQ(c.args.ldb, n);
  EXPECT_TRUE(matches_reference(y, x1, wt, b, 1e-6, 1e-6));

  // A weight and a bias with no unit stride are copied; x is still not.
  Tensor w_step = random({n, 2 * k}, DType::Float32, 7).slice(1, 0, 2 * k, 2);
  Tensor b_step = random({2 * n}, DType::Float32, 8).slice(0, 0, 2 * n, 2);
  y = linear(x3, w_step, b_step);
  c = GemmBiasSpy::take();
  EXPECT_EQ(c.args.a, x3.data_ptr());
  EXPECT_NE(c.args.b, w_step.data_ptr());
  EXPECT_NE(c.bias, b_step.data_ptr());
  EXPECT_TRUE(matches_reference(y, x3, w_step, b_step, 1e-6, 1e-6));
}

TEST(Linear, OtherInputsTakeMatmulPlusAdd) {
  GemmBiasSpy spy;
  const int64_t k = 5, n = 4;
  Tensor w = random({n, k}, DType::Float32, 1), b = random({n}, DType::Float32, 2);
  // Batch dims that do not collapse to one row stride.
  Tensor x_batch = random({3, 2, k}, DType::Float32, 3).transpose(0, 1);
  // No unit stride along either matrix dim.
  Tensor x_step = random({3, 2 * k}, DType::Float32, 4).slice(1, 0, 2 * k, 2);
  for (const Tensor& x : {x_batch, x_step}) {
    Tensor y = linear(x, w, b);
    EXPECT_EQ(GemmBiasSpy::count(), 0u) << shape_str(x.strides());
    EXPECT_TRUE(matches_reference(y, x, w, b, 1e-6, 1e-6)) << shape_str(x.strides());
  }
  // No bias: a plain matmul. Integers: no fused path either.
  linear(random({3, k}), w);
  Tensor xi = random({3, k}, DType::Int32, 5), wi = random({n, k}, DType::Int32, 6), bi = random({n}, DType::Int32, 7);
  EXPECT_TRUE(matches_reference(linear(xi, wi, bi), xi, wi, bi, 0, 0));
  EXPECT_EQ(GemmBiasSpy::count(), 0u);
}

TEST(Linear, EmptyShapes) {
  Tensor w = random({4, 3}), b = random({4});
  EXPECT_EQ(linear(random({0, 3}), w, b).shape(), (Shape{0, 4}));
  EXPECT_EQ(linear(random({2, 0, 3}), w).shape(), (Shape{2, 0, 4}));
  EXPECT_EQ(linear(random({5, 3}), random({0, 3}), random({0})).shape(), (Shape{5, 0}));
  // in_features 0: a sum of nothing, so y is the bias (or zeros).
  Tensor y = linear(random({2, 0}), random({4, 0}), b);
  EXPECT_EQ(y.shape(), (Shape{2, 4}));
  EXPECT_TRUE(equal(y, b.expand({2, 4})));
  EXPECT_EQ(to_vector<float>(linear(random({2, 0}), random({4, 0}))), std::vector<float>(8, 0.0f));
}

// ---------------- gradients ----------------

TEST(LinearGrad, NodeNameAndBackwardByHand) {
  Tensor x = from_vector<float>({1, 2}).set_requires_grad();
  Tensor w = from_vector<float>({1, 0, 3, -1}, {2, 2}).set_requires_grad();
  Tensor b = from_vector<float>({0.5f, -0.5f}).set_requires_grad();
  Tensor y = linear(x, w, b);  // [1 + 0.5, 3 - 2 - 0.5]
  EXPECT_EQ(y.grad_fn()->name(), "LinearBackward");
  EXPECT_EQ(to_vector<float>(y), (std::vector<float>{1.5f, 0.5f}));
  y.backward(from_vector<float>({1, 2}));
  EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{7, -2}));       // g W
  EXPECT_EQ(to_vector<float>(w.grad()), (std::vector<float>{1, 2, 2, 4}));  // g^T x
  EXPECT_EQ(to_vector<float>(b.grad()), (std::vector<float>{1, 2}));
}

TEST(LinearGrad, EveryRankWithAndWithoutBias) {
  auto with_bias = [](const TensorList& in) { return linear(in[0], in[1], in[2]); };
  auto without_bias = [](const TensorList& in) { return linear(in[0], in[1]); };
  for (int64_t rank = 1; rank <= 4; ++rank) {
    Tensor x = testing::random_leaf(input_shape(rank, 3), uint64_t(rank));
    Tensor w = testing::random_leaf({2, 3}, 10), b = testing::random_leaf({2}, 11);
    EXPECT_TRUE(testing::gradcheck(with_bias, {x, w, b})) << rank << "-D";
    EXPECT_TRUE(testing::gradcheck(without_bias, {x, w})) << rank << "-D";
  }
}

TEST(LinearGrad, StridedInputsAndConstantOperands) {
  auto fn = [](const TensorList& in) { return linear(in[0], in[1], in[2]); };
  Tensor w = testing::random_leaf({2, 4}, 1), b = testing::random_leaf({2}, 2);
  // Fused: transposed, permuted; unfused: batch dims that do not collapse, stepped.
  EXPECT_TRUE(testing::gradcheck(fn, {testing::random_leaf({4, 3}, 3).t(), w, b}));
  EXPECT_TRUE(testing::gradcheck(fn, {testing::random_leaf({4, 2, 3}, 4).permute({1, 2, 0}), w, b}));
  EXPECT_TRUE(testing::gradcheck(fn, {testing::random_leaf({3, 2, 4}, 5).transpose(0, 1), w, b}));
  EXPECT_TRUE(testing::gradcheck(fn, {testing::random_leaf({3, 8}, 6).slice(1, 0, 8, 2), w, b}));
  EXPECT_TRUE(testing::gradcheck(fn, {testing::random_leaf({3, 4}, 7), testing::random_leaf({4, 2}, 8).t(), b}));
  // Only some inputs require grad.
  Tensor x = testing::random_leaf({2, 3, 4}, 9);
  EXPECT_TRUE(testing::gradcheck(fn, {x, w.detach(), b}));
  EXPECT_TRUE(testing::gradcheck(fn, {x.detach(), w, b.detach()}));
  EXPECT_TRUE(testing::gradcheck(fn, {x, w, b.detach()}));
}

TEST(LinearGrad, MatchesMatmulPlusAddInFloat32) {
  Tensor x = random({2, 3, 5}, DType::Float32, 1).set_requires_grad();
  Tensor w = random({4, 5}, DType::Float32, 2).set_requires_grad();
  Tensor b = random({4}, DType::Float32, 3).set_requires_grad();
  Tensor g = random({2, 3, 4}, DType::Float32, 4);
  TensorList fused = autograd::grad({linear(x, w, b)}, {x, w, b}, {g});
  TensorList plain = autograd::grad({matmul(x, w.t()) + b}, {x, w, b}, {g});
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(allclose(fused[i], plain[i], 1e-5, 1e-6)) << "input " << i;
}

TEST(LinearGrad, SecondOrder) {
  // d/d(x, w, b) of <v, d(sum(u * linear))/dx> and /dw: the backward's own ops.
  Tensor u = random({2, 2}, DType::Float64, 1);
  for (int which = 0; which < 2; ++which) {
    EXPECT_TRUE(testing::gradcheck(
        [&u, which](const TensorList& in) {
          Tensor y = linear(in[0], in[1], in[2]);
          return autograd::grad({y}, {in[which]}, {u}, true, true)[0];
        },
        {testing::random_leaf({2, 3}, 2), testing::random_leaf({2, 3}, 3), testing::random_leaf({2}, 4)}))
        << (which == 0 ? "dx" : "dw");
  }
}

TEST(LinearGrad, EmptyBatch) {
  Tensor x = testing::random_leaf({0, 3}, 1), w = testing::random_leaf({2, 3}, 2), b = testing::random_leaf({2}, 3);
  linear(x, w, b).sum().backward();
  EXPECT_EQ(x.grad().shape(), (Shape{0, 3}));
  EXPECT_EQ(to_vector<double>(w.grad()), std::vector<double>(6, 0.0));
  EXPECT_EQ(to_vector<double>(b.grad()), std::vector<double>(2, 0.0));
}

// ---------------- the bias-gradient GEMM ----------------

// C = op(A) op(B) and bias_grad = the row sums of op(A), against float64
// loops, for every transpose, the operands' dtype or float32 for the 16-bit
// types, with C and bias_grad poisoned (NaN) first so that an unwritten
// element fails.
TEST(GemmBiasGrad, CpuKernelGivesTheProductAndTheRowSumsOfOpA) {
  const int64_t m = 7, n = 5, k = 9;
  const std::pair<DType, DType> pairs[] = {{DType::Float32, DType::Float32},   {DType::Float64, DType::Float64},
                                           {DType::Float16, DType::Float16},   {DType::Float16, DType::Float32},
                                           {DType::BFloat16, DType::BFloat16}, {DType::BFloat16, DType::Float32}};
  for (const auto& [dt, c_dt] : pairs) {
    for (int flags = 0; flags < 4; ++flags) {
      const bool ta = flags & 1, tb = flags & 2;
      Tensor a = random({ta ? k : m, (ta ? m : k) + 2}, dt, 1), b = random({tb ? n : k, (tb ? k : n) + 1}, dt, 2);
      Tensor c = full({m, n + 3}, std::nan(""), c_dt), bias_grad = full({m}, std::nan(""), c_dt);
      GemmArgs g;
      g.dtype = dt;
      g.trans_a = ta, g.trans_b = tb;
      g.m = m, g.n = n, g.k = k;
      g.a = a.data_ptr(), g.lda = a.size(1);
      g.b = b.data_ptr(), g.ldb = b.size(1);
      g.c = c.data_ptr(), g.ldc = n + 3;
      ASSERT_TRUE(gemm_bias_grad_stub(DeviceType::CPU)(g, c_dt, bias_grad.data_ptr()));
      const std::vector<double> va = to_vector<double>(a), vb = to_vector<double>(b);
      const std::vector<double> vc = to_vector<double>(c), vbias = to_vector<double>(bias_grad);
      auto op_a = [&](int64_t i, int64_t p) { return va[size_t(ta ? p * g.lda + i : i * g.lda + p)]; };
      auto op_b = [&](int64_t p, int64_t j) { return vb[size_t(tb ? j * g.ldb + p : p * g.ldb + j)]; };
      // The inputs are exact in every dtype: the error is the final rounding
      // into c_dt (and float32's running sums).
      const double rtol = c_dt == DType::Float16 ? 1e-3 : c_dt == DType::BFloat16 ? 8e-3 : 1e-6;
      const std::string what = std::string(dtype_name(dt)) + " -> " + dtype_name(c_dt) + " trans_a " +
                               std::to_string(ta) + " trans_b " + std::to_string(tb);
      for (int64_t i = 0; i < m; ++i) {
        double row = 0, row_scale = 0;
        for (int64_t p = 0; p < k; ++p) row += op_a(i, p), row_scale += std::fabs(op_a(i, p));
        EXPECT_NEAR(vbias[size_t(i)], row, rtol * row_scale + 1e-12) << what << " bias_grad " << i;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0, scale = 0;
          for (int64_t p = 0; p < k; ++p) dot += op_a(i, p) * op_b(p, j), scale += std::fabs(op_a(i, p) * op_b(p, j));
          EXPECT_NEAR(vc[size_t(i * g.ldc + j)], dot, rtol * scale + 1e-12) << what << " C " << i << ", " << j;
        }
        for (int64_t j = n; j < n + 3; ++j) EXPECT_TRUE(std::isnan(vc[size_t(i * g.ldc + j)])) << what << " padding";
      }
      // Without a bias gradient, C alone.
      Tensor c2 = full({m, n + 3}, std::nan(""), c_dt);
      g.c = c2.data_ptr();
      ASSERT_TRUE(gemm_bias_grad_stub(DeviceType::CPU)(g, c_dt, nullptr));
      EXPECT_TRUE(equal(c2.narrow(1, 0, n), c.narrow(1, 0, n))) << what;
    }
  }
}

TEST(GemmBiasGrad, OtherDtypePairingsAndScalarsAreErrors) {
  Tensor a = random({3, 4}), b = random({4, 2}), c = empty({3, 2});
  GemmArgs g;
  g.m = 3, g.n = 2, g.k = 4;
  g.a = a.data_ptr(), g.lda = 4, g.b = b.data_ptr(), g.ldb = 2, g.c = c.data_ptr(), g.ldc = 2;
  EXPECT_THAT(error_of([&] { gemm_bias_grad_stub(DeviceType::CPU)(g, DType::Float16, nullptr); }),
              HasSubstr("gemm_bias_grad: C of float16 from operands of float32"));
  g.alpha = 2;
  EXPECT_THAT(error_of([&] { gemm_bias_grad_stub(DeviceType::CPU)(g, DType::Float32, nullptr); }),
              HasSubstr("alpha 1 and beta 0, but got a batch of 1 with alpha 2"));
}

// Swaps the CPU bias-gradient GEMM for one that counts its calls and
// forwards them.
class GemmBiasGradSpy {
 public:
  GemmBiasGradSpy() : swap_(DeviceType::CPU, &spy) {
    calls() = 0;
    with_bias() = 0;
  }
  static int& calls() {
    static int n = 0;
    return n;
  }
  static int& with_bias() {
    static int n = 0;
    return n;
  }

 private:
  using Swap = testing::StubSwap<GemmBiasGradKernelFn, &gemm_bias_grad_stub>;
  static bool spy(const GemmArgs& g, DType c_dtype, void* bias_grad) {
    ++calls();
    with_bias() += bias_grad != nullptr;
    return Swap::real()(g, c_dtype, bias_grad);
  }
  Swap swap_;
};

// Without create_graph, dW and db come from one fused GEMM, and equal the
// composed backward's (the one create_graph takes).
TEST(LinearGrad, WeightAndBiasGradientsComeFromOneFusedGemm) {
  for (bool with_bias : {true, false}) {
    Tensor x = random({2, 3, 5}, DType::Float64, 1).set_requires_grad();
    Tensor w = random({4, 5}, DType::Float64, 2).set_requires_grad();
    Tensor b = with_bias ? random({4}, DType::Float64, 3).set_requires_grad() : Tensor();
    Tensor g = random({2, 3, 4}, DType::Float64, 4);
    TensorList inputs = with_bias ? TensorList{x, w, b} : TensorList{x, w};
    TensorList fused, composed;
    {
      GemmBiasGradSpy spy;
      fused = autograd::grad({linear(x, w, b)}, inputs, {g});
      EXPECT_EQ(GemmBiasGradSpy::calls(), 1);
      EXPECT_EQ(GemmBiasGradSpy::with_bias(), with_bias ? 1 : 0);
      composed = autograd::grad({linear(x, w, b)}, inputs, {g}, /*retain_graph=*/true, /*create_graph=*/true);
      EXPECT_EQ(GemmBiasGradSpy::calls(), 1) << "create_graph takes the composed ops";
    }
    for (size_t i = 0; i < inputs.size(); ++i) EXPECT_TRUE(allclose(fused[i], composed[i], 1e-12, 1e-12)) << i;
  }
  // A transposed x and a transposed gradient go to the GEMM without a copy;
  // a broadcast gradient (sum()'s: stride 0) takes the composed ops.
  GemmBiasGradSpy spy;
  Tensor x = random({5, 6}, DType::Float64, 5).set_requires_grad();
  Tensor w = random({3, 5}, DType::Float64, 6).set_requires_grad();
  Tensor g = random({3, 6}, DType::Float64, 7);
  linear(x.t(), w).backward(g.t());
  EXPECT_EQ(GemmBiasGradSpy::calls(), 1);
  EXPECT_TRUE(allclose(w.grad(), matmul(g, x.t()), 1e-12, 1e-12));
  w.set_grad(Tensor());
  linear(x.t(), w).sum().backward();
  EXPECT_EQ(GemmBiasGradSpy::calls(), 1);
  EXPECT_TRUE(allclose(w.grad(), x.t().sum({0}).unsqueeze(0).expand({3, 5}), 1e-12, 1e-12));
}

// ---------------- errors ----------------

TEST(LinearErrors, NameShapesDtypesAndDevices) {
  std::string e = error_of([] { linear(random({2, 3}), random({4, 5})); });
  EXPECT_THAT(e, HasSubstr("linear: input shape [2, 3] and weight shape [4, 5] do not match"));
  EXPECT_THAT(e, HasSubstr("last dim of the input (size 3)"));

  e = error_of([] { linear(random({2, 3}), random({3})); });
  EXPECT_THAT(e, HasSubstr("weight must be 2-D [out_features, in_features], but got shape [3]"));

  e = error_of([] { linear(random({}), random({4, 3})); });
  EXPECT_THAT(e, HasSubstr("at least 1-D [..., in_features], but got shape []"));

  e = error_of([] { linear(random({2, 3}), random({4, 3}), random({3})); });
  EXPECT_THAT(e, HasSubstr("bias must be 1-D [out_features] = [4] for weight shape [4, 3], but got shape [3]"));

  e = error_of([] { linear(random({2, 3}), random({4, 3}, DType::Float64)); });
  EXPECT_THAT(e, HasSubstr("input [2, 3] float32 on cpu and weight [4, 3] float64 on cpu"));
  EXPECT_THAT(e, HasSubstr(".to(dtype)"));

  e = error_of([] { linear(random({2, 3}), random({4, 3}), random({4}, DType::Float16)); });
  EXPECT_THAT(e, HasSubstr("bias [4] float16 on cpu"));

  e = error_of([] { linear(ones({2, 3}, DType::Bool), ones({4, 3}, DType::Bool)); });
  EXPECT_THAT(e, HasSubstr("not defined for bool"));

  // The bias GEMM's own contract: one matrix, beta 0.
  e = error_of([] {
    Tensor a = random({3, 5}), b = random({5, 4}), c = random({2, 3, 4}), bias = random({4});
    GemmArgs g;
    g.m = 3, g.n = 4, g.k = 5, g.batch = 2;
    g.a = a.data_ptr(), g.lda = 5, g.b = b.data_ptr(), g.ldb = 4, g.c = c.data_ptr(), g.ldc = 4, g.stride_c = 12;
    gemm_bias_stub(DeviceType::CPU)(g, bias.data_ptr());
  });
  EXPECT_THAT(e, HasSubstr("gemm_bias: takes one matrix with beta 0, but got a batch of 2 with beta 0 for float32 "
                           "C [2 x 3 x 4] = op(A) [3 x 5] * op(B) [5 x 4]"));

  // Only the metadata of the CUDA operand is read before the check fails.
  std::vector<float> host(12);
  Tensor on_gpu = from_blob(host.data(), {4, 3}, DType::Float32, cuda_device(0));
  e = error_of([&] { linear(random({2, 3}), on_gpu); });
  EXPECT_THAT(e, HasSubstr("input [2, 3] float32 on cpu and weight [4, 3] float32 on cuda:0"));
  EXPECT_THAT(e, HasSubstr(".to(device)"));
}

}  // namespace
}  // namespace ember
