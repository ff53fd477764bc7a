// amp::autocast (ember/parallel/amp/autocast.h, ember/core/autocast_state.h): the dtype
// each op picks inside a region, op by op, on the CPU (PyTorch's CPU
// autocast; the CUDA policy is the same code with another device type);
// nesting and disabling; the weight-cast cache; gradients against float32.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ember/core/ops/amp_kernels.h"
#include "ember/ember.h"
#include "support/error_message.h"
#include "support/stub_swap.h"

namespace ember {
namespace {

using amp::autocast;
using testing::throws_with;
constexpr DeviceType kCpuType = DeviceType::CPU;

Tensor randn32(const Shape& s) { return randn(s, DType::Float32); }

class AutocastOps : public ::testing::TestWithParam<DType> {};

TEST_P(AutocastOps, LowerPrecisionOpsRunInTheAutocastDtype) {
  const DType low = GetParam();
  manual_seed(1);
  Tensor a = randn32({4, 8}), b = randn32({8, 3}), w = randn32({5, 8}), bias = randn32({5});
  Tensor img = randn32({2, 3, 6, 6}), kernel = randn32({4, 3, 3, 3}), kb = randn32({4});
  autocast guard(kCpuType, low);
  EXPECT_EQ(matmul(a, b).dtype(), low);
  EXPECT_EQ(a.matmul(b).dtype(), low);
  EXPECT_EQ(linear(a, w, bias).dtype(), low);
  EXPECT_EQ(linear(a, w).dtype(), low);
  EXPECT_EQ(nn::functional::linear(a, w, bias).dtype(), low);
  EXPECT_EQ(conv2d(img, kernel, kb, {1, 1}, {1, 1}).dtype(), low);
  EXPECT_EQ(conv2d(img, kernel).dtype(), low);
  // A mix of float32 and half inputs is cast too.
  EXPECT_EQ(matmul(a.to(low), b).dtype(), low);
  // float64 and integers are never cast (as in PyTorch).
  EXPECT_EQ(matmul(a.to(DType::Float64), b.to(DType::Float64)).dtype(), DType::Float64);
  EXPECT_EQ(matmul(a.to(DType::Int64), b.to(DType::Int64)).dtype(), DType::Int64);
}

TEST_P(AutocastOps, Float32OpsRunInFloat32) {
  const DType low = GetParam();
  manual_seed(2);
  Tensor x = randn32({4, 6}).to(low), w = randn32({6}), b = randn32({6});
  autocast guard(kCpuType, low);
  EXPECT_EQ(softmax(x, 1).dtype(), DType::Float32);
  EXPECT_EQ(x.softmax(-1).dtype(), DType::Float32);
  EXPECT_EQ(log_softmax(x, 1).dtype(), DType::Float32);
  EXPECT_EQ(layer_norm(x, {6}, w, b).dtype(), DType::Float32);
  EXPECT_EQ(layer_norm(x, {6}, w.to(low), b.to(low)).dtype(), DType::Float32);
  EXPECT_EQ(sum(x).dtype(), DType::Float32);
  EXPECT_EQ(x.sum({1}).dtype(), DType::Float32);
  EXPECT_EQ(mean(x, {0}).dtype(), DType::Float32);
  EXPECT_EQ(x.mean().dtype(), DType::Float32);
  EXPECT_EQ(var(x, {1}).dtype(), DType::Float32);
  EXPECT_EQ(ember::std(x, {1}).dtype(), DType::Float32);
  EXPECT_EQ(logsumexp(x, {1}).dtype(), DType::Float32);
  Tensor target = from_vector<int64_t>({0, 5, 2, 1});
  EXPECT_EQ(nn::functional::cross_entropy(x, target).dtype(), DType::Float32);
  EXPECT_EQ(nn::functional::nll_loss(log_softmax(x, 1).to(low), target).dtype(), DType::Float32);
  EXPECT_EQ(nn::functional::mse_loss(x, randn32({4, 6}).to(low)).dtype(), DType::Float32);
  EXPECT_EQ(nn::functional::l1_loss(x, randn32({4, 6})).dtype(), DType::Float32);
  EXPECT_EQ(nn::functional::binary_cross_entropy_with_logits(x, rand({4, 6}).to(low)).dtype(), DType::Float32);
  // An integer sum stays int64.
  EXPECT_EQ(sum(from_vector<int32_t>({1, 2})).dtype(), DType::Int64);
  // Ops on neither list keep their inputs' dtype.
  EXPECT_EQ(relu(x).dtype(), low);
  EXPECT_EQ((x * 2.0).dtype(), low);
}

TEST_P(AutocastOps, BatchNormKeepsFloat32Statistics) {
  const DType low = GetParam();
  manual_seed(3);
  auto bn = std::make_shared<nn::BatchNorm2d>(4);
  auto reference = nn::clone(bn);
  Tensor img = randn32({3, 2, 5, 5}), kernel = randn32({4, 2, 3, 3});
  Tensor y;
  {
    autocast guard(kCpuType, low);
    Tensor h = conv2d(img, kernel);
    ASSERT_EQ(h.dtype(), low);
    y = bn->forward(h);
    EXPECT_EQ(y.dtype(), low);
    // The float32 reference on the same (rounded) activations.
    Tensor expected = reference->forward(h.to(DType::Float32));
    EXPECT_TRUE(allclose(y.to(DType::Float32), expected, 1e-2, 1e-2));
  }
  EXPECT_EQ(bn->running_mean.dtype(), DType::Float32);
  EXPECT_EQ(bn->running_var.dtype(), DType::Float32);
  // Statistics computed in float32 from the same half activations: equal to the reference's.
  EXPECT_TRUE(allclose(bn->running_mean, reference->running_mean, 1e-6, 1e-7));
  EXPECT_TRUE(allclose(bn->running_var, reference->running_var, 1e-6, 1e-7));
}

TEST(Autocast, NothingChangesOutsideARegion) {
  Tensor a = randn32({4, 8}), b = randn32({8, 3});
  { autocast guard(kCpuType); }
  EXPECT_EQ(matmul(a, b).dtype(), DType::Float32);
  EXPECT_EQ(softmax(a.to(DType::BFloat16), 1).dtype(), DType::BFloat16);
  EXPECT_FALSE(amp::is_autocast_enabled(kCpuType));
  EXPECT_EQ(autocast_state::cached_casts(), 0u);
}

TEST(Autocast, DefaultsArePyTorchs) {
  EXPECT_EQ(amp::get_autocast_dtype(DeviceType::CPU), DType::BFloat16);
  EXPECT_EQ(amp::get_autocast_dtype(DeviceType::CUDA), DType::Float16);
  autocast guard(kCpuType);
  EXPECT_TRUE(amp::is_autocast_enabled(kCpuType));
  EXPECT_FALSE(amp::is_autocast_enabled(DeviceType::CUDA));
  EXPECT_EQ(matmul(randn32({2, 2}), randn32({2, 2})).dtype(), DType::BFloat16);
}

TEST(Autocast, OtherDeviceTypesAreUntouched) {
  autocast guard(DType::Float16);  // CUDA autocast: CPU tensors keep their dtypes
  EXPECT_TRUE(amp::is_autocast_enabled(DeviceType::CUDA));
  EXPECT_EQ(matmul(randn32({2, 3}), randn32({3, 2})).dtype(), DType::Float32);
  EXPECT_EQ(softmax(randn32({2, 3}).to(DType::Float16), 1).dtype(), DType::Float16);
}

TEST(Autocast, NestedRegionsDisableAndChangeDtype) {
  Tensor a = randn32({2, 3}), b = randn32({3, 2});
  autocast outer(kCpuType, DType::BFloat16);
  {
    autocast off(kCpuType, std::nullopt, /*enabled=*/false);
    EXPECT_EQ(matmul(a, b).dtype(), DType::Float32);
    {
      autocast on(kCpuType);  // the current dtype: bfloat16
      EXPECT_EQ(matmul(a, b).dtype(), DType::BFloat16);
    }
    EXPECT_EQ(matmul(a, b).dtype(), DType::Float32);
  }
  {
    autocast fp16(DType::Float16, kCpuType);
    EXPECT_EQ(matmul(a, b).dtype(), DType::Float16);
  }
  EXPECT_EQ(matmul(a, b).dtype(), DType::BFloat16);
}

TEST(Autocast, OnlyHalfDtypes) {
  EXPECT_TRUE(
      throws_with([] { autocast guard(DType::Float32, kCpuType); }, {"autocast", "float32", "float16 or bfloat16"}));
  EXPECT_TRUE(throws_with([] { autocast guard(kCpuType, DType::Float64); }, {"float64"}));
  EXPECT_FALSE(amp::is_autocast_enabled(kCpuType));
}

TEST(Autocast, AWeightUsedTwiceIsCastOnce) {
  Tensor x = randn32({2, 4});
  Tensor w = randn32({4, 3}).set_requires_grad();
  Tensor v = randn32({3, 4}).set_requires_grad();
  Tensor y1, y2;
  {
    autocast guard(kCpuType);
    y1 = matmul(x, w);
    y2 = matmul(x * 2.0, w);
    EXPECT_EQ(autocast_state::cached_casts(), 1u);
    // Both matmuls read the weight through one cast node.
    std::shared_ptr<Node> c1 = y1.grad_fn()->next_edges()[1].node, c2 = y2.grad_fn()->next_edges()[1].node;
    ASSERT_NE(c1, nullptr);
    EXPECT_EQ(c1, c2);
    EXPECT_EQ(c1->name(), "ToCopyBackward");
    // linear takes its own cast, made without history and kept, once too.
    autocast_state::clear_cache();
    linear(x, v);
    linear(x, v);
    EXPECT_EQ(autocast_state::kept_casts(), 1u);
    y1 = matmul(x, w);
    y2 = matmul(x * 2.0, w);
    EXPECT_EQ(autocast_state::cached_casts(), 1u);
  }
  EXPECT_EQ(autocast_state::cached_casts(), 0u);  // emptied with the outermost region
  // The gradient reaches the float32 leaf, summed over both uses.
  (y1.sum() + y2.sum()).backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::Float32);
  Tensor expected = (x + x * 2.0).sum({0}).unsqueeze(1).expand({4, 3});
  EXPECT_TRUE(allclose(w.grad(), expected, 2e-2, 2e-2));
}

TEST(Autocast, TheCacheIsNotUsedWithoutGradOrAfterAnInPlaceChange) {
  Tensor x = randn32({2, 4});
  Tensor w = randn32({4, 3}).set_requires_grad();
  Tensor v = randn32({3, 4}).set_requires_grad();
  autocast guard(kCpuType);
  {
    NoGradGuard no_grad;
    matmul(x, w);
    linear(x, v);
  }
  EXPECT_EQ(autocast_state::cached_casts(), 0u);
  Tensor y1 = matmul(x, w);
  Tensor l1 = linear(x, v);
  {
    NoGradGuard no_grad;
    w.mul_(2.0);
    v.mul_(2.0);
  }
  Tensor y2 = matmul(x, w);  // recast: the cached copies are stale
  Tensor l2 = linear(x, v);
  EXPECT_NE(y1.grad_fn()->next_edges()[1].node, y2.grad_fn()->next_edges()[1].node);
  EXPECT_TRUE(allclose(y2.to(DType::Float32), y1.to(DType::Float32) * 2.0, 2e-2, 2e-2));
  EXPECT_TRUE(allclose(l2.to(DType::Float32), l1.to(DType::Float32) * 2.0, 2e-2, 2e-2));
}

// Swaps the CPU batched cast for one that counts its calls and tensors.
class CastManySpy {
 public:
  CastManySpy() : swap_(kCpuType, &spy) {
    calls() = 0;
    tensors() = 0;
  }
  static int& calls() {
    static int n = 0;
    return n;
  }
  static int64_t& tensors() {
    static int64_t n = 0;
    return n;
  }

