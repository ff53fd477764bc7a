// index_select, gather, scatter_add, embedding and one_hot: values against
// naive loops, non-contiguous inputs, int32 and int64 indices, repeated
// indices, every error message, and gradients by finite differences
// (including second order through the backward ops).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ember/core/ops/embedding_kernels.h"
#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using testing::throws_with;

// Passes when fn throws an ember::Error whose message contains every part.

Tensor iota(const Shape& shape, double start = 0) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = start + double(i);
  return from_vector<double>(v, shape);
}

Tensor i64(const std::vector<int64_t>& v, const Shape& shape) { return from_vector<int64_t>(v, shape); }
Tensor i64(const std::vector<int64_t>& v) { return from_vector<int64_t>(v); }

// Element (i, j) of a 2-D tensor, whatever its layout.
double at(const Tensor& t, int64_t i, int64_t j) { return to_vector<double>(t)[size_t(i * t.size(1) + j)]; }
int64_t iat(const Tensor& t, int64_t i, int64_t j) { return to_vector<int64_t>(t)[size_t(i * t.size(1) + j)]; }

Tensor transposed_leaf(int64_t rows, int64_t cols, uint64_t seed) {
  return testing::random_leaf({cols, rows}, seed).detach().t().set_requires_grad();
}

// ---------------- index_select ----------------

TEST(IndexSelect, ValuesOnATransposedInputWithRepeats) {
  Tensor base = iota({5, 4});
  Tensor x = base.t();  // (4, 5), x[i][j] = 4j + i
  for (DType dt : {DType::Int64, DType::Int32}) {
    Tensor idx = i64({4, 0, 4, 2}).to(dt);
    Tensor y = index_select(x, 1, idx);
    ASSERT_EQ(y.shape(), (Shape{4, 4}));
    std::vector<int64_t> iv = {4, 0, 4, 2};
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t k = 0; k < 4; ++k) EXPECT_EQ(at(y, i, k), 4 * iv[k] + i);
    }
    EXPECT_TRUE(equal(index_select(x, -1, idx), y));
    Tensor r = index_select(x, 0, i64({3, 3}).to(dt));
    ASSERT_EQ(r.shape(), (Shape{2, 5}));
    for (int64_t j = 0; j < 5; ++j) EXPECT_EQ(at(r, 1, j), 4 * j + 3);
  }
}

TEST(IndexSelect, ThreeDimsNarrowedInputStridedIndexAndEdgeShapes) {
  Tensor big = iota({3, 6, 2});
  Tensor x = big.narrow(1, 1, 4);                          // (3, 4, 2), x[a][b][c] = 12a + 2(b+1) + c
  Tensor idx = i64({2, 9, 0, 9, 1, 9}).slice(0, 0, 6, 2);  // [2, 0, 1], strided
  Tensor y = index_select(x, 1, idx);
  ASSERT_EQ(y.shape(), (Shape{3, 3, 2}));
  std::vector<double> v = to_vector<double>(y);
  std::vector<int64_t> iv = {2, 0, 1};
  for (int64_t a = 0; a < 3; ++a)
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t c = 0; c < 2; ++c) EXPECT_EQ(v[size_t(a * 6 + b * 2 + c)], 12 * a + 2 * (iv[b] + 1) + c);
  EXPECT_EQ(index_select(x, 1, i64({}, {0})).shape(), (Shape{3, 0, 2}));
  EXPECT_EQ(index_select(x, 2, full({}, 1, DType::Int64)).shape(), (Shape{3, 4, 1}));  // a 0-D index
  Tensor s = index_select(full({}, 7.0), 0, i64({0}));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<float>(), 7.0f);
}

TEST(IndexSelect, Errors) {
  Tensor x = zeros({3, 4});
  EXPECT_TRUE(throws_with(
      [&] {
        index_select(x, 1, i64({0, 4}));
      },
      {"index_select", "index 4", "out of bounds", "dim 1", "size 4"}));
  EXPECT_TRUE(throws_with([&] { index_select(x, 0, i64({-1}).to(DType::Int32)); },
                          {"index_select", "index -1", "dim 0", "size 3"}));
  EXPECT_TRUE(throws_with([&] { index_select(x, 0, from_vector<float>({0})); },
                          {"index_select", "int64 or int32", "float32", ".to(DType::Int64)"}));
  EXPECT_TRUE(throws_with([&] { index_select(x, 0, i64({0, 1}, {1, 2})); }, {"index_select", "0-D or 1-D", "[1, 2]"}));
  EXPECT_TRUE(throws_with([&] { index_select(x, 2, i64({0})); }, {"index_select", "dim 2", "[3, 4]"}));
  EXPECT_TRUE(throws_with([&] { index_select(full({}, 1.0), 0, i64({0, 0})); }, {"index_select", "0-dim", "got 2"}));
  int64_t host[1] = {0};
  Tensor fake_cuda_index = from_blob(host, {1}, DType::Int64, cuda_device(0));
  EXPECT_TRUE(throws_with([&] { index_select(x, 0, fake_cuda_index); },
                          {"index_select", "[3, 4] float32 on cpu", "[1] int64 on cuda:0"}));
}

