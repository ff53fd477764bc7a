// matmul: values against a naive float64 loop for every rank combination
// and operand layout, the no-copy layouts the kernel receives, the GEMM
// kernel's own alpha/beta contract, gradients, and error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "ember/core/ops/gemm_kernels.h"
#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::error_of;

using ::testing::HasSubstr;

// ---------------- the reference ----------------

struct Reference {
  Shape shape;
  std::vector<double> values;
  std::vector<double> abs_sum;  // sum of |a| * |b| per element, a scale for tolerances
};

// torch.matmul by its definition: promote 1-D operands, broadcast the batch
// dims, a triple loop per batch, remove the added dims.
Reference reference_matmul(const Tensor& a, const Tensor& b) {
  std::vector<double> va = to_vector<double>(a), vb = to_vector<double>(b);
  Shape sa = a.shape(), sb = b.shape();
  if (a.dim() == 1) sa.insert(sa.begin(), 1);
  if (b.dim() == 1) sb.push_back(1);
  size_t nb = std::max(sa.size(), sb.size()) - 2;
  while (sa.size() < nb + 2) sa.insert(sa.begin(), 1);
  while (sb.size() < nb + 2) sb.insert(sb.begin(), 1);
  int64_t m = sa[nb], k = sa[nb + 1], n = sb[nb + 1];
  Shape batch(nb);
  int64_t batches = 1;
  for (size_t d = 0; d < nb; ++d) {
    batch[d] = std::max(sa[d], sb[d]);
    batches *= batch[d];
  }
  Reference r;
  r.shape = batch;
  if (a.dim() > 1) r.shape.push_back(m);
  if (b.dim() > 1) r.shape.push_back(n);
  for (int64_t flat = 0; flat < batches; ++flat) {
    // Row-major batch index -> element offsets of a and b's batch (broadcast dims stay 0).
    int64_t rest = flat, off_a = 0, off_b = 0, step_a = m * k, step_b = k * n;
    for (size_t d = nb; d-- > 0;) {
      int64_t i = rest % batch[d];
      rest /= batch[d];
      off_a += (sa[d] == 1 ? 0 : i) * step_a;
      off_b += (sb[d] == 1 ? 0 : i) * step_b;
      step_a *= sa[d];
      step_b *= sb[d];
    }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double acc = 0, scale = 0;
        for (int64_t p = 0; p < k; ++p) {
          double x = va[size_t(off_a + i * k + p)], y = vb[size_t(off_b + p * n + j)];
          acc += x * y;
          scale += std::fabs(x * y);
        }
        r.values.push_back(acc);
        r.abs_sum.push_back(scale);
      }
    }
  }
  return r;
}

// out matches the reference within rtol * |ref| + atol * sum|a||b| per element.
::testing::AssertionResult matches_reference(const Tensor& out, const Tensor& a, const Tensor& b, double rtol,
                                             double atol) {
  Reference r = reference_matmul(a, b);
  if (out.shape() != r.shape) {
    return ::testing::AssertionFailure() << "shape " << shape_str(out.shape()) << ", expected " << shape_str(r.shape);
  }
  if (out.dtype() != a.dtype()) return ::testing::AssertionFailure() << "dtype " << dtype_name(out.dtype());
  std::vector<double> got = to_vector<double>(out);
  for (size_t i = 0; i < got.size(); ++i) {
    double tol = rtol * std::fabs(r.values[i]) + atol * (r.abs_sum[i] + 1e-300);
    if (!(std::fabs(got[i] - r.values[i]) <= tol)) {
      return ::testing::AssertionFailure() << "element " << i << " of " << shape_str(out.shape()) << ": got " << got[i]
                                           << ", expected " << r.values[i];
    }
  }
  return ::testing::AssertionSuccess();
}

Tensor random(const Shape& shape, DType dtype = DType::Float32, uint64_t seed = 1) {
  Generator g(seed);
  if (is_integral(dtype)) return randint(-5, 5, shape, dtype, kCPU, &g);
  return randn(shape, DType::Float64, kCPU, &g).to(dtype);
}