 private:
  using Swap = testing::StubSwap<amp::CastManyFn, &amp::cast_many_stub>;
  static void spy(const optim::MultiTensorArgs& a) {
    ++calls();
    tensors() += a.count;
    Swap::real()(a);
  }
  Swap swap_;
};

// linear's casts of its weight and bias outlive the region: an unchanged
// weight is not cast again in the next one; once weights change (an
// optimizer step), the first use recasts every stale one in a single
// batched call, into new tensors, and the values are those of the new
// weights. A dead leaf's cast is dropped; clear_autocast_cache() frees them.
TEST(Autocast, LinearsCastsAreKeptAcrossRegionsAndRecastTogether) {
  autocast_state::clear_cache();
  manual_seed(8);
  Tensor x = randn32({4, 6});
  CastManySpy spy;
  {
    auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 5), std::make_shared<nn::ReLU>(),
                                                  std::make_shared<nn::Linear>(5, 3));
    auto forward = [&] {
      autocast guard(kCpuType);
      return model->forward(x);
    };
    Tensor y1 = forward();
    EXPECT_EQ(autocast_state::kept_casts(), 4u);  // two weights, two biases
    Tensor y2 = forward();
    EXPECT_TRUE(equal(y1, y2));
    EXPECT_EQ(CastManySpy::calls(), 0);
    EXPECT_EQ(autocast_state::kept_casts(), 4u);

