// cat, stack, split and chunk: values against naive loops, views, dtype
// promotion, every error message, and gradients by finite differences.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::throws_with;

// Passes when fn throws an ember::Error whose message contains every part.

// 0, 1, 2, ... as float64 in the given shape, plus `start`.
Tensor iota(const Shape& shape, double start = 0) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + double(i);
  return from_vector<double>(v, shape);
}

// Element (i, j) of a 2-D tensor, whatever its layout.
double at(const Tensor& t, int64_t i, int64_t j) { return to_vector<double>(t)[size_t(i * t.size(1) + j)]; }

// A float64 leaf requiring grad that is the transpose of a dense (cols, rows) tensor.
Tensor transposed_leaf(int64_t rows, int64_t cols, uint64_t seed) {
  return testing::random_leaf({cols, rows}, seed).detach().t().set_requires_grad();
}

// ---------------- cat ----------------

TEST(Cat, ValuesAlongEachDimOfOddShapes) {
  Tensor a = iota({2, 3}), b = iota({2, 1}, 100), c = iota({2, 4}, 200);
  Tensor y = cat({a, b, c}, 1);
  ASSERT_EQ(y.shape(), (Shape{2, 8}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 8; ++j) {
      double want = j < 3 ? at(a, i, j) : j < 4 ? at(b, i, j - 3) : at(c, i, j - 4);
      EXPECT_EQ(at(y, i, j), want) << i << "," << j;
    }
  }
  EXPECT_TRUE(equal(cat({a, b, c}, -1), y));

  Tensor d = iota({1, 3}, 50), e = iota({3, 3}, 60);
  std::vector<double> want = to_vector<double>(d), tail = to_vector<double>(e);
  want.insert(want.end(), tail.begin(), tail.end());
  EXPECT_EQ(to_vector<double>(cat({d, e}, 0)), want);
  EXPECT_EQ(cat({d, e}, -2).shape(), (Shape{4, 3}));
}

TEST(Cat, ThreeDimsMiddleDim) {
  Tensor a = iota({2, 1, 3}), b = iota({2, 2, 3}, 10);
  Tensor y = cat({a, b}, 1);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  std::vector<double> va = to_vector<double>(a), vb = to_vector<double>(b), vy = to_vector<double>(y);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t k = 0; k < 3; ++k) {
        double want = j == 0 ? va[size_t(i * 3 + k)] : vb[size_t(i * 6 + (j - 1) * 3 + k)];
        EXPECT_EQ(vy[size_t(i * 9 + j * 3 + k)], want);
      }
    }
  }
}