TEST(IndexSelect, GradcheckNonContiguousWithRepeats) {
  Tensor x = transposed_leaf(4, 5, 1);
  Tensor idx = i64({3, 0, 3, 3, 1});
  EXPECT_TRUE(testing::gradcheck([idx](const TensorList& in) { return index_select(in[0], 0, idx); }, {x}));
  Tensor idx32 = i64({4, 4, 2}).to(DType::Int32);
  EXPECT_TRUE(testing::gradcheck([idx32](const TensorList& in) { return index_select(in[0], -1, idx32); }, {x}));
  EXPECT_EQ(index_select(x, 0, idx).grad_fn()->name(), "IndexSelectBackward");
}

TEST(IndexSelect, BackwardAddsRepeatedRows) {
  Tensor x = zeros({3, 2}, DType::Float64).set_requires_grad();
  index_select(x, 0, i64({2, 0, 2, 2})).backward(iota({4, 2}, 1));
  // rows 0,2,3 of g (1 2 / 5 6 / 7 8) go to row 2; row 1 (3 4) to row 0.
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{3, 4, 0, 0, 1 + 5 + 7, 2 + 6 + 8}));
}

// ---------------- gather ----------------

TEST(Gather, ValuesAlongEachDim) {
  Tensor x = iota({3, 4});  // x[i][j] = 4i + j
  Tensor idx = i64({3, 0, 1, 1, 2, 3}, {3, 2});
  Tensor y = gather(x, 1, idx);
  ASSERT_EQ(y.shape(), (Shape{3, 2}));
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(at(y, i, k), 4 * i + iat(idx, i, k));
  EXPECT_TRUE(equal(gather(x, -1, idx.to(DType::Int32)), y));

  // Along dim 0 with an index smaller than x in dim 1.
  Tensor idx0 = i64({2, 0, 1, 0, 0, 2}, {2, 3});
  Tensor z = gather(x, 0, idx0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(at(z, i, j), 4 * iat(idx0, i, j) + j);
}

TEST(Gather, NonContiguousInputAndIndex) {
  Tensor x = iota({4, 3}).t();                       // (3, 4), x[i][j] = 3j + i
  Tensor idx = i64({0, 3, 2, 1, 1, 0}, {2, 3}).t();  // (3, 2), non-contiguous
  ASSERT_FALSE(idx.is_contiguous());
  Tensor y = gather(x, 1, idx);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(at(y, i, k), 3 * iat(idx, i, k) + i);
}

TEST(Gather, HalfBoolAndZeroDim) {
  Tensor h = from_vector<float>({1.5f, -2, 3}).to(DType::Float16);
  Tensor y = gather(h, 0, i64({2, 2, 0}));
  EXPECT_EQ(y.dtype(), DType::Float16);
  EXPECT_EQ(to_vector<float>(y), (std::vector<float>{3, 3, 1.5f}));
  Tensor b = from_vector<bool>({true, false});
  EXPECT_EQ(to_vector<bool>(gather(b, 0, i64({1, 0, 1}))), (std::vector<bool>{false, true, false}));
  Tensor s = gather(full({}, 4.0), 0, full({}, 0, DType::Int64));
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<float>(), 4.0f);
}

TEST(Gather, Errors) {
  Tensor x = zeros({3, 4});
  EXPECT_TRUE(throws_with(
      [&] {
        gather(x, 1, i64({0, 1, 7, 2}, {2, 2}));
      },
      {"gather", "index 7", "out of bounds", "dim 1", "size 4"}));
  EXPECT_TRUE(throws_with([&] { gather(x, 0, i64({-3}, {1, 1})); }, {"gather", "index -3", "dim 0", "size 3"}));
  EXPECT_TRUE(throws_with([&] { gather(x, 1, i64({0, 1})); }, {"gather", "as many dims", "[3, 4]", "[2]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        gather(x, 1, zeros({4, 1}, DType::Int64));
      },
      {"gather", "[4, 1]", "larger than the input", "[3, 4]", "at dim 0", "only dim 1"}));
  EXPECT_TRUE(throws_with([&] { gather(x, -3, zeros({1, 1}, DType::Int64)); }, {"gather", "dim -3", "[3, 4]"}));
  EXPECT_TRUE(throws_with([&] { gather(x, 0, zeros({1, 1}, DType::Bool)); }, {"gather", "int64 or int32", "bool"}));
}