Shape with_matrix(Shape batch, std::initializer_list<int64_t> matrix) {
  batch.insert(batch.end(), matrix);
  return batch;
}

// The shape of a rank-r operand with matrix dims `matrix`: the batch dims
// are chosen so every pair of ranks broadcasts ([2, 1] against [1, 3]).
Shape operand_shape(int64_t rank, bool first, int64_t rows, int64_t cols) {
  if (rank == 1) return {first ? cols : rows};
  if (rank == 2) return {rows, cols};
  if (rank == 3) return {3, rows, cols};
  return first ? Shape{2, 1, rows, cols} : Shape{1, 3, rows, cols};
}

// ---------------- values ----------------

TEST(Matmul, DotOfOneDimOperandsIsZeroDim) {
  Tensor a = from_vector<float>({1, 2, 3}), b = from_vector<float>({4, -5, 6});
  Tensor y = matmul(a, b);
  EXPECT_EQ(y.dim(), 0);
  EXPECT_FLOAT_EQ(y.item<float>(), 4 - 10 + 18);
  for (int64_t k : {1, 7, 33}) {
    Tensor x = random({k}, DType::Float64, 1), z = random({k}, DType::Float64, 2);
    EXPECT_TRUE(matches_reference(matmul(x, z), x, z, 1e-12, 1e-14)) << "k = " << k;
  }
}

TEST(Matmul, EveryRankCombinationMatchesTheNaiveLoop) {
  const int64_t sizes[][3] = {{7, 33, 1}, {1, 7, 33}, {33, 1, 7}, {7, 7, 7}};  // m, k, n
  int combo = 0;
  for (int64_t ra = 1; ra <= 4; ++ra) {
    for (int64_t rb = 1; rb <= 4; ++rb) {
      const int64_t* s = sizes[combo++ % 4];
      Shape sa = operand_shape(ra, true, s[0], s[1]), sb = operand_shape(rb, false, s[1], s[2]);
      for (DType dt : {DType::Float32, DType::Float64}) {
        Tensor a = random(sa, dt, 10 + combo), b = random(sb, dt, 50 + combo);
        double tol = dt == DType::Float32 ? 1e-5 : 1e-12;
        EXPECT_TRUE(matches_reference(matmul(a, b), a, b, tol, tol))
            << shape_str(sa) << " x " << shape_str(sb) << " " << dtype_name(dt);
      }
    }
  }
}

TEST(Matmul, BroadcastsBatchDims) {
  Tensor a = random({2, 1, 3, 4}, DType::Float32, 1), b = random({5, 4, 6}, DType::Float32, 2);
  Tensor y = matmul(a, b);
  EXPECT_EQ(y.shape(), (Shape{2, 5, 3, 6}));
  EXPECT_TRUE(matches_reference(y, a, b, 1e-5, 1e-5));
  Tensor c = random({1, 4, 6}, DType::Float32, 3);
  EXPECT_TRUE(matches_reference(matmul(a, c), a, c, 1e-5, 1e-5));
  EXPECT_TRUE(matches_reference(matmul(c.transpose(1, 2), a.transpose(2, 3)), c.transpose(1, 2), a.transpose(2, 3),
                                1e-5, 1e-5));
}