    // Changed in place outside an optimizer step: all four recast in one batch.
    {
      NoGradGuard no_grad;
      for (Tensor& p : model->parameters()) p.mul_(0.5);
    }
    Tensor y3 = forward();
    EXPECT_EQ(CastManySpy::calls(), 1);
    EXPECT_EQ(CastManySpy::tensors(), 4);
    autocast_state::clear_cache();
    Tensor expected = forward();  // every cast made anew from the current weights
    EXPECT_TRUE(equal(y3, expected));
    EXPECT_EQ(CastManySpy::calls(), 1);
  }
  // The model's leaves are dead: the next new kept cast forgets their casts.
  EXPECT_EQ(autocast_state::kept_casts(), 4u);
  auto other = std::make_shared<nn::Linear>(6, 2);
  {
    autocast guard(kCpuType);
    other->forward(x);
  }
  EXPECT_EQ(autocast_state::kept_casts(), 2u);
  {
    NoGradGuard no_grad;
    other->weight.mul_(2.0);
  }
  {
    autocast guard(kCpuType);
    other->forward(x);
  }
  EXPECT_EQ(CastManySpy::calls(), 2);
  EXPECT_EQ(CastManySpy::tensors(), 5);  // the weight alone: the bias did not change
  EXPECT_EQ(autocast_state::kept_casts(), 2u);
  amp::clear_autocast_cache();
  EXPECT_EQ(autocast_state::kept_casts(), 0u);
}