TEST(Cat, NonContiguousInputs) {
  Tensor base = iota({3, 2});
  Tensor a = base.t();  // (2, 3), transposed
  Tensor wide = iota({2, 7}, 100);
  Tensor b = wide.narrow(1, 2, 4);                 // (2, 4), narrowed
  Tensor c = iota({2, 6}, 300).slice(1, 0, 6, 3);  // (2, 2), strided
  ASSERT_FALSE(a.is_contiguous());
  ASSERT_FALSE(b.is_contiguous());
  Tensor y = cat({a, b, c}, 1);
  ASSERT_EQ(y.shape(), (Shape{2, 9}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(at(y, i, j), at(base, j, i));
    for (int64_t j = 0; j < 4; ++j) EXPECT_EQ(at(y, i, 3 + j), at(wide, i, 2 + j));
    for (int64_t j = 0; j < 2; ++j) EXPECT_EQ(at(y, i, 7 + j), 300 + i * 6 + j * 3);
  }
}

TEST(Cat, PromotesDtypes) {
  Tensor i32 = from_vector<int32_t>({1, 2}, {1, 2});
  Tensor f32 = from_vector<float>({0.5f, 1.5f}, {1, 2});
  Tensor y = cat({i32, f32}, 0);
  EXPECT_EQ(y.dtype(), DType::Float32);
  EXPECT_EQ(to_vector<float>(y), (std::vector<float>{1, 2, 0.5f, 1.5f}));

  Tensor i64 = from_vector<int64_t>({1LL << 40}, {1});
  Tensor f64 = from_vector<double>({0.25}, {1});
  Tensor z = cat({i64, f64});
  EXPECT_EQ(z.dtype(), DType::Float64);
  EXPECT_EQ(to_vector<double>(z), (std::vector<double>{double(1LL << 40), 0.25}));

  Tensor b = from_vector<bool>({true, false}, {2});
  Tensor w = cat({b, from_vector<int32_t>({7}, {1})});
  EXPECT_EQ(w.dtype(), DType::Int32);
  EXPECT_EQ(to_vector<int32_t>(w), (std::vector<int32_t>{1, 0, 7}));

  Tensor h = cat({ones({1}, DType::Float16), full({1}, 2, DType::BFloat16)});
  EXPECT_EQ(h.dtype(), DType::Float32);
  EXPECT_EQ(to_vector<float>(h), (std::vector<float>{1, 2}));
}

TEST(Cat, SkipsLegacyEmptyOneDimTensors) {
  Tensor x = iota({2, 3});
  Tensor y = cat({empty({0}, DType::Float32), x, empty({0}, DType::Float64)}, 1);
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.dtype(), DType::Float64);  // the skipped tensors still count for the dtype
  EXPECT_EQ(to_vector<double>(y), to_vector<double>(x));
  EXPECT_EQ(cat({empty({0}), empty({0})}).shape(), (Shape{0}));
  // A 2-D empty tensor is not skipped: its other sizes must match.
  EXPECT_EQ(cat({empty({0, 3}, DType::Float64), x}, 0).shape(), (Shape{2, 3}));
  EXPECT_TRUE(throws_with([&] { cat({empty({0, 2}, DType::Float64), x}, 0); }, {"[0, 2]", "[2, 3]", "dim 1"}));
}

TEST(Cat, ErrorsNameEveryShapeAndTheDim) {
  Tensor a = zeros({2, 3}), b = zeros({2, 4}), c = zeros({3, 3});
  EXPECT_TRUE(throws_with(
      [&] {
        cat({a, b, c}, 0);
      },
      {"cat", "except in dim 0", "tensor 1", "[2, 3]", "[2, 4]", "[3, 3]", "at dim 1"}));
  EXPECT_TRUE(throws_with([&] { cat({a, c}, 1); }, {"cat", "except in dim 1", "[2, 3]", "[3, 3]", "at dim 0"}));
  EXPECT_TRUE(throws_with(
      [&] {
        cat({a, zeros({2, 3, 1})}, 0);
      },
      {"cat", "same number of dims", "[2, 3]", "[2, 3, 1]"}));
  EXPECT_TRUE(throws_with([&] { cat({a, a}, 2); }, {"cat", "dim 2", "[2, 3]", "-2 to 1"}));
  EXPECT_TRUE(throws_with([&] { cat({a, a}, -3); }, {"cat", "dim -3", "[2, 3]"}));
  EXPECT_TRUE(throws_with([&] { cat({}, 0); }, {"cat", "non-empty list"}));
  EXPECT_TRUE(throws_with([&] { cat({a, zeros({})}, 0); }, {"cat", "zero-dimensional", "position 1"}));
  EXPECT_TRUE(throws_with([&] { cat({a, Tensor()}, 0); }, {"cat", "tensor 1 is undefined"}));
}

TEST(Cat, DevicesMustMatch) {
  float host[6] = {};
  // A tensor that claims to be on cuda:0; the check fires before any data is touched.
  Tensor fake_cuda = from_blob(host, {2, 3}, DType::Float32, cuda_device(0));
  EXPECT_TRUE(throws_with(
      [&] {
        cat({zeros({2, 3}), fake_cuda}, 0);
      },
      {"cat", "same device", "tensor 0 is on cpu", "tensor 1 on cuda:0", ".to(device)"}));
}

TEST(Cat, Gradcheck) {
  Tensor a = testing::random_leaf({2, 3}, 1);
  Tensor b = transposed_leaf(2, 4, 2);
  Tensor base = testing::random_leaf({2, 5}, 3);
  EXPECT_TRUE(testing::gradcheck(
      [](const TensorList& in) {
        return cat({in[0], in[1], in[2].narrow(1, 1, 2)}, -1);
      },
      {a, b, base}));
  Tensor c = transposed_leaf(3, 3, 4);
  EXPECT_TRUE(testing::gradcheck([](const TensorList& in) { return cat({in[0], in[1]}, 0); }, {a, c}));
}