TEST(Matmul, StridedOperandsMatchTheNaiveLoop) {
  const int64_t m = 7, k = 33, n = 5;
  Tensor at = random({k, m}, DType::Float32, 1).t();  // unit-stride rows
  Tensor bt = random({n, k}, DType::Float32, 2).t();
  Tensor a_cols = random({m, k + 5}, DType::Float32, 3).narrow(1, 2, k);  // ld > k
  Tensor a_rows = random({m + 3, k}, DType::Float32, 4).narrow(0, 1, m);
  Tensor a_step = random({m, 2 * k}, DType::Float32, 5).slice(1, 0, 2 * k, 2);  // no unit stride at all
  Tensor a_bcast = random({1, k}, DType::Float32, 6).expand({m, k});            // row stride 0
  Tensor b = random({k, n}, DType::Float32, 7);
  for (const Tensor& a : {at, a_cols, a_rows, a_step, a_bcast}) {
    EXPECT_TRUE(matches_reference(matmul(a, b), a, b, 1e-5, 1e-5)) << shape_str(a.strides());
    EXPECT_TRUE(matches_reference(matmul(a, bt), a, bt, 1e-5, 1e-5)) << shape_str(a.strides());
  }
  // Batched: transposed matrices, a batch dim that is not outermost in
  // memory, batch dims that do not collapse to one stride, an expanded batch.
  Tensor batched_t = random({4, k, m}, DType::Float32, 8).transpose(1, 2);
  Tensor inner_batch = random({m, 4, k}, DType::Float32, 9).transpose(0, 1);
  Tensor permuted = random({2, 3, m, k}, DType::Float32, 10).permute({1, 0, 2, 3});
  Tensor expanded = random({m, k}, DType::Float32, 11).expand({4, m, k});
  Tensor b_batched = random({4, n, k}, DType::Float32, 12).transpose(1, 2);
  for (const Tensor& a : {batched_t, inner_batch, expanded}) {
    EXPECT_TRUE(matches_reference(matmul(a, b), a, b, 1e-5, 1e-5)) << shape_str(a.strides());
    EXPECT_TRUE(matches_reference(matmul(a, b_batched), a, b_batched, 1e-5, 1e-5)) << shape_str(a.strides());
  }
  EXPECT_TRUE(matches_reference(matmul(permuted, bt), permuted, bt, 1e-5, 1e-5));
  // Strided vectors.
  Tensor v = random({2 * k}, DType::Float32, 13).slice(0, 0, 2 * k, 2);
  EXPECT_TRUE(matches_reference(matmul(v, b), v, b, 1e-5, 1e-5));
  EXPECT_TRUE(matches_reference(matmul(at, v), at, v, 1e-5, 1e-5));
  EXPECT_TRUE(matches_reference(matmul(v, v), v, v, 1e-5, 1e-5));
}

TEST(Matmul, HalfTypesAccumulateInFloatAndRoundOnce) {
  // Rounding once gives at most half an ulp of the result; accumulating in
  // the 16-bit type itself would be off by about k ulps of the terms.
  struct Case {
    DType dtype;
    double ulp;
  };
  for (Case c : {Case{DType::Float16, 0x1p-10}, Case{DType::BFloat16, 0x1p-7}}) {
    Tensor a = random({2, 7, 33}, c.dtype, 1), b = random({33, 7}, c.dtype, 2);
    EXPECT_TRUE(matches_reference(matmul(a, b), a, b, c.ulp, 1e-6)) << dtype_name(c.dtype);
    Tensor v = random({33}, c.dtype, 3);
    EXPECT_TRUE(matches_reference(matmul(b.t(), v), b.t(), v, c.ulp, 1e-6)) << dtype_name(c.dtype);
  }
}

TEST(Matmul, IntegersAreExact) {
  for (DType dt : {DType::Int32, DType::Int64}) {
    Tensor a = random({2, 1, 7, 33}, dt, 1), b = random({3, 33, 7}, dt, 2);
    EXPECT_TRUE(matches_reference(matmul(a, b), a, b, 0, 0)) << dtype_name(dt);
    Tensor bt = random({7, 33}, dt, 3).t();
    EXPECT_TRUE(matches_reference(matmul(a, bt), a, bt, 0, 0)) << dtype_name(dt);
    Tensor v = random({33}, dt, 4);
    EXPECT_TRUE(matches_reference(matmul(v, v), v, v, 0, 0)) << dtype_name(dt);
  }
}