TEST(Gather, Gradcheck) {
  Tensor x = transposed_leaf(3, 4, 2);
  Tensor idx = i64({3, 3, 0, 1, 2, 2}, {3, 2});
  EXPECT_TRUE(testing::gradcheck([idx](const TensorList& in) { return gather(in[0], 1, idx); }, {x}));
  Tensor idx0 = i64({2, 2, 2, 0, 1, 1}, {2, 3}).to(DType::Int32);
  EXPECT_TRUE(testing::gradcheck([idx0](const TensorList& in) { return gather(in[0], 0, idx0); }, {x}));
  EXPECT_EQ(gather(x, 1, idx).grad_fn()->name(), "GatherBackward");
}

// ---------------- scatter_add ----------------

TEST(ScatterAdd, ValuesWithRepeatsAndASrcLargerThanTheIndex) {
  Tensor x = iota({3, 4});
  Tensor idx = i64({1, 1, 3, 0, 0, 0}, {2, 3});
  Tensor src = iota({2, 5}, 100);  // only [:2, :3] is used
  for (DType dt : {DType::Int64, DType::Int32}) {
    Tensor y = scatter_add(x, 1, idx.to(dt), src);
    std::vector<double> want = to_vector<double>(x);
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t k = 0; k < 3; ++k) want[size_t(i * 4 + iat(idx, i, k))] += at(src, i, k);
    EXPECT_EQ(to_vector<double>(y), want);
  }
  EXPECT_EQ(to_vector<double>(x), to_vector<double>(iota({3, 4})));  // out of place

  // Along dim 0 (rows added into rows).
  Tensor idx0 = i64({2, 0, 2, 2}, {1, 4});
  Tensor y0 = scatter_add(x, 0, idx0, full({1, 4}, 10.0, DType::Float64));
  std::vector<double> want0 = to_vector<double>(x);
  for (int64_t j = 0; j < 4; ++j) want0[size_t(iat(idx0, 0, j) * 4 + j)] += 10;
  EXPECT_EQ(to_vector<double>(y0), want0);
  EXPECT_TRUE(equal(scatter_add(x, -2, idx0, full({1, 4}, 10.0, DType::Float64)), y0));
}

TEST(ScatterAdd, NonContiguousOperandsAndOtherDtypes) {
  Tensor x = iota({4, 3}).t();                    // (3, 4)
  Tensor idx = i64({0, 0, 2, 1}, {2, 2}).t();     // (2, 2): [[0, 2], [0, 1]]
  Tensor src = iota({2, 6}, 50).narrow(1, 1, 3);  // (2, 3): [[51, 52, 53], [57, 58, 59]]
  Tensor y = scatter_add(x, 1, idx, src);
  std::vector<double> want = to_vector<double>(x);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t k = 0; k < 2; ++k) want[size_t(i * 4 + iat(idx, i, k))] += at(src, i, k);
  EXPECT_EQ(to_vector<double>(y), want);

  Tensor h = scatter_add(zeros({3}, DType::BFloat16), 0, i64({1, 1, 1}), full({3}, 0.5, DType::BFloat16));
  EXPECT_EQ(to_vector<float>(h), (std::vector<float>{0, 1.5f, 0}));
  Tensor n = scatter_add(zeros({2}, DType::Int32), 0, i64({0, 0, 1}), from_vector<int32_t>({5, 6, 7}));
  EXPECT_EQ(to_vector<int32_t>(n), (std::vector<int32_t>{11, 7}));
}