TEST(Cat, BackwardReturnsEachInputItsDtypeAndSlice) {
  Tensor a = from_vector<float>({1, 2}, {2}).set_requires_grad();
  Tensor b = from_vector<double>({3, 4, 5}, {3}).set_requires_grad();
  Tensor i = from_vector<int64_t>({9}, {1});
  Tensor e = empty({0}, DType::Float64).set_requires_grad();
  Tensor y = cat({a, i, e, b});
  EXPECT_EQ(y.grad_fn()->name(), "CatBackward");
  y.backward(from_vector<double>({10, 20, 30, 40, 50, 60}, {6}));
  EXPECT_EQ(a.grad().dtype(), DType::Float32);
  EXPECT_EQ(to_vector<float>(a.grad()), (std::vector<float>{10, 20}));
  EXPECT_EQ(to_vector<double>(b.grad()), (std::vector<double>{40, 50, 60}));
  EXPECT_EQ(e.grad().shape(), (Shape{0}));
}

// ---------------- stack ----------------

TEST(Stack, ValuesForEveryDim) {
  Tensor a = iota({2, 3}), b = iota({2, 3}, 100);
  std::vector<double> va = to_vector<double>(a), vb = to_vector<double>(b);
  auto src = [&](int64_t t, int64_t i, int64_t j) { return (t == 0 ? va : vb)[size_t(i * 3 + j)]; };
  Tensor s0 = stack({a, b}, 0), s1 = stack({a, b}, 1), s2 = stack({a, b}, 2);
  ASSERT_EQ(s0.shape(), (Shape{2, 2, 3}));
  ASSERT_EQ(s1.shape(), (Shape{2, 2, 3}));
  ASSERT_EQ(s2.shape(), (Shape{2, 3, 2}));
  std::vector<double> v0 = to_vector<double>(s0), v1 = to_vector<double>(s1), v2 = to_vector<double>(s2);
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t i = 0; i < 2; ++i) {
      for (int64_t j = 0; j < 3; ++j) {
        EXPECT_EQ(v0[size_t(t * 6 + i * 3 + j)], src(t, i, j));
        EXPECT_EQ(v1[size_t(i * 6 + t * 3 + j)], src(t, i, j));
        EXPECT_EQ(v2[size_t(i * 6 + j * 2 + t)], src(t, i, j));
      }
    }
  }
  EXPECT_TRUE(equal(stack({a, b}, -1), s2));
  EXPECT_TRUE(equal(stack({a, b}, -3), s0));
}