TEST(Matmul, EmptyOperands) {
  Tensor y = matmul(random({0, 3}), random({3, 4}));
  EXPECT_EQ(y.shape(), (Shape{0, 4}));
  Tensor z = matmul(random({2, 3, 0}), random({0, 5}));  // k = 0: a sum of nothing
  EXPECT_EQ(z.shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(to_vector<float>(z), std::vector<float>(30, 0.0f));
  EXPECT_EQ(matmul(random({0}), random({0})).item<float>(), 0.0f);
  EXPECT_EQ(matmul(random({2, 0, 3, 4}), random({4, 5})).shape(), (Shape{2, 0, 3, 5}));
}

TEST(Matmul, MethodAndTf32Flag) {
  Tensor a = random({3, 4}), b = random({4, 2});
  EXPECT_TRUE(equal(a.matmul(b), matmul(a, b)));
  EXPECT_FALSE(allow_tf32());
  set_allow_tf32(true);
  EXPECT_TRUE(allow_tf32());
  set_allow_tf32(false);
  EXPECT_FALSE(allow_tf32());
}

// ---------------- what the kernel receives ----------------

// Swaps the CPU GEMM for one that records its arguments and forwards them.
class GemmSpy {
 public:
  GemmSpy() : real_(gemm_stub(DeviceType::CPU)) {
    real() = real_;
    calls().clear();
    gemm_stub.set(DeviceType::CPU, &spy);
  }
  ~GemmSpy() { gemm_stub.set(DeviceType::CPU, real_); }
  GemmSpy(const GemmSpy&) = delete;
  GemmSpy& operator=(const GemmSpy&) = delete;

  static std::vector<GemmArgs>& calls() {
    static std::vector<GemmArgs> c;
    return c;
  }
  // The one call made since the last take().
  static GemmArgs take() {
    EXPECT_EQ(calls().size(), 1u);
    GemmArgs g = calls().empty() ? GemmArgs{} : calls().back();
    calls().clear();
    return g;
  }

 private:
  static GemmKernelFn*& real() {
    static GemmKernelFn* fn = nullptr;
    return fn;
  }
  static void spy(const GemmArgs& g) {
    calls().push_back(g);
    real()(g);
  }
  GemmKernelFn* real_;
};

TEST(Matmul, StridedOperandsReachTheKernelWithoutCopies) {
  GemmSpy spy;
  Tensor b = random({5, 4});

  Tensor at = random({5, 3}).t();  // [3, 5], unit-stride rows
  matmul(at, b);
  GemmArgs g = GemmSpy::take();
  EXPECT_TRUE(g.trans_a);
  EXPECT_FALSE(g.trans_b);
  EXPECT_EQ(g.a, at.data_ptr());
  EXPECT_EQ(g.lda, 3);
  EXPECT_EQ(g.b, b.data_ptr());
  EXPECT_EQ((Shape{g.m, g.k, g.n, g.batch}), (Shape{3, 5, 4, 1}));

  Tensor narrowed = random({3, 9}).narrow(1, 2, 5);
  Tensor bt = random({4, 5}).t();
  matmul(narrowed, bt);
  g = GemmSpy::take();
  EXPECT_EQ(g.a, narrowed.data_ptr());
  EXPECT_FALSE(g.trans_a);
  EXPECT_EQ(g.lda, 9);
  EXPECT_EQ(g.b, bt.data_ptr());
  EXPECT_TRUE(g.trans_b);
  EXPECT_EQ(g.ldb, 5);

  // A strided vector is a transposed [k, 1] column.
  Tensor v = random({10}).slice(0, 0, 10, 2);
  matmul(v, b);
  g = GemmSpy::take();
  EXPECT_EQ(g.a, v.data_ptr());
  EXPECT_TRUE(g.trans_a);
  EXPECT_EQ(g.lda, 2);

  // Broadcast second operand: batch stride 0, and the contiguous batches
  // of the first fold into the rows of one GEMM.
  Tensor a3 = random({6, 3, 5});
  matmul(a3, bt);
  g = GemmSpy::take();
  EXPECT_EQ(g.batch, 1);
  EXPECT_EQ(g.m, 18);
  EXPECT_EQ(g.a, a3.data_ptr());

  // Batched transposed operands keep their batch stride.
  Tensor a3t = random({6, 5, 3}).transpose(1, 2);
  Tensor b3 = random({6, 5, 4});
  matmul(a3t, b3);
  g = GemmSpy::take();
  EXPECT_EQ(g.batch, 6);
  EXPECT_TRUE(g.trans_a);
  EXPECT_EQ(g.stride_a, 15);
  EXPECT_EQ(g.a, a3t.data_ptr());
  EXPECT_EQ(g.stride_b, 20);

  // The broadcast side of a batched product gets batch stride 0.
  Tensor a1 = random({1, 3, 5});
  matmul(a1, b3);
  g = GemmSpy::take();
  EXPECT_EQ(g.batch, 6);
  EXPECT_EQ(g.stride_a, 0);
  EXPECT_EQ(g.a, a1.data_ptr());

  // No unit stride in either orientation: copied into a contiguous matrix.
  Tensor stepped = random({3, 10}).slice(1, 0, 10, 2);
  matmul(stepped, b);
  g = GemmSpy::take();
  EXPECT_NE(g.a, stepped.data_ptr());
  EXPECT_FALSE(g.trans_a);
  EXPECT_EQ(g.lda, 5);

  // Batch dims that collapse to no single stride: expanded and copied.
  Tensor a4 = random({2, 1, 3, 5});
  Tensor b4 = random({7, 5, 4});
  matmul(a4, b4);
  g = GemmSpy::take();
  EXPECT_EQ(g.batch, 14);
  EXPECT_EQ(g.stride_a, 15);
  EXPECT_EQ(g.stride_b, 20);
}

// ---------------- the kernel's alpha/beta contract ----------------

// C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b] through gemm_stub with a
// broadcast A, a transposed B and padded leading dims, for every dtype.
TEST(Gemm, AlphaBetaTransposeAndBroadcastBatch) {
  const int64_t m = 3, n = 4, k = 5, batch = 2;
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64}) {
    bool integral = is_integral(dt);
    Tensor a = random({m, k + 1}, dt, 1);         // op(A) = A, lda = k + 1, shared by both batches
    Tensor b = random({batch, n, k}, dt, 2);      // op(B) = B^T, ldb = k
    Tensor c = random({batch, m, n + 2}, dt, 3);  // ldc = n + 2
    std::vector<double> va = to_vector<double>(a), vb = to_vector<double>(b), vc = to_vector<double>(c);
    GemmArgs g;
    g.dtype = dt;
    g.trans_b = true;
    g.m = m, g.n = n, g.k = k, g.batch = batch;
    g.alpha = 2, g.beta = integral ? 3 : 0.5;
    g.a = a.data_ptr(), g.lda = k + 1, g.stride_a = 0;
    g.b = b.data_ptr(), g.ldb = k, g.stride_b = n * k;
    g.c = c.data_ptr(), g.ldc = n + 2, g.stride_c = m * (n + 2);
    gemm_stub(DeviceType::CPU)(g);
    std::vector<double> got = to_vector<double>(c);
    double rtol = dt == DType::BFloat16 ? 0x1p-7 : dt == DType::Float16 ? 0x1p-10 : 1e-6;
    for (int64_t bi = 0; bi < batch; ++bi) {
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n + 2; ++j) {
          size_t ci = size_t(bi * m * (n + 2) + i * (n + 2) + j);
          double want = vc[ci];  // the padding columns stay untouched
          if (j < n) {
            double acc = 0;
            for (int64_t p = 0; p < k; ++p) acc += va[size_t(i * (k + 1) + p)] * vb[size_t(bi * n * k + j * k + p)];
            want = g.alpha * acc + g.beta * vc[ci];
          }
          EXPECT_NEAR(got[ci], want, rtol * std::fabs(want) + (integral ? 0 : 1e-5))
              << dtype_name(dt) << " batch " << bi << " (" << i << ", " << j << ")";
        }
      }
    }
  }
}

