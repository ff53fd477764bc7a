// batch_norm with a float16/bfloat16 input and float32 parameters and
// running statistics (ember/core/ops/batch_norm.cpp): what autocast and a model
// with its BatchNorm kept in float32 feed it. The result has the input's
// dtype and equals the float32 computation on the same input, rounded; the
// running statistics are updated in float32; gradients reach the input in
// its dtype and the parameters in float32.
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;

class BatchNormMixed : public ::testing::TestWithParam<DType> {};

TEST_P(BatchNormMixed, MatchesFloat32OnTheSameInput) {
  const DType low = GetParam();
  manual_seed(1);
  Tensor x = randn({4, 3, 5, 5}).to(low).set_requires_grad();
  Tensor w = rand({3}).set_requires_grad(), b = randn({3}).set_requires_grad();
  Tensor rm = zeros({3}), rv = ones({3});
  Tensor x32 = x.detach().to(DType::Float32).set_requires_grad();
  Tensor w32 = w.detach().clone().set_requires_grad(), b32 = b.detach().clone().set_requires_grad();
  Tensor rm32 = zeros({3}), rv32 = ones({3});

  Tensor y = batch_norm(x, rm, rv, w, b, /*training=*/true, 0.1, 1e-5);
  Tensor y32 = batch_norm(x32, rm32, rv32, w32, b32, true, 0.1, 1e-5);
  EXPECT_EQ(y.dtype(), low);
  EXPECT_TRUE(equal(y, y32.to(low)));  // one float32 computation, rounded once
  EXPECT_EQ(rm.dtype(), DType::Float32);
  EXPECT_TRUE(equal(rm, rm32));
  EXPECT_TRUE(equal(rv, rv32));

  Tensor g = randn({4, 3, 5, 5});
  (y.to(DType::Float32) * g).sum().backward();
  (y32 * g.to(low).to(DType::Float32)).sum().backward();
  EXPECT_EQ(x.grad().dtype(), low);
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  EXPECT_TRUE(equal(x.grad(), x32.grad().to(low)));
  EXPECT_TRUE(equal(w.grad(), w32.grad()));
  EXPECT_TRUE(equal(b.grad(), b32.grad()));

  // Eval mode normalizes with the float32 running statistics.
  Tensor e = batch_norm(x.detach(), rm, rv, w.detach(), b.detach(), false);
  EXPECT_EQ(e.dtype(), low);
  EXPECT_TRUE(equal(e, batch_norm(x32.detach(), rm32, rv32, w32.detach(), b32.detach(), false).to(low)));
}

// No cast runs: the input reaches BatchNormBackward directly, and so do the
// parameters; under create_graph the composed backward gives the same
// first-order gradients.
TEST_P(BatchNormMixed, TheKernelsTakeTheHalfInputAsItIs) {
  const DType low = GetParam();
  manual_seed(2);
  Tensor x = randn({6, 2, 3}).to(low).set_requires_grad();
  Tensor w = rand({2}).set_requires_grad(), b = randn({2}).set_requires_grad();
  Tensor y = batch_norm(x, {}, {}, w, b, true, 0.1, 1e-5);
  ASSERT_EQ(y.grad_fn()->name(), "BatchNormBackward");
  for (const Edge& e : y.grad_fn()->next_edges()) EXPECT_EQ(e.node->name(), "AccumulateGrad");
  Tensor g = randn({6, 2, 3}).to(low);
  TensorList fused = autograd::grad({y}, {x, w, b}, {g}, /*retain_graph=*/true);
  TensorList composed = autograd::grad({y}, {x, w, b}, {g}, true, /*create_graph=*/true);
  EXPECT_EQ(composed[0].dtype(), low);
  EXPECT_EQ(composed[1].dtype(), DType::Float32);
  const double tol = low == DType::Float16 ? 1e-2 : 5e-2;
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_TRUE(allclose(fused[i].to(DType::Float32), composed[i].to(DType::Float32), tol, tol)) << i;
  }
}

TEST_P(BatchNormMixed, OtherMixturesStillError) {
  const DType low = GetParam();
  Tensor x = randn({4, 3}).to(low);
  // float32 input with half parameters, and half parameters with float32 statistics.
  EXPECT_TRUE(throws_with(
      [&] {
        batch_norm(randn({4, 3}), {}, {}, ones({3}).to(low), {}, true);
      },
      {"batch_norm", "weight"}));
  EXPECT_TRUE(throws_with([&] { batch_norm(x, zeros({3}), ones({3}), ones({3}).to(low), {}, true); }, {"batch_norm"}));
}

INSTANTIATE_TEST_SUITE_P(, BatchNormMixed, ::testing::Values(DType::Float16, DType::BFloat16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace ember