// The fused optimizer steps write the kept casts of the weights they update
// in the same pass (FusedTensor::low_copy): the next forward recasts
// nothing, and its output equals one from casts made anew; every element is
// written (the casts are poisoned before each step). A graph that saved the
// old casts fails its in-place check, as it would on the weights.
TEST(Autocast, AnOptimizerStepRewritesTheKeptCasts) {
  for (const bool adam : {false, true}) {
    for (const DType low : {DType::BFloat16, DType::Float16}) {
      SCOPED_TRACE(std::string(adam ? "Adam " : "SGD ") + dtype_name(low));
      autocast_state::clear_cache();
      manual_seed(13);
      Tensor x = randn32({4, 6});
      auto model = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 5), std::make_shared<nn::ReLU>(),
                                                    std::make_shared<nn::Linear>(5, 3));
      std::unique_ptr<optim::Optimizer> opt;
      if (adam) opt = std::make_unique<optim::Adam>(model->parameters(), optim::AdamOptions{.lr = 0.01});
      else opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
      auto forward = [&] {
        autocast guard(kCpuType, low);
        return model->forward(x);
      };
      CastManySpy spy;
      for (int step = 0; step < 3; ++step) {
        opt->zero_grad();
        forward().to(DType::Float32).sum().backward();
        {
          NoGradGuard no_grad;
          for (const Tensor& p : model->parameters()) {
            Tensor cast = autocast_state::fresh_kept_cast(p);
            ASSERT_TRUE(cast.defined());
            cast.fill_(std::nan(""));
          }
        }
        opt->step();
        for (const Tensor& p : model->parameters()) {
          const Tensor cast = autocast_state::fresh_kept_cast(p);
          ASSERT_TRUE(cast.defined());
          EXPECT_TRUE(equal(cast, p.detach().to(low)));
        }
      }
      const Tensor y = forward();
      EXPECT_EQ(CastManySpy::calls(), 0);
      autocast_state::clear_cache();
      EXPECT_TRUE(equal(y, forward()));

      const Tensor saved = forward().to(DType::Float32).sum();
      opt->zero_grad();
      forward().to(DType::Float32).sum().backward();
      opt->step();
      EXPECT_TRUE(throws_with([&] { saved.backward(); }, {"modified by an in-place operation"}));
    }
  }
  autocast_state::clear_cache();
}