TEST(ScatterAdd, Errors) {
  Tensor x = zeros({3, 4});
  Tensor src = ones({2, 2});
  EXPECT_TRUE(throws_with(
      [&] {
        scatter_add(x, 1, i64({0, 4, 1, 2}, {2, 2}), src);
      },
      {"scatter_add", "index 4", "out of bounds", "dim 1", "size 4"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scatter_add(x, 0, i64({0, -2, 1, 2}, {2, 2}), src);
      },
      {"scatter_add", "index -2", "dim 0", "size 3"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scatter_add(x, 1, zeros({2, 3}, DType::Int64), src);
      },
      {"scatter_add", "[2, 3]", "larger than src", "[2, 2]", "at dim 1"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scatter_add(x, 1, zeros({4, 1}, DType::Int64), ones({4, 1}));
      },
      {"scatter_add", "[4, 1]", "larger than the input", "[3, 4]", "at dim 0"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scatter_add(x, 1, zeros({2, 2}, DType::Int64), src.to(DType::Float64));
      },
      {"scatter_add", "[3, 4] float32", "[2, 2] float64"}));
  EXPECT_TRUE(throws_with([&] { scatter_add(x, 1, zeros({2}, DType::Int64), src); },
                          {"scatter_add", "same number of dims", "[3, 4]", "[2]", "[2, 2]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scatter_add(x, 2, zeros({2, 2}, DType::Int64), src);
      },
      {"scatter_add", "dim 2", "[3, 4]"}));
}

TEST(ScatterAdd, GradcheckBothInputs) {
  Tensor x = transposed_leaf(3, 4, 3);
  Tensor src = testing::random_leaf({2, 5}, 4);  // larger than the index: the rest gets zero gradient
  Tensor idx = i64({1, 1, 3, 0, 0, 0}, {2, 3});  // repeated indices
  EXPECT_TRUE(testing::gradcheck([idx](const TensorList& in) { return scatter_add(in[0], 1, idx, in[1]); }, {x, src}));
  Tensor src_t = transposed_leaf(2, 4, 5);
  Tensor idx0 = i64({2, 2, 0, 2, 1, 1, 1, 1}, {2, 4}).to(DType::Int32);
  EXPECT_TRUE(
      testing::gradcheck([idx0](const TensorList& in) { return scatter_add(in[0], 0, idx0, in[1]); }, {x, src_t}));
}

TEST(ScatterAdd, BackwardValues) {
  Tensor x = zeros({2, 3}, DType::Float64).set_requires_grad();
  Tensor src = zeros({2, 2}, DType::Float64).set_requires_grad();
  Tensor y = scatter_add(x, 1, i64({2, 2, 0, 1}, {2, 2}), src);
  EXPECT_EQ(y.grad_fn()->name(), "ScatterAddBackward");
  y.backward(iota({2, 3}, 1));  // g = [[1, 2, 3], [4, 5, 6]]
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(to_vector<double>(src.grad()), (std::vector<double>{3, 3, 4, 5}));
}

// ---------------- embedding ----------------

TEST(Embedding, ShapeAndRows) {
  Tensor w = iota({5, 3});
  Tensor idx = from_vector<int32_t>({4, 0, 4, 2, 1, 1}, {2, 3});
  Tensor y = embedding(w, idx);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 3}));
  std::vector<double> v = to_vector<double>(y);
  std::vector<int32_t> iv = to_vector<int32_t>(idx);
  for (size_t r = 0; r < 6; ++r)
    for (size_t c = 0; c < 3; ++c) EXPECT_EQ(v[r * 3 + c], 3 * iv[r] + double(c));
  EXPECT_EQ(embedding(w, full({}, 3, DType::Int64)).shape(), (Shape{3}));
  EXPECT_EQ(embedding(w, i64({}, {0, 2})).shape(), (Shape{0, 2, 3}));
  // A transposed weight: rows are strided.
  Tensor wt = iota({3, 5}).t();  // (5, 3), wt[r][c] = 5c + r
  EXPECT_EQ(to_vector<double>(embedding(wt, i64({3}))), (std::vector<double>{3, 8, 13}));
}

TEST(Embedding, BackwardAddsRepeatedIndices) {
  Tensor w = zeros({4, 2}, DType::Float64).set_requires_grad();
  Tensor idx = i64({1, 3, 1, 1}, {2, 2});
  Tensor y = embedding(w, idx);
  EXPECT_EQ(y.grad_fn()->name(), "EmbeddingBackward");
  y.backward(iota({2, 2, 2}, 1));  // rows (1 2) (3 4) (5 6) (7 8)
  EXPECT_EQ(to_vector<double>(w.grad()), (std::vector<double>{0, 0, 1 + 5 + 7, 2 + 6 + 8, 0, 0, 3, 4}));
}

TEST(Embedding, Gradcheck) {
  Tensor w = transposed_leaf(5, 3, 6);
  Tensor idx = i64({4, 0, 4, 4, 2, 0}, {3, 2});
  EXPECT_TRUE(testing::gradcheck([idx](const TensorList& in) { return embedding(in[0], idx); }, {w}));
}