TEST(Gemm, BetaZeroIgnoresWhatCHeld) {
  for (DType dt : {DType::Float32, DType::Float16}) {
    Tensor a = random({2, 3}, dt, 1), b = random({3, 2}, dt, 2);
    Tensor c = full({2, 2}, std::numeric_limits<double>::quiet_NaN(), dt);
    GemmArgs g;
    g.dtype = dt;
    g.m = 2, g.n = 2, g.k = 3;
    g.a = a.data_ptr(), g.lda = 3;
    g.b = b.data_ptr(), g.ldb = 2;
    g.c = c.data_ptr(), g.ldc = 2;
    gemm_stub(DeviceType::CPU)(g);
    EXPECT_TRUE(matches_reference(c, a, b, 1e-3, 1e-5)) << dtype_name(dt);
  }
}

// ---------------- gradients ----------------

TEST(MatmulGrad, DotByHand) {
  Tensor a = from_vector<float>({1, 2, 3}).set_requires_grad();
  Tensor b = from_vector<float>({4, 5, 6}).set_requires_grad();
  Tensor y = matmul(a, b);
  EXPECT_EQ(y.grad_fn()->name(), "MatmulBackward");
  y.backward();
  EXPECT_EQ(to_vector<float>(a.grad()), (std::vector<float>{4, 5, 6}));
  EXPECT_EQ(to_vector<float>(b.grad()), (std::vector<float>{1, 2, 3}));
}