// Module::to points a weight's TensorImpl at new data whose version may be
// the old one's: the kept cast follows the data, not the version alone.
TEST(Autocast, AKeptCastFollowsALeafPointedAtOtherData) {
  autocast_state::clear_cache();
  manual_seed(10);
  Tensor x = randn32({3, 6});
  auto layer = std::make_shared<nn::Linear>(6, 4);
  auto forward = [&] {
    autocast guard(kCpuType);
    return layer->forward(x);
  };
  const Tensor before = forward();
  layer->to(DType::Float64);
  {
    NoGradGuard no_grad;
    layer->weight.mul_(0.0);
  }
  layer->to(DType::Float32);
  const Tensor after = forward();
  EXPECT_FALSE(equal(after, before));
  autocast_state::clear_cache();
  EXPECT_TRUE(equal(after, forward()));
  EXPECT_TRUE(equal(after, layer->bias.detach().to(after.dtype()).expand({3, 4})));
}

// A leaf that stopped being float32 (Module::to(float16)) and then changed
// in place is not recast from its old size by another weight's refresh:
// its kept cast is forgotten (AddressSanitizer sees an overread otherwise).
TEST(Autocast, ARecastForgetsLeavesThatAreNoLongerFloat32) {
  autocast_state::clear_cache();
  manual_seed(11);
  Tensor x = randn32({3, 6});
  auto a = std::make_shared<nn::Linear>(6, 4), b = std::make_shared<nn::Linear>(6, 5);
  CastManySpy spy;
  {
    autocast guard(kCpuType);
    a->forward(x);
    b->forward(x);
  }
  EXPECT_EQ(autocast_state::kept_casts(), 4u);
  a->to(DType::Float16);
  {
    NoGradGuard no_grad;
    a->weight.mul_(2.0);
    b->weight.mul_(2.0);
  }
  Tensor ya, yb;
  {
    autocast guard(kCpuType);
    yb = b->forward(x);
    ya = a->forward(x);
  }
  EXPECT_EQ(CastManySpy::calls(), 1);
  EXPECT_EQ(CastManySpy::tensors(), 1);  // b's weight; a's casts are forgotten
  EXPECT_EQ(autocast_state::kept_casts(), 2u);
  autocast_state::clear_cache();
  {
    autocast guard(kCpuType);
    EXPECT_TRUE(equal(yb, b->forward(x)));
    EXPECT_TRUE(equal(ya, a->forward(x)));
  }
}