TEST(Stack, NonContiguousPromotedAndScalars) {
  Tensor a = iota({3, 2}).t();
  Tensor b = from_vector<int32_t>({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor y = stack({a, b}, 1);
  EXPECT_EQ(y.dtype(), DType::Float64);
  EXPECT_EQ(to_vector<double>(y), (std::vector<double>{0, 2, 4, 1, 2, 3, 1, 3, 5, 4, 5, 6}));
  Tensor s = stack({full({}, 1.5), full({}, 2.5), full({}, 3.5)});
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_EQ(to_vector<float>(s), (std::vector<float>{1.5f, 2.5f, 3.5f}));
}

TEST(Stack, Errors) {
  Tensor a = zeros({2, 3});
  EXPECT_TRUE(throws_with(
      [&] {
        stack({a, a, zeros({2, 4})});
      },
      {"stack", "equal size", "[2, 3] at entry 0", "[2, 4] at entry 2"}));
  EXPECT_TRUE(throws_with([&] { stack({a, a}, 3); }, {"stack", "dim 3", "-3 to 2"}));
  EXPECT_TRUE(throws_with([&] { stack({a, a}, -4); }, {"stack", "dim -4"}));
  EXPECT_TRUE(throws_with([&] { stack({}); }, {"stack", "non-empty list"}));
}

TEST(Stack, Gradcheck) {
  Tensor a = testing::random_leaf({2, 3}, 5);
  Tensor b = transposed_leaf(2, 3, 6);
  Tensor base = testing::random_leaf({4, 3}, 7);
  auto fn = [](int64_t d) {
    return [d](const TensorList& in) { return stack({in[0], in[1], in[2].narrow(0, 1, 2)}, d); };
  };
  for (int64_t d : {0, 1, -1}) EXPECT_TRUE(testing::gradcheck(fn(d), {a, b, base})) << "dim " << d;
  EXPECT_EQ(stack({a, b}).grad_fn()->name(), "StackBackward");
}

// ---------------- split and chunk ----------------

std::vector<int64_t> sizes_along(const TensorList& pieces, int64_t dim) {
  std::vector<int64_t> s;
  for (const Tensor& p : pieces) s.push_back(p.size(dim));
  return s;
}

TEST(Split, BySizeGivesViewsWithAShortLastPiece) {
  Tensor x = iota({7, 2});
  TensorList p = split(x, 3);
  EXPECT_EQ(sizes_along(p, 0), (std::vector<int64_t>{3, 3, 1}));
  EXPECT_EQ(to_vector<double>(p[1]), (std::vector<double>{6, 7, 8, 9, 10, 11}));
  EXPECT_EQ(to_vector<double>(p[2]), (std::vector<double>{12, 13}));
  p[1].fill_(-1);  // a view: writes reach x
  EXPECT_EQ(to_vector<double>(x)[6], -1);
  EXPECT_EQ(p[2].storage(), x.storage());

  EXPECT_EQ(sizes_along(split(x, 7), 0), (std::vector<int64_t>{7}));
  EXPECT_EQ(sizes_along(split(x, 10), 0), (std::vector<int64_t>{7}));
  EXPECT_EQ(sizes_along(split(iota({2, 5}), 2, -1), 1), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(sizes_along(split(zeros({0, 3}), 0), 0), (std::vector<int64_t>{0}));
  EXPECT_EQ(sizes_along(split(zeros({0, 3}), 2), 0), (std::vector<int64_t>{0}));
}

TEST(Split, BySizesOnANonContiguousTensor) {
  Tensor base = iota({5, 3});
  Tensor x = base.t();  // (3, 5)
  TensorList p = split(x, std::vector<int64_t>{2, 0, 3}, 1);
  EXPECT_EQ(sizes_along(p, 1), (std::vector<int64_t>{2, 0, 3}));
  // x[i][j] = base[j][i] = 3j + i
  EXPECT_EQ(to_vector<double>(p[0]), (std::vector<double>{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(to_vector<double>(p[2]), (std::vector<double>{6, 9, 12, 7, 10, 13, 8, 11, 14}));
  EXPECT_EQ(p[1].shape(), (Shape{3, 0}));
}

TEST(Split, Errors) {
  Tensor x = zeros({5, 3});
  EXPECT_TRUE(throws_with([&] { split(x, -1); }, {"split", "non-negative", "-1"}));
  EXPECT_TRUE(throws_with([&] { split(x, 0); }, {"split", "can only be 0", "dimension size 5"}));
  EXPECT_TRUE(throws_with(
      [&] {
        split(x, std::vector<int64_t>{2, 2});
      },
      {"split", "[2, 2]", "sum to 4", "dim 0", "[5, 3]", "size 5"}));
  EXPECT_TRUE(throws_with([&] { split(x, std::vector<int64_t>{6, -1}); }, {"split", "non-negative", "[6, -1]"}));
  EXPECT_TRUE(throws_with([&] { split(x, 2, 2); }, {"split", "dim 2", "[5, 3]"}));
  EXPECT_TRUE(throws_with([&] { split(zeros({}), 1); }, {"split", "0-dim"}));
}

TEST(Chunk, FollowsTorchChunkForUnevenSizes) {
  struct Case {
    int64_t n, chunks;
    std::vector<int64_t> want;  // what torch.chunk returns
  };
  std::vector<Case> cases = {
      {5, 4, {2, 2, 1}},
      {6, 4, {2, 2, 2}},
      {10, 3, {4, 4, 2}},
      {3, 5, {1, 1, 1}},
      {0, 3, {0, 0, 0}},
      {1, 1, {1}},
      {7, 7, {1, 1, 1, 1, 1, 1, 1}},
      {12, 5, {3, 3, 3, 3}},
      {13, 5, {3, 3, 3, 3, 1}},
      {4, 1, {4}},
  };
  for (const Case& c : cases) {
    Tensor x = iota({2, c.n});
    TensorList p = chunk(x, c.chunks, 1);
    EXPECT_EQ(sizes_along(p, 1), c.want) << "size " << c.n << ", chunks " << c.chunks;
    int64_t offset = 0;
    for (const Tensor& piece : p) {
      EXPECT_TRUE(equal(piece, x.narrow(1, offset, piece.size(1))));
      offset += piece.size(1);
    }
  }
  EXPECT_EQ(sizes_along(chunk(iota({5, 2}), 2, -2), 0), (std::vector<int64_t>{3, 2}));
}

TEST(Chunk, Errors) {
  Tensor x = zeros({4, 2});
  EXPECT_TRUE(throws_with([&] { chunk(x, 0); }, {"chunk", "must be positive", "got 0"}));
  EXPECT_TRUE(throws_with([&] { chunk(x, 2, -3); }, {"chunk", "dim -3", "[4, 2]"}));
  EXPECT_TRUE(throws_with([&] { chunk(zeros({}), 2); }, {"chunk", "0-dim"}));
}

TEST(Split, GradcheckAndOneNodeForAllPieces) {
  Tensor x = transposed_leaf(4, 5, 8);  // (4, 5), non-contiguous
  EXPECT_TRUE(testing::gradcheck(
      [](const TensorList& in) {
        TensorList p = split(in[0], 2, 1);  // widths 2, 2, 1
        return cat({p[2] * 3.0, p[0], p[1].exp()}, 1);
      },
      {x}));
  // Pieces that get no gradient count as zeros.
  EXPECT_TRUE(testing::gradcheck(
      [](const TensorList& in) {
        return split(in[0], std::vector<int64_t>{1, 3}, 0)[1];
      },
      {x}));
  EXPECT_TRUE(testing::gradcheck(
      [](const TensorList& in) {
        TensorList p = chunk(in[0], 3, -1);  // widths 2, 2, 1
        return p[0] * p[1];
      },
      {x}));
  TensorList p = split(x, 2, 1);
  EXPECT_EQ(p[0].grad_fn()->name(), "SplitBackward");
  EXPECT_EQ(p[0].grad_fn(), p[2].grad_fn());
  EXPECT_EQ(p[2].output_nr(), 2u);
  EXPECT_EQ(chunk(x, 2)[1].grad_fn()->name(), "ChunkBackward");
}

TEST(Split, AdjacentGradientsAreJoinedWithoutACopy) {
  // Gradients that already are x's pieces of one tensor (here a cat's
  // backward's views) come back as that tensor; others, in another order or
  // under create_graph, through a cat. Values are the same either way.
  Tensor x = testing::random_leaf({3, 7}, 1);
  const TensorList p = split(x, std::vector<int64_t>{2, 4, 1}, 1);
  const Tensor g = testing::random_leaf({3, 7}, 2).detach();
  const TensorList adjacent = {g.narrow(1, 0, 2), g.narrow(1, 2, 4), g.narrow(1, 6, 1)};
  const Tensor joined = autograd::grad(p, {x}, adjacent, /*retain_graph=*/true)[0];
  EXPECT_EQ(joined.data_ptr(), g.data_ptr());
  EXPECT_TRUE(equal(joined, g));
  const TensorList shuffled = {g.narrow(1, 5, 2), g.narrow(1, 0, 4), g.narrow(1, 4, 1)};
  const Tensor copied = autograd::grad(p, {x}, shuffled, /*retain_graph=*/true)[0];
  EXPECT_NE(copied.data_ptr(), g.data_ptr());
  EXPECT_TRUE(equal(copied, cat(shuffled, 1)));
  const Tensor recorded = autograd::grad(p, {x}, adjacent, /*retain_graph=*/true, /*create_graph=*/true)[0];
  EXPECT_NE(recorded.data_ptr(), g.data_ptr());
  EXPECT_TRUE(equal(recorded.detach(), g));
}

}  // namespace
}  // namespace ember