TEST(MatmulGrad, EveryRankCombination) {
  uint64_t seed = 100;
  for (int64_t ra = 1; ra <= 4; ++ra) {
    for (int64_t rb = 1; rb <= 4; ++rb) {
      Tensor a = testing::random_leaf(operand_shape(ra, true, 2, 3), ++seed);
      Tensor b = testing::random_leaf(operand_shape(rb, false, 3, 2), ++seed);
      EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return matmul(in[0], in[1]); }, {a, b}))
          << shape_str(a.shape()) << " x " << shape_str(b.shape());
    }
  }
}

TEST(MatmulGrad, StridedAndBroadcastOperands) {
  auto mm = [](const TensorList& in) { return matmul(in[0], in[1]); };
  Tensor at = testing::random_leaf({4, 3}, 1);
  Tensor bt = testing::random_leaf({2, 4}, 2);
  EXPECT_TRUE(testing::gradcheck(mm, {at.t(), bt.t()}));
  Tensor wide = testing::random_leaf({3, 7}, 3);
  Tensor tall = testing::random_leaf({6, 2}, 4);
  EXPECT_TRUE(testing::gradcheck(mm, {wide.narrow(1, 1, 4), tall.narrow(0, 2, 4)}));
  Tensor stepped = testing::random_leaf({3, 8}, 5);
  EXPECT_TRUE(testing::gradcheck(mm, {stepped.slice(1, 0, 8, 2), tall.narrow(0, 1, 4)}));
  Tensor batched = testing::random_leaf({3, 2, 4}, 6);
  EXPECT_TRUE(testing::gradcheck(mm, {batched.permute({1, 2, 0}), testing::random_leaf({2, 3, 2}, 7)}));
  EXPECT_TRUE(testing::gradcheck(mm, {testing::random_leaf({2, 1, 3, 4}, 8), testing::random_leaf({5, 4, 6}, 9)}));
  EXPECT_TRUE(testing::gradcheck(mm, {testing::random_leaf({3, 2, 4}, 10), testing::random_leaf({5, 4}, 11).t()}));
  // An operand expanded inside the function: stride-0 rows and batches.
  EXPECT_TRUE(testing::gradcheck(
      [](const TensorList& in) {
        return matmul(in[0].expand({3, 2, 4}), in[1].expand({3, 4, 3}));
      },
      {testing::random_leaf({1, 4}, 12), testing::random_leaf({4, 3}, 13)}));
  // One side constant.
  Tensor constant = testing::random_leaf({4, 2}, 14).detach();
  EXPECT_TRUE(testing::gradcheck(mm, {testing::random_leaf({2, 3, 4}, 15), constant}));
  EXPECT_TRUE(testing::gradcheck(mm, {constant.t(), testing::random_leaf({4}, 16)}));
}