// A float16 weight under bfloat16 autocast: the bias-gradient GEMM cannot
// give a float16 C from bfloat16 operands, so linear composes the gradient
// (bfloat16 product, cast to the weight's dtype) instead of failing.
TEST(Autocast, LinearsWeightOfTheOtherHalfDtypeGetsItsGradient) {
  manual_seed(12);
  Tensor x = randn32({6, 8});
  Tensor w = randn32({5, 8}).to(DType::Float16).set_requires_grad();
  Tensor b = randn32({5}).to(DType::Float16).set_requires_grad();
  Tensor y;
  {
    autocast guard(kCpuType, DType::BFloat16);
    y = linear(x, w, b);
  }
  ASSERT_EQ(y.dtype(), DType::BFloat16);
  const Tensor g = randn32({6, 5}).to(DType::BFloat16);
  y.backward(g);
  ASSERT_EQ(w.grad().dtype(), DType::Float16);
  ASSERT_EQ(b.grad().dtype(), DType::Float16);
  const Tensor g64 = g.to(DType::Float64), x64 = x.to(DType::BFloat16).to(DType::Float64);
  EXPECT_TRUE(allclose(w.grad().to(DType::Float64), matmul(g64.t(), x64), 2e-2, 2e-2));
  EXPECT_TRUE(allclose(b.grad().to(DType::Float64), g64.sum({0}), 2e-2, 2e-2));
}

// matmul and conv2d take their weight casts with history, each region its
// own cast node, over the kept data: an unchanged weight costs no cast in a
// later region, a changed one is recast in the batch, and the gradients
// are the same float32 ones either way.
TEST(Autocast, DifferentiableCastsShareTheKeptData) {
  autocast_state::clear_cache();
  manual_seed(9);
  Tensor img = randn32({2, 3, 5, 5});
  Tensor kernel = randn32({4, 3, 3, 3}).set_requires_grad();
  CastManySpy spy;
  auto run = [&] {
    kernel.set_grad(Tensor());
    Tensor y;
    {
      autocast guard(kCpuType);
      y = conv2d(img, kernel);
    }
    EXPECT_EQ(y.grad_fn()->next_edges()[1].node->name(), "ToCopyBackward");
    y.to(DType::Float32).sum().backward();
    return std::make_pair(y, kernel.grad());
  };
  const auto [y1, g1] = run();
  const auto [y2, g2] = run();
  EXPECT_EQ(CastManySpy::calls(), 0);
  EXPECT_EQ(autocast_state::kept_casts(), 1u);
  EXPECT_NE(y1.grad_fn()->next_edges()[1].node, y2.grad_fn()->next_edges()[1].node);
  EXPECT_TRUE(equal(y1, y2));
  EXPECT_EQ(g2.dtype(), DType::Float32);
  EXPECT_TRUE(equal(g1, g2));
  {
    NoGradGuard no_grad;
    kernel.mul_(-1.0);
  }
  const auto [y3, g3] = run();
  EXPECT_EQ(CastManySpy::calls(), 1);
  EXPECT_TRUE(equal(y3, -y1));
}

TEST(Autocast, NothingIsKeptUnderNoGradOrWithTheCacheDisabled) {
  autocast_state::clear_cache();
  Tensor x = randn32({2, 4});
  Tensor w = randn32({3, 4}).set_requires_grad();
  {
    autocast guard(kCpuType);
    NoGradGuard no_grad;
    linear(x, w);
  }
  {
    autocast guard(kCpuType, std::nullopt, true, /*cache_enabled=*/false);
    linear(x, w);
  }
  EXPECT_EQ(autocast_state::kept_casts(), 0u);
}

