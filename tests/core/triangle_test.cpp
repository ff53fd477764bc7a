// triu and tril (ember/core/ops/triangle.cpp, ember/kernels/cpu/triangle.cpp): values
// against an index-math reference and PyTorch, every dtype, batch dims,
// every diagonal (including far beyond the matrix), non-contiguous and
// broadcast inputs, empty shapes, the float64 gradient, and the errors.
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::gradcheck;
using testing::throws_with;

// The reference: x's values with those outside the triangle set to 0.
std::vector<double> reference(const Tensor& x, bool upper, int64_t diagonal) {
  std::vector<double> v = to_vector<double>(x);
  const int64_t rows = x.size(-2), cols = x.size(-1);
  for (size_t k = 0; k < v.size(); ++k) {
    const int64_t j = int64_t(k) % cols, i = (int64_t(k) / cols) % rows;
    if (upper ? j - i < diagonal : j - i > diagonal) v[k] = 0;
  }
  return v;
}

void expect_both(const Tensor& x, int64_t diagonal, const std::string& what) {
  Tensor u = triu(x, diagonal), l = tril(x, diagonal);
  ASSERT_EQ(u.shape(), x.shape()) << what;
  EXPECT_EQ(u.dtype(), x.dtype()) << what;
  EXPECT_TRUE(u.is_contiguous()) << what;
  EXPECT_EQ(to_vector<double>(u), reference(x, true, diagonal)) << "triu " << what << " diagonal " << diagonal;
  EXPECT_EQ(to_vector<double>(l), reference(x, false, diagonal)) << "tril " << what << " diagonal " << diagonal;
}

TEST(Triangle, MatchesPyTorch) {
  // torch.triu(torch.arange(12).reshape(3, 4), 1)
  EXPECT_EQ(to_vector<int64_t>(triu(arange(12, DType::Int64).reshape({3, 4}), 1)),
            (std::vector<int64_t>{0, 1, 2, 3, 0, 0, 6, 7, 0, 0, 0, 11}));
  // torch.tril(torch.ones(2, 3, dtype=torch.bool), -1)
  EXPECT_EQ(to_vector<bool>(tril(ones({2, 3}, DType::Bool), -1)),
            (std::vector<bool>{false, false, false, true, false, false}));
}

TEST(Triangle, EveryDtypeShapeAndDiagonal) {
  const DType dtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                          DType::Int32,   DType::Int64,   DType::Bool};
  const Shape shapes[] = {{1, 1}, {3, 3}, {4, 7}, {7, 4}, {2, 3, 5, 6}, {5, 1}, {1, 5}};
  for (DType dt : dtypes) {
    for (const Shape& s : shapes) {
      std::vector<double> v;
      for (int64_t k = 0; k < empty(s).numel(); ++k) v.push_back(double(k % 5 + 1));
      Tensor x = from_vector(v, s).to(dt);
      for (int64_t diagonal : {-100, -3, -1, 0, 1, 2, 100}) {
        expect_both(x, diagonal, std::string(dtype_name(dt)) + " " + shape_str(s));
      }
    }
  }
  // Diagonals at the limits of int64 keep everything or nothing.
  Tensor x = ones({3, 4});
  EXPECT_EQ(to_vector<double>(triu(x, INT64_MAX)), std::vector<double>(12, 0.0));
  EXPECT_EQ(to_vector<double>(tril(x, INT64_MAX)), std::vector<double>(12, 1.0));
  EXPECT_EQ(to_vector<double>(triu(x, INT64_MIN)), std::vector<double>(12, 1.0));
  EXPECT_EQ(to_vector<double>(tril(x, INT64_MIN)), std::vector<double>(12, 0.0));
}

TEST(Triangle, NonContiguousBroadcastAndEmptyInputs) {
  Tensor base = arange(2 * 5 * 6, DType::Float64).reshape({2, 5, 6}) + 1;
  expect_both(base.transpose(1, 2), 1, "transposed");
  expect_both(base.permute({2, 0, 1}), -1, "permuted batch");  // batch dims that do not merge
  expect_both(base.narrow(2, 1, 4).narrow(1, 0, 3), 0, "narrowed");
  expect_both(arange(4, DType::Float64).expand({3, 2, 4}), 1, "expanded");
  for (const Shape& s : {Shape{0, 3}, Shape{3, 0}, Shape{2, 0, 4}}) {
    Tensor e = zeros(s);
    EXPECT_EQ(triu(e).shape(), s);
    EXPECT_EQ(tril(e, 2).shape(), s);
  }
  // The methods are the free functions.
  EXPECT_TRUE(equal(base.triu(2), triu(base, 2)));
  EXPECT_TRUE(equal(base.tril(-2), tril(base, -2)));
}

TEST(Triangle, CausalMaskForAttention) {
  // The usual use: a bool mask of the positions a query may not see.
  Tensor blocked = triu(ones({4, 4}, DType::Bool), 1);
  EXPECT_EQ(to_vector<bool>(blocked[1]), (std::vector<bool>{false, false, true, true}));
  EXPECT_EQ(to_vector<bool>(blocked[3]), (std::vector<bool>{false, false, false, false}));
}

TEST(Triangle, GradientIsTheSameTriangleOfTheGradient) {
  Tensor x = testing::random_leaf({2, 4, 5}, 3);
  for (int64_t diagonal : {-2, 0, 1, 6}) {
    EXPECT_TRUE(gradcheck([=](const TensorList& in) { return triu(in[0], diagonal); }, {x})) << diagonal;
    EXPECT_TRUE(gradcheck([=](const TensorList& in) { return tril(in[0].transpose(1, 2), diagonal); }, {x}))
        << diagonal;
  }
  EXPECT_EQ(triu(x).grad_fn()->name(), "TriuBackward");
  EXPECT_EQ(tril(x).grad_fn()->name(), "TrilBackward");
}

TEST(Triangle, FewerThanTwoDimsIsAnError) {
  EXPECT_TRUE(throws_with([] { triu(ones({3})); }, {"triu", "at least 2 dimensions", "[3] float32", "unsqueeze"}));
  EXPECT_TRUE(throws_with([] { tril(full({}, 1.0)); }, {"tril", "at least 2 dimensions", "[] float32"}));
}

}  // namespace
}  // namespace ember