TEST(MatmulGrad, EmptyContraction) {
  Tensor a = testing::random_leaf({2, 0}, 1), b = testing::random_leaf({0, 3}, 2);
  matmul(a, b).sum().backward();
  EXPECT_EQ(a.grad().shape(), (Shape{2, 0}));
  EXPECT_EQ(b.grad().shape(), (Shape{0, 3}));
  Tensor c = testing::random_leaf({0, 4}, 3), d = testing::random_leaf({4, 3}, 4);
  matmul(c, d).sum().backward();
  EXPECT_EQ(to_vector<double>(d.grad()), std::vector<double>(12, 0.0));
}

// ---------------- errors ----------------

TEST(MatmulErrors, NameShapesDimsDtypesAndDevices) {
  std::string e = error_of([] { matmul(random({2, 3}), random({4, 5})); });
  EXPECT_THAT(e, HasSubstr("matmul: shapes [2, 3] and [4, 5] cannot be multiplied"));
  EXPECT_THAT(e, HasSubstr("last dim of the first operand (size 3)"));
  EXPECT_THAT(e, HasSubstr("second-to-last dim of the second (size 4)"));

  e = error_of([] { matmul(random({2, 3}), random({4})); });
  EXPECT_THAT(e, HasSubstr("[2, 3] and [4]"));
  EXPECT_THAT(e, HasSubstr("only dim of the second (size 4)"));

  e = error_of([] { matmul(random({3}), random({4})); });
  EXPECT_THAT(e, HasSubstr("dot product"));
  EXPECT_THAT(e, HasSubstr("[3] and [4]"));

  e = error_of([] { matmul(random({2, 3, 4}), random({5, 4, 6})); });
  EXPECT_THAT(e, HasSubstr("batch dims [2] of the first operand (shape [2, 3, 4]) and [5] of the second (shape "
                           "[5, 4, 6]) do not broadcast"));

  e = error_of([] { matmul(random({}), random({3})); });
  EXPECT_THAT(e, HasSubstr("at least 1-D, but got shapes [] and [3]"));

  e = error_of([] { matmul(random({2, 3}), random({3, 4}, DType::Float64)); });
  EXPECT_THAT(e, HasSubstr("[2, 3] float32 on cpu and [3, 4] float64 on cpu"));
  EXPECT_THAT(e, HasSubstr(".to(dtype)"));

  e = error_of([] { matmul(ones({2, 3}, DType::Bool), ones({3, 4}, DType::Bool)); });
  EXPECT_THAT(e, HasSubstr("not defined for bool"));

  // Only the metadata of the CUDA operand is read before the check fails.
  std::vector<float> host(12);
  Tensor on_gpu = from_blob(host.data(), {3, 4}, DType::Float32, cuda_device(0));
  e = error_of([&] { matmul(random({2, 3}), on_gpu); });
  EXPECT_THAT(e, HasSubstr("[2, 3] float32 on cpu and [3, 4] float32 on cuda:0"));
  EXPECT_THAT(e, HasSubstr(".to(device)"));
}

}  // namespace
}  // namespace ember

namespace ember {
namespace {

// k = 0 and empty batches through backward: the folded-rows path of a shared
// B must not infer a -1 from zero elements.
TEST(Matmul, BackwardOfEmptyAndZeroDepthShapes) {
  const Shape pairs[][2] = {{{2, 3, 0}, {0, 5}}, {{2, 0, 3, 4}, {4, 5}}, {{1, 4, 0}, {3, 0, 2}}, {{0, 3}, {3, 4}}};
  for (const auto& p : pairs) {
    Tensor a = zeros(p[0], DType::Float64).set_requires_grad(), b = ones(p[1], DType::Float64).set_requires_grad();
    Tensor y = matmul(a, b);
    y.backward(ones_like(y));
    EXPECT_EQ(a.grad().shape(), a.shape()) << shape_str(p[0]);
    EXPECT_EQ(b.grad().shape(), b.shape()) << shape_str(p[1]);
    EXPECT_EQ(b.grad().sum().item<double>(), 0.0);
  }
}

}  // namespace
}  // namespace ember