// Unused rows are zero, int32 indices, a gradient with strides of its own
// (a permuted tensor), and no index at all.
TEST(Embedding, BackwardUnusedRowsInt32StridedGradientAndNoIndex) {
  Tensor w = full({5, 3}, 9.0, DType::Float64).set_requires_grad();
  Tensor idx = from_vector<int32_t>({3, 0, 3, 3}, {2, 2});
  Tensor g = iota({3, 2, 2}, 1).permute({1, 2, 0});  // (2, 2, 3), g[i][j][c] = 1 + 4c + 2i + j
  ASSERT_FALSE(g.is_contiguous());
  embedding(w, idx).backward(g);
  // Row 0: position 1 = (2, 6, 10); row 3: positions 0, 2, 3.
  EXPECT_EQ(to_vector<double>(w.grad()),
            (std::vector<double>{2, 6, 10, 0, 0, 0, 0, 0, 0, 1 + 3 + 4, 5 + 7 + 8, 9 + 11 + 12, 0, 0, 0}));
  Tensor w2 = full({4, 2}, 9.0, DType::Float32).set_requires_grad();
  embedding(w2, i64({}, {0})).sum().backward();
  EXPECT_EQ(to_vector<double>(w2.grad()), std::vector<double>(8, 0.0));
}

// Repeated rows add in increasing position, from zero, in float for the half
// types and rounded once: (1e8 + 1) - 1e8 is 0 in float32 (any other order
// gives 1), and half 2048 + 1 + 1 is 2050 (adding in half would give 2048).
TEST(Embedding, BackwardAddsInPositionOrderRoundingOnce) {
  Tensor idx = i64({1, 0, 1, 1});
  Tensor w = zeros({2, 1}, DType::Float32).set_requires_grad();
  embedding(w, idx).backward(from_vector<float>({1e8f, 5, 1, -1e8f}, {4, 1}));
  EXPECT_EQ(to_vector<float>(w.grad()), (std::vector<float>{5, 0}));
  Tensor h = zeros({2, 1}, DType::Float16).set_requires_grad();
  embedding(h, idx).backward(from_vector<float>({2048, 7, 1, 1}, {4, 1}).to(DType::Float16));
  EXPECT_EQ(to_vector<float>(h.grad()), (std::vector<float>{7, 2050}));
}

// The kernel itself: every element written over NaN, then an index out of
// range (the forward has checked it; the CPU kernel checks again).
TEST(Embedding, BackwardKernelWritesEveryRowAndChecksItsIndices) {
  Tensor out = full({3, 2}, std::nan(""), DType::Float32), grad = iota({2, 2}, 1).to(DType::Float32);
  Tensor idx = i64({2, 2});
  EmbeddingBackwardArgs a;
  a.grad_weight = out.data_ptr();
  a.grad_out = grad.data_ptr();
  a.grad_out_row_stride = 2;
  a.grad_out_col_stride = 1;
  a.indices = idx.data_ptr();
  a.num_indices = 2;
  a.num_embeddings = 3;
  a.dim = 2;
  a.dtype = DType::Float32;
  embedding_backward_stub(DeviceType::CPU)(a);
  EXPECT_EQ(to_vector<float>(out), (std::vector<float>{0, 0, 0, 0, 1 + 3, 2 + 4}));
  idx.fill_(3);
  EXPECT_TRUE(throws_with([&] { embedding_backward_stub(DeviceType::CPU)(a); },
                          {"embedding", "index 3", "out of bounds", "dim 0", "size 3"}));
}

// Second order: the weight gradient is differentiable in the output's
// gradient (its backward is embedding again).
TEST(Embedding, SecondOrder) {
  Tensor w = testing::random_leaf({4, 3}, 11);
  Tensor idx = i64({2, 0, 2, 3, 2}, {5});
  EXPECT_TRUE(testing::gradcheck(
      [idx](const TensorList& in) {
        Tensor y = embedding(in[0], idx);
        return autograd::grad({(y * y * y).sum()}, {in[0]}, {}, true, true)[0];
      },
      {w}));
}

TEST(Embedding, Errors) {
  Tensor w = zeros({5, 3});
  EXPECT_TRUE(throws_with(
      [&] {
        embedding(w, i64({1, 5}));
      },
      {"embedding", "index 5", "out of bounds", "dim 0", "size 5"}));
  EXPECT_TRUE(throws_with([&] { embedding(w, i64({-1})); }, {"embedding", "index -1"}));
  EXPECT_TRUE(throws_with([&] { embedding(zeros({5}), i64({1})); }, {"embedding", "2-D", "[5] float32"}));
  EXPECT_TRUE(throws_with([&] { embedding(w, from_vector<double>({1})); }, {"embedding", "int64 or int32", "float64"}));
}

