// Gradient hooks (ember/core/autograd/node.cpp, accumulate_grad.cpp, engine.cpp):
// tensor hooks on leaves and non-leaves, their order and removal, and
// post-accumulate-grad hooks (once per leaf per backward, after the final
// gradient is in grad(), last layer first).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;
using V = std::vector<double>;

TEST(AutogradHooks, LeafHookSeesTheSummedGradientOnceAndCanReplaceIt) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  int calls = 0;
  V seen;
  x.register_hook([&](const Tensor& g) {
    ++calls;
    seen = to_vector<double>(g);
    return g * 2.0;
  });
  (x * 3.0 + x * 4.0).sum().backward();  // two paths into x: 3 + 4
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(seen, (V{7, 7}));
  EXPECT_EQ(to_vector<double>(x.grad()), (V{14, 14}));
}

TEST(AutogradHooks, ObserverHookKeepsTheGradient) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  int calls = 0;
  x.register_hook([&](const Tensor&) {
    ++calls;
    return Tensor();
  });
  (x * x).sum().backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(to_vector<double>(x.grad()), (V{2, 4}));
}

TEST(AutogradHooks, NonLeafHookReplacesTheGradientFlowingOn) {
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Tensor y = x * 2.0;
  int calls = 0;
  y.register_hook([&](const Tensor& g) {
    ++calls;
    return g * 10.0;
  });
  (y * y + y).sum().backward();  // dL/dy = 2y + 1, used twice in the graph
  EXPECT_EQ(calls, 1);
  // dL/dx = 2 * 10 * (2y + 1) with y = 2x
  EXPECT_EQ(to_vector<double>(x.grad()), (V{100, 180}));
}

TEST(AutogradHooks, HooksRunInRegistrationOrder) {
  Tensor x = from_vector<double>({1}).set_requires_grad();
  Tensor y = x * 1.0;
  std::string order;
  y.register_hook([&](const Tensor& g) {
    order += "a";
    return g + 1.0;
  });
  y.register_hook([&](const Tensor& g) {
    order += "b";
    return g * 2.0;
  });
  x.register_hook([&](const Tensor& g) {
    order += "c";
    return g * 3.0;
  });
  x.register_hook([&](const Tensor& g) {
    order += "d";
    return g - 1.0;
  });
  y.sum().backward();
  EXPECT_EQ(order, "abcd");
  EXPECT_EQ(to_vector<double>(x.grad()), (V{((1 + 1) * 2) * 3 - 1}));
}

TEST(AutogradHooks, RemoveHook) {
  Tensor x = from_vector<double>({1}).set_requires_grad();
  Tensor y = x * 1.0;
  int leaf_calls = 0, node_calls = 0;
  size_t hx = x.register_hook([&](const Tensor& g) {
    ++leaf_calls;
    return g * 100.0;
  });
  size_t hy = y.register_hook([&](const Tensor& g) {
    ++node_calls;
    return g * 100.0;
  });
  size_t kept = x.register_hook([](const Tensor& g) { return g * 2.0; });
  EXPECT_NE(hx, hy);
  EXPECT_NE(hx, kept);
  x.remove_hook(hx);
  y.remove_hook(hy);
  y.sum().backward();
  EXPECT_EQ(leaf_calls, 0);
  EXPECT_EQ(node_calls, 0);
  EXPECT_EQ(to_vector<double>(x.grad()), (V{2}));
}

TEST(AutogradHooks, RetainedGradientIsTheOneAfterTheTensorsHooks) {
  // As in PyTorch: retain_grad's value reflects every hook of the tensor,
  // whichever was registered first.
  Tensor x = from_vector<double>({1, 2}).set_requires_grad();
  Tensor y = x * 1.0;
  y.retain_grad();
  y.register_hook([](const Tensor& g) { return g * 10.0; });
  y.sum().backward();
  EXPECT_EQ(to_vector<double>(y.grad()), (V{10, 10}));
  EXPECT_EQ(to_vector<double>(x.grad()), (V{10, 10}));
}

TEST(AutogradHooks, HooksNeedATensorThatRequiresGrad) {
  Tensor plain = ones({2});
  EXPECT_TRUE(throws_with([&] { plain.register_hook([](const Tensor& g) { return g; }); },
                          {"register_hook", "doesn't require gradient"}));
  Tensor x = ones({2}).set_requires_grad();
  Tensor y = x * 2.0;
  EXPECT_TRUE(throws_with([&] { y.register_post_accumulate_grad_hook([](const Tensor&) {}); },
                          {"register_post_accumulate_grad_hook", "leaf"}));
  EXPECT_TRUE(throws_with([&] { plain.register_post_accumulate_grad_hook([](const Tensor&) {}); },
                          {"register_post_accumulate_grad_hook", "require grad"}));
}