// linear multiplies in the autocast dtype but records itself against the
// float32 weight and bias: no cast node between them and LinearBackward,
// and their gradients come out in float32, close to the float64 ones of the
// same rounded operands (the product accumulates in float32 and is rounded
// once into float32, not into half precision first).
TEST_P(AutocastOps, LinearSendsFloat32GradientsStraightToTheWeightAndBias) {
  const DType low = GetParam();
  manual_seed(5);
  Tensor x = randn32({6, 8}).set_requires_grad();
  Tensor w = randn32({5, 8}).set_requires_grad(), b = randn32({5}).set_requires_grad();
  Tensor g = randn32({6, 5}).to(low);
  Tensor y;
  {
    autocast guard(kCpuType, low);
    y = linear(x, w, b);
  }
  ASSERT_EQ(y.dtype(), low);
  const std::vector<Edge>& edges = y.grad_fn()->next_edges();
  ASSERT_EQ(edges.size(), 3u);
  EXPECT_EQ(edges[0].node->name(), "ToCopyBackward");  // x's cast, an ordinary one
  EXPECT_EQ(edges[1].node->name(), "AccumulateGrad");
  EXPECT_EQ(edges[2].node->name(), "AccumulateGrad");
  y.backward(g);
  ASSERT_EQ(w.grad().dtype(), DType::Float32);
  ASSERT_EQ(b.grad().dtype(), DType::Float32);
  ASSERT_EQ(x.grad().dtype(), DType::Float32);
  const Tensor g64 = g.to(DType::Float64), x64 = x.detach().to(low).to(DType::Float64);
  EXPECT_TRUE(allclose(w.grad(), matmul(g64.t(), x64).to(DType::Float32), 1e-5, 1e-6));
  EXPECT_TRUE(allclose(b.grad(), g64.sum({0}).to(DType::Float32), 1e-5, 1e-6));
  const Tensor w64 = w.detach().to(low).to(DType::Float64);
  const double tol = low == DType::Float16 ? 2e-3 : 1e-2;  // dx is rounded into the half dtype, then cast
  EXPECT_TRUE(allclose(x.grad(), matmul(g64, w64).to(DType::Float32), tol, tol));
}

// Under create_graph the gradient of dx with respect to the weight still
// flows (through a cast redone from the weight).
TEST(Autocast, LinearsSecondOrderGradientReachesTheWeight) {
  manual_seed(6);
  Tensor x = randn32({3, 4}).set_requires_grad();
  Tensor w = randn32({2, 4}).set_requires_grad();
  Tensor dx;
  {
    autocast guard(kCpuType);
    Tensor y = linear(x, w);
    dx = autograd::grad({y.sum()}, {x}, {}, true, true)[0];
  }
  TensorList dw = autograd::grad({dx.sum()}, {w});
  ASSERT_TRUE(dw[0].defined());
  EXPECT_EQ(dw[0].dtype(), DType::Float32);
  // d/dw sum_ij (sum_k w_kj) = 1 for every element, for each of x's 3 rows.
  EXPECT_TRUE(allclose(dw[0], full({2, 4}, 3.0), 1e-6, 1e-6));
}