TEST(Embedding, SwappedArgumentsNameTheOrder) {
  // ember::embedding is torch.embedding (weight first); indices first is
  // torch.nn.functional.embedding's order, nn::functional::embedding.
  EXPECT_TRUE(throws_with(
      [&] {
        embedding(i64({1, 2}, {1, 2}), zeros({5, 3}));
      },
      {"embedding", "[1, 2] int64", "[5, 3] float32", "swap the arguments",
       "nn::functional::embedding(input, weight)"}));
}

// ---------------- one_hot ----------------

TEST(OneHot, Values) {
  Tensor idx = i64({2, 0, 3, 2}, {2, 2});
  Tensor y = one_hot(idx);
  EXPECT_EQ(y.dtype(), DType::Int64);
  ASSERT_EQ(y.shape(), (Shape{2, 2, 4}));  // max + 1 classes
  std::vector<int64_t> v = to_vector<int64_t>(y), iv = to_vector<int64_t>(idx);
  for (size_t p = 0; p < 4; ++p)
    for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(v[p * 4 + size_t(c)], iv[p] == c ? 1 : 0);
  Tensor z = one_hot(from_vector<int32_t>({1, 1}), 5);
  EXPECT_EQ(to_vector<int64_t>(z), (std::vector<int64_t>{0, 1, 0, 0, 0, 0, 1, 0, 0, 0}));
  EXPECT_EQ(to_vector<int64_t>(one_hot(full({}, 2, DType::Int64), 3)), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(one_hot(i64({}, {0}), 3).shape(), (Shape{0, 3}));
  // A non-contiguous index tensor.
  Tensor t = i64({0, 1, 2, 0}, {2, 2}).t();  // [[0, 2], [1, 0]]
  EXPECT_EQ(to_vector<int64_t>(one_hot(t, 3)), (std::vector<int64_t>{1, 0, 0, 0, 0, 1, 0, 1, 0, 1, 0, 0}));
}

TEST(OneHot, Errors) {
  EXPECT_TRUE(throws_with([&] { one_hot(i64({0, -2, 1})); }, {"one_hot", "non-negative", "-2"}));
  EXPECT_TRUE(throws_with([&] { one_hot(i64({0, 7, 1}), 5); }, {"one_hot", "class value 7", "num_classes 5"}));
  EXPECT_TRUE(throws_with([&] { one_hot(i64({}, {0})); }, {"one_hot", "empty", "[0]", "num_classes"}));
  EXPECT_TRUE(throws_with([&] { one_hot(i64({1}), -2); }, {"one_hot", "num_classes", "-2"}));
  EXPECT_TRUE(throws_with([&] { one_hot(from_vector<float>({1})); }, {"one_hot", "int64 or int32", "float32"}));
}

// ---------------- autograd details ----------------

// Second order: the gradient of index_select/gather is itself differentiable
// (index_add / scatter_add backward).
TEST(IndexAutograd, SecondOrderThroughTheBackwardOps) {
  Tensor x = testing::random_leaf({4, 3}, 9);
  Tensor idx = i64({1, 3, 1});
  EXPECT_TRUE(testing::gradcheck(
      [idx](const TensorList& in) {
        Tensor y = index_select(in[0], 0, idx);
        return autograd::grad({(y * y * y).sum()}, {in[0]}, {}, true, true)[0];
      },
      {x}));
  Tensor gidx = i64({2, 2, 0, 1, 1, 1}, {2, 3});
  EXPECT_TRUE(testing::gradcheck(
      [gidx](const TensorList& in) {
        Tensor y = gather(in[0], 0, gidx);
        return autograd::grad({(y * y * y).sum()}, {in[0]}, {}, true, true)[0];
      },
      {x}));
}

TEST(IndexAutograd, IndexChangedInPlaceBeforeBackwardIsAnError) {
  Tensor x = testing::random_leaf({3, 2}, 10);
  Tensor idx = i64({0, 2});
  Tensor y = index_select(x, 0, idx);
  idx.add_(1);
  EXPECT_TRUE(throws_with([&] { y.sum().backward(); }, {"IndexSelectBackward", "modified by an in-place"}));
}

}  // namespace
}  // namespace ember
