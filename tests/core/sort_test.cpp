// sort, argsort, topk and searchsorted on CPU: values and indices against
// torch (NaN order, ties, -0.0), a std::stable_sort reference over every
// dim and layout, every dtype, 0-dim and empty tensors; gradients of the
// values by finite differences; error messages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::throws_with;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

using I = std::vector<int64_t>;

TEST(Sort, NaNOrderMatchesTorch) {
  // torch.sort(torch.tensor([3., nan, 1., inf, -inf, 1.])) and friends.
  Tensor x = from_vector<double>({3, kNaN, 1, kInf, -kInf, 1});
  auto [v, i] = sort(x);
  EXPECT_EQ(to_vector<int64_t>(i), (I{4, 2, 5, 0, 3, 1}));
  std::vector<double> values = to_vector<double>(v);
  EXPECT_EQ(values[0], -kInf);
  EXPECT_TRUE(std::isnan(values[5]));
  EXPECT_EQ(to_vector<int64_t>(sort(x, 0, true).second), (I{1, 3, 0, 2, 5, 4}));
  EXPECT_EQ(to_vector<int64_t>(topk(x, 3).second), (I{1, 3, 0}));
  EXPECT_EQ(to_vector<int64_t>(topk(x, 3, -1, false).second), (I{4, 2, 5}));
  EXPECT_EQ(to_vector<int64_t>(argsort(x.to(DType::Float32))), (I{4, 2, 5, 0, 3, 1}));
}

TEST(Sort, TiesKeepInputOrderBothWays) {
  Tensor x = from_vector<float>({2, 1, 2, 1, 2, 0.0f, -0.0f});
  EXPECT_EQ(to_vector<int64_t>(argsort(x)), (I{5, 6, 1, 3, 0, 2, 4}));
  EXPECT_EQ(to_vector<int64_t>(argsort(x, -1, true)), (I{0, 2, 4, 1, 3, 5, 6}));
  // torch.sort(torch.tensor([True, False, True])) gives indices [1, 0, 2].
  EXPECT_EQ(to_vector<int64_t>(sort(from_vector<bool>({true, false, true})).second), (I{1, 0, 2}));
}

// The stable order of x's rows along dim d, by std::stable_sort on float64
// values (NaN last), as the indices tensor ember should give.
Tensor reference_indices(const Tensor& x, int64_t d, bool descending) {
  Tensor rows = x.transpose(d, -1).contiguous();
  const int64_t n = rows.size(-1);
  std::vector<double> v = to_vector<double>(rows);
  std::vector<int64_t> out(v.size());
  for (size_t r = 0; r * size_t(n) < v.size(); ++r) {
    const double* row = v.data() + r * size_t(n);
    int64_t* o = out.data() + r * size_t(n);
    std::iota(o, o + n, int64_t(0));
    auto less = [&](int64_t a, int64_t b) {
      double va = row[a], vb = row[b];
      if (descending) std::swap(va, vb);
      return !std::isnan(va) && (std::isnan(vb) || va < vb);
    };
    std::stable_sort(o, o + n, less);
  }
  return from_vector(out, rows.shape()).transpose(d, -1).contiguous();
}

// Equal shapes and values, NaN equal to NaN.
bool same_values(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  std::vector<double> va = to_vector<double>(a), vb = to_vector<double>(b);
  for (size_t i = 0; i < va.size(); ++i) {
    if (!(va[i] == vb[i] || (std::isnan(va[i]) && std::isnan(vb[i])))) return false;
  }
  return true;
}

TEST(Sort, EveryDimLayoutAndDtypeMatchesStableSort) {
  Generator g(5);
  // Few distinct values, so rows have ties, and some NaNs.
  Tensor base = randint(0, 5, {4, 6, 7}, DType::Int64, kCPU, &g).to(DType::Float64);
  Tensor nan_mask = lt(rand({4, 6, 7}, DType::Float64, kCPU, &g), 0.1);
  Tensor with_nan = where(nan_mask, full({}, kNaN, DType::Float64), base);
  for (DType dt :
       {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64, DType::Bool}) {
    Tensor src = (is_floating(dt) ? with_nan : base).to(dt);
    for (const Tensor& x : {src, src.transpose(0, 2), src.narrow(1, 1, 4)}) {
      for (int64_t d = 0; d < 3; ++d) {
        for (bool desc : {false, true}) {
          auto [values, indices] = sort(x, d, desc);
          Tensor want = reference_indices(x, d, desc);
          ASSERT_TRUE(equal(indices, want)) << dtype_name(dt) << " dim " << d << " descending " << desc;
          EXPECT_TRUE(same_values(values, gather(x, d, want))) << dtype_name(dt);
        }
      }
    }
  }
}

TEST(Sort, ZeroDimAndEmpty) {
  Tensor s = full({}, 4.0);
  auto [v, i] = sort(s);
  EXPECT_EQ(v.dim(), 0);
  EXPECT_EQ(i.item<int64_t>(), 0);
  EXPECT_EQ(topk(s, 1).second.item<int64_t>(), 0);
  EXPECT_EQ(sort(zeros({0, 3}), 0).second.shape(), (Shape{0, 3}));
  EXPECT_EQ(sort(zeros({3, 0})).first.shape(), (Shape{3, 0}));
  EXPECT_EQ(topk(ones({2, 5}), 0).second.shape(), (Shape{2, 0}));
}

