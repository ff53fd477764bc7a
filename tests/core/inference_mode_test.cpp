// InferenceMode: the guard's modes, which tensors are inference tensors,
// and the errors when one is later used by autograd or updated in place
// (as torch.inference_mode).
#include "ember/core/inference_mode.h"

#include <gtest/gtest.h>

#include <thread>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;

TEST(InferenceMode, TurnsGradModeOffAndRestoresBothModes) {
  EXPECT_FALSE(InferenceMode::is_enabled());
  EXPECT_TRUE(GradMode::is_enabled());
  {
    InferenceMode guard;
    EXPECT_TRUE(InferenceMode::is_enabled());
    EXPECT_FALSE(GradMode::is_enabled());
    {
      InferenceMode off(false);  // as PyTorch: grad mode back on
      EXPECT_FALSE(InferenceMode::is_enabled());
      EXPECT_TRUE(GradMode::is_enabled());
    }
    EXPECT_TRUE(InferenceMode::is_enabled());
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_FALSE(InferenceMode::is_enabled());
  EXPECT_TRUE(GradMode::is_enabled());
  {
    NoGradGuard no_grad;
    { InferenceMode guard; }
    EXPECT_FALSE(GradMode::is_enabled());  // the outer no_grad stays
  }
  try {
    InferenceMode guard;
    throw std::runtime_error("leave");
  } catch (const std::runtime_error&) {
  }
  EXPECT_FALSE(InferenceMode::is_enabled());
  EXPECT_TRUE(GradMode::is_enabled());
}

TEST(InferenceMode, IsPerThread) {
  InferenceMode guard;
  bool other_thread = true;
  std::thread([&] { other_thread = InferenceMode::is_enabled() || ones({1}).is_inference(); }).join();
  EXPECT_FALSE(other_thread);
}

TEST(InferenceMode, RecordsNoGraphAndMarksNewTensors) {
  Tensor w = randn({3, 3}).set_requires_grad();
  Tensor normal = randn({3, 3});
  Tensor x, y, view_of_normal;
  {
    InferenceMode guard;
    x = randn({3, 3});
    y = matmul(x, w);
    view_of_normal = normal.view({9});
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_TRUE(x.is_inference());
    EXPECT_TRUE(y.is_inference());
  }
  EXPECT_FALSE(w.is_inference());
  EXPECT_FALSE(normal.is_inference());
  EXPECT_FALSE(view_of_normal.is_inference());
  EXPECT_TRUE(x.view({9}).is_inference());
  EXPECT_TRUE(x.detach().is_inference());
  EXPECT_TRUE(x.t().is_inference());
  EXPECT_FALSE(x.clone().is_inference());
  // Values are those of a normal forward.
  NoGradGuard no_grad;
  EXPECT_TRUE(allclose(y, matmul(x.clone(), w)));
}

TEST(InferenceMode, InferenceTensorsCannotBeSavedForBackward) {
  Tensor x;
  {
    InferenceMode guard;
    x = randn({2, 3});
  }
  Tensor w = randn({3, 2}).set_requires_grad();
  // matmul's gradient for w needs x.
  EXPECT_TRUE(throws_with([&] { matmul(x, w); },
                          {"inference tensors cannot be saved for backward", "[2, 3]", "float32", "clone()"}));
  // Ops that need no inference tensor for backward work, as in PyTorch.
  Tensor v = randn({2, 3}).set_requires_grad();
  (x + v).sum().backward();
  EXPECT_TRUE(allclose(v.grad(), ones({2, 3})));
  // A clone is a normal tensor.
  matmul(x.clone(), w).sum().backward();
  EXPECT_TRUE(w.grad().defined());
  // Without grad mode nothing is saved.
  NoGradGuard no_grad;
  EXPECT_FALSE(matmul(x, w).requires_grad());
}

TEST(InferenceMode, InPlaceUpdatesOfInferenceTensorsOnlyInside) {
  Tensor x;
  {
    InferenceMode guard;
    x = zeros({4});
    x.add_(1);  // inside: allowed
  }
  EXPECT_TRUE(throws_with([&] { x.add_(1); }, {"add_", "in-place update of an inference tensor", "[4]", "clone()"}));
  EXPECT_TRUE(throws_with([&] { x.copy_(ones({4})); }, {"copy_", "inference tensor"}));
  EXPECT_TRUE(throws_with([&] { x.fill_(2); }, {"fill_", "inference tensor"}));
  EXPECT_TRUE(throws_with([&] { x.zero_(); }, {"inference tensor"}));
  EXPECT_TRUE(throws_with([&] { x.view({2, 2}).mul_(3); }, {"mul_", "inference tensor"}));
  EXPECT_TRUE(allclose(x, ones({4})));
  {
    InferenceMode guard;
    x.mul_(5);
    Tensor normal = zeros({2});
    normal.add_(1);  // normal tensors may be updated inside too
    EXPECT_TRUE(allclose(normal, ones({2})));
  }
  EXPECT_TRUE(allclose(x, full({4}, 5.0)));
  Tensor y = x.clone();
  y.add_(1);
  EXPECT_TRUE(allclose(y, full({4}, 6.0)));
}

TEST(InferenceMode, RequiresGradOnInferenceTensorsOnlyInside) {
  Tensor x;
  {
    InferenceMode guard;
    x = zeros({2});
    Tensor z = zeros({2}).set_requires_grad();
    EXPECT_TRUE(z.requires_grad());
  }
  EXPECT_TRUE(throws_with([&] { x.set_requires_grad(); },
                          {"set_requires_grad", "requires_grad=true on an inference tensor", "clone()"}));
  x.set_requires_grad(false);
  EXPECT_FALSE(x.requires_grad());
}

TEST(InferenceMode, ModuleForwardMatchesNoGrad) {
  auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 8), std::make_shared<nn::GELU>(),
                                              std::make_shared<nn::Linear>(8, 2));
  Tensor input = randn({5, 4});
  Tensor expected;
  {
    NoGradGuard no_grad;
    expected = net->forward(input);
  }
  InferenceMode guard;
  Tensor out = net->forward(input);
  EXPECT_FALSE(out.requires_grad());
  EXPECT_TRUE(out.is_inference());
  EXPECT_TRUE(equal(out, expected));
  EXPECT_FALSE(net->parameters()[0].is_inference());
}

}  // namespace
}  // namespace ember