// The fused cross-entropy reads half logits as they are under autocast: a
// float32 loss with no cast node before it, the same value as on the
// logits cast to float32, and a gradient in the logits' dtype.
TEST_P(AutocastOps, CrossEntropyReadsHalfLogitsWithoutACast) {
  const DType low = GetParam();
  manual_seed(7);
  Tensor logits = randn32({6, 7}).to(low).set_requires_grad();
  Tensor target = randint(0, 7, {6});
  nn::CrossEntropyOptions smoothed;
  smoothed.label_smoothing = 0.1;
  Tensor loss;
  {
    autocast guard(kCpuType, low);
    loss = nn::functional::cross_entropy(logits, target, smoothed);
  }
  ASSERT_EQ(loss.dtype(), DType::Float32);
  EXPECT_EQ(loss.grad_fn()->name(), "CrossEntropyBackward");
  EXPECT_EQ(loss.grad_fn()->next_edges()[0].node->name(), "AccumulateGrad");
  loss.backward();
  ASSERT_EQ(logits.grad().dtype(), low);
  Tensor ref_logits = logits.detach().to(DType::Float32).set_requires_grad();
  Tensor ref = nn::functional::cross_entropy(ref_logits, target, smoothed);
  ref.backward();
  EXPECT_TRUE(equal(loss, ref));
  EXPECT_TRUE(equal(logits.grad(), ref_logits.grad().to(low)));
}

TEST(Autocast, BackwardRunsWithAutocastOff) {
  Tensor x = randn32({2, 4}).set_requires_grad();
  bool seen = true;
  autocast guard(kCpuType);
  Tensor y = linear(x, randn32({3, 4}));
  y.register_hook([&](const Tensor&) {
    seen = autocast_state::any_enabled();
    return Tensor();
  });
  y.sum().backward();  // called inside the region: still off while it runs
  EXPECT_FALSE(seen);
  EXPECT_TRUE(amp::is_autocast_enabled(kCpuType));
  EXPECT_EQ(x.grad().dtype(), DType::Float32);
}

TEST(Autocast, TheStateIsPerThread) {
  autocast guard(kCpuType);
  DType in_thread = DType::Bool;
  std::thread t([&] { in_thread = matmul(randn32({2, 2}), randn32({2, 2})).dtype(); });
  t.join();
  EXPECT_EQ(in_thread, DType::Float32);
  EXPECT_EQ(matmul(randn32({2, 2}), randn32({2, 2})).dtype(), DType::BFloat16);
}

// An MLP with layer norm and a loss: autocast gradients match float32 ones
// within half precision.
TEST_P(AutocastOps, GradientsMatchFloat32WithinHalfPrecision) {
  const DType low = GetParam();
  manual_seed(4);
  auto model =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(16, 32), std::make_shared<nn::ReLU>(),
                                       std::make_shared<nn::LayerNorm>(Shape{32}), std::make_shared<nn::Linear>(32, 5));
  auto reference = nn::clone(model);
  Tensor x = randn32({8, 16});
  Tensor target = randint(0, 5, {8});
  Tensor loss;
  {
    autocast guard(kCpuType, low);
    loss = nn::functional::cross_entropy(model->forward(x), target);
  }
  EXPECT_EQ(loss.dtype(), DType::Float32);
  loss.backward();
  Tensor ref_loss = nn::functional::cross_entropy(reference->forward(x), target);
  ref_loss.backward();
  // float16 keeps 11 significant bits, bfloat16 8 (a relative rounding of
  // 2^-11 and 2^-8); a few roundings add up over the layers. Measured: at most
  // 7e-4 (float16) and 6e-3 (bfloat16) of the largest gradient.
  const double tol = low == DType::Float16 ? 3e-3 : 2e-2;
  EXPECT_NEAR(loss.item<double>(), ref_loss.item<double>(), tol * ref_loss.item<double>());
  TensorList p = model->parameters(), r = reference->parameters();
  ASSERT_EQ(p.size(), r.size());
  for (size_t i = 0; i < p.size(); ++i) {
    ASSERT_EQ(p[i].grad().dtype(), DType::Float32);
    const double scale = amax(abs(r[i].grad())).item<double>();
    const double err = amax(abs(p[i].grad() - r[i].grad())).item<double>();
    EXPECT_LE(err, tol * scale) << "parameter " << i << " (max |grad| " << scale << ")";
  }
}

INSTANTIATE_TEST_SUITE_P(, AutocastOps, ::testing::Values(DType::BFloat16, DType::Float16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

}  // namespace
}  // namespace ember