TEST(Topk, IsTheHeadOfSortAlongAnyDim) {
  Generator g(9);
  Tensor x = randn({5, 50257}, DType::Float32, kCPU, &g);
  auto [v, i] = topk(x, 40);
  EXPECT_EQ(i.shape(), (Shape{5, 40}));
  EXPECT_TRUE(equal(i, argsort(x, 1, true).narrow(1, 0, 40)));
  EXPECT_TRUE(equal(v, sort(x, 1, true).first.narrow(1, 0, 40)));
  Tensor y = randint(0, 4, {6, 9, 3}, DType::Int64, kCPU, &g).to(DType::Float32).transpose(0, 1);
  for (bool largest : {true, false}) {
    EXPECT_TRUE(equal(topk(y, 4, 1, largest).second, argsort(y, 1, largest).narrow(1, 0, 4)));
    EXPECT_TRUE(equal(y.topk(9, 0, largest).second, y.argsort(0, largest)));
  }
}

TEST(Sort, GradcheckOfValues) {
  Tensor leaf = testing::random_leaf({4, 5});
  for (int64_t d : {0, 1}) {
    EXPECT_TRUE(testing::gradcheck([d](const TensorList& in) { return sort(in[0], d).first; }, {leaf}));
    EXPECT_TRUE(testing::gradcheck([d](const TensorList& in) { return sort(in[0].t(), d, true).first; }, {leaf}));
    EXPECT_TRUE(testing::gradcheck([d](const TensorList& in) { return topk(in[0], 3, d).first; }, {leaf}));
    EXPECT_TRUE(testing::gradcheck([d](const TensorList& in) { return topk(in[0], 2, d, false).first; }, {leaf}));
  }
  Tensor x = from_vector<double>({3, 1, 2}).set_requires_grad();
  topk(x, 2).first.backward(from_vector<double>({10, 20}));
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{10, 0, 20}));
}

TEST(Sort, Errors) {
  EXPECT_TRUE(throws_with([] { sort(ones({3}), 1); }, {"sort", "dim 1", "[3]"}));
  EXPECT_TRUE(throws_with([] { argsort(ones({3}), -2); }, {"argsort", "dim -2"}));
  EXPECT_TRUE(throws_with([] { topk(ones({2, 3}), 4); }, {"topk", "k = 4", "size 3", "[0, 3]"}));
  EXPECT_TRUE(throws_with([] { topk(ones({2, 3}), -1); }, {"topk", "k = -1", "[0, 3]"}));
  EXPECT_TRUE(throws_with([] { topk(ones({2, 3}), 1, 2); }, {"topk", "dim 2"}));
  EXPECT_TRUE(throws_with([] { sort(Tensor()); }, {"sort", "undefined"}));
}

TEST(Searchsorted, MatchesTorch) {
  Tensor seq = from_vector<float>({1, 2, 3});
  // torch.searchsorted(torch.tensor([1., 2., 3.]), torch.tensor([2, 5])) is [1, 3].
  EXPECT_EQ(to_vector<int64_t>(searchsorted(seq, from_vector<int64_t>({2, 5}))), (I{1, 3}));
  Tensor right = searchsorted(seq, full({}, 2.0), true);
  EXPECT_EQ(right.dim(), 0);
  EXPECT_EQ(right.item<int64_t>(), 2);
  // Row-wise: [[1, 2, 3], [1, 1, 1]] with [[2], [1]], right, is [[2], [3]].
  Tensor rows = from_vector<float>({1, 2, 3, 1, 1, 1}, {2, 3});
  EXPECT_EQ(to_vector<int64_t>(searchsorted(rows, from_vector<float>({2, 1}, {2, 1}), true)), (I{2, 3}));
  EXPECT_EQ(to_vector<int64_t>(searchsorted(rows, from_vector<float>({2, 1}, {2, 1}))), (I{1, 0}));
  Tensor values = from_vector<double>({0.5, 1, 1.5, 3, 9, -kInf, kInf, kNaN});
  EXPECT_EQ(to_vector<int64_t>(searchsorted(seq, values)), (I{0, 0, 1, 2, 3, 0, 3, 3}));
  EXPECT_EQ(to_vector<int64_t>(searchsorted(seq, values, true)), (I{0, 1, 1, 3, 3, 0, 3, 3}));
  EXPECT_EQ(to_vector<int64_t>(searchsorted(zeros({0}), values)), (I(8, 0)));
}

TEST(Searchsorted, Errors) {
  EXPECT_TRUE(throws_with(
      [] {
        searchsorted(ones({2, 3}), ones({1}));
      },
      {"searchsorted", "[2, 3]", "[1]", "first N-1 dims"}));
  EXPECT_TRUE(throws_with([] { searchsorted(ones({2, 3}), ones({3, 1})); }, {"searchsorted", "[3, 1]"}));
  EXPECT_TRUE(throws_with([] { searchsorted(full({}, 1.0), ones({1})); }, {"searchsorted", "0-dim"}));
}

}  // namespace
}  // namespace ember