TEST(AutogradHooks, PostAccumulateFiresOncePerLeafAfterTheFinalGradient) {
  Tensor w = from_vector<double>({1, 2}).set_requires_grad();
  Tensor other = from_vector<double>({3, 4}).set_requires_grad();
  int calls = 0;
  std::vector<V> seen;
  w.register_post_accumulate_grad_hook([&](const Tensor& p) {
    ++calls;
    EXPECT_TRUE(p.is_same(w));
    seen.push_back(to_vector<double>(p.grad()));
  });
  // w enters the graph at three depths; its hook must see the sum of all three.
  Tensor h = w * other;         // d/dw: other
  h = h.exp().log() + w * 2.0;  // d/dw: 2
  h = (h * w).sum();            // h*w: d/dw = h + w * dh/dw
  h.backward();
  EXPECT_EQ(calls, 1);
  // L = (w*o + 2w) * w = w^2 (o + 2) -> dL/dw = 2 w (o + 2)
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_NEAR(seen[0][0], 2 * 1 * 5, 1e-12);
  EXPECT_NEAR(seen[0][1], 2 * 2 * 6, 1e-12);
  // A second backward: one more call, seeing the accumulated gradient.
  (w * 3.0).sum().backward();
  EXPECT_EQ(calls, 2);
  EXPECT_NEAR(seen[1][0], 10 + 3, 1e-12);
  EXPECT_NEAR(seen[1][1], 24 + 3, 1e-12);
  // A backward that does not reach w does not call it.
  (other * 2.0).sum().backward();
  EXPECT_EQ(calls, 2);
}

TEST(AutogradHooks, PostAccumulateRunsAfterTheTensorHooks) {
  Tensor w = from_vector<double>({1}).set_requires_grad();
  std::string order;
  w.register_hook([&](const Tensor& g) {
    order += "hook ";
    return g * 5.0;
  });
  double seen = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor& p) {
    order += "post";
    seen = p.grad().item<double>();
  });
  (w * 2.0).sum().backward();
  EXPECT_EQ(order, "hook post");
  EXPECT_EQ(seen, 10.0);
}

TEST(AutogradHooks, PostAccumulateOrderIsLastLayerFirst) {
  // A 3-layer chain h = tanh(h * w_l + b_l): layer 2's parameters are
  // complete first, then layer 1's, then layer 0's (DDP relies on it to
  // overlap the all-reduce of late layers with backward of early ones).
  std::vector<Tensor> ws, bs;
  std::vector<std::string> order;
  for (int l = 0; l < 3; ++l) {
    ws.push_back(from_vector<double>({0.5, -0.25, 0.75}).set_requires_grad());
    bs.push_back(from_vector<double>({0.1, 0.2, 0.3}).set_requires_grad());
    ws.back().register_post_accumulate_grad_hook(
        [&order, l](const Tensor&) { order.push_back("w" + std::to_string(l)); });
    bs.back().register_post_accumulate_grad_hook(
        [&order, l](const Tensor&) { order.push_back("b" + std::to_string(l)); });
  }
  Tensor h = from_vector<double>({1, 2, 3});
  for (int l = 0; l < 3; ++l) h = (h * ws[size_t(l)] + bs[size_t(l)]).tanh();
  h.sum().backward();
  ASSERT_EQ(order.size(), 6u);
  auto layer = [](const std::string& s) { return s[1] - '0'; };
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(layer(order[i]), 2 - int(i / 2)) << "position " << i << ": " << order[i];
  }
}

TEST(AutogradHooks, GradDoesNotAccumulateOrFirePostAccumulateHooks) {
  Tensor w = from_vector<double>({1, 2}).set_requires_grad();
  int post = 0, hook = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ++post; });
  w.register_hook([&](const Tensor& g) {
    ++hook;
    return g * 2.0;
  });
  TensorList g = autograd::grad({(w * w).sum()}, {w});
  EXPECT_EQ(to_vector<double>(g[0]), (V{4, 8}));  // the tensor hook applies
  EXPECT_EQ(hook, 1);
  EXPECT_EQ(post, 0);
  EXPECT_FALSE(w.grad().defined());
}

}  // namespace
}  // namespace ember
