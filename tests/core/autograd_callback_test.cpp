// autograd::queue_callback (ember/core/autograd/engine.h): callbacks run once the
// graph walk is over and before backward()/grad() returns, in order, with
// the ones they queue; exceptions reach the caller; nested passes keep their
// own callbacks; queuing outside a pass is an error.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;

TEST(AutogradCallback, RunsAfterEveryLeafWasAccumulatedAndBeforeBackwardReturns) {
  Tensor a = from_vector<double>({1, 2}).set_requires_grad();
  Tensor b = from_vector<double>({3}).set_requires_grad();
  std::vector<std::string> events;
  a.register_post_accumulate_grad_hook([&](const Tensor&) {
    events.push_back("a");
    autograd::queue_callback([&] {
      // Both leaves are final when the callback runs.
      events.push_back("callback a=" + std::to_string(a.grad().sum().item<double>()) +
                       " b=" + std::to_string(b.grad().sum().item<double>()));
    });
  });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { events.push_back("b"); });
  EXPECT_FALSE(autograd::in_backward());
  ((a * 2.0).sum() * b.sum()).backward();  // a.grad = 2b = 6 each, b.grad = 2 * sum(a) = 6
  EXPECT_FALSE(autograd::in_backward());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2], "callback a=12.000000 b=6.000000");
}

TEST(AutogradCallback, RunInOrderWithTheOnesTheyQueueAndOncePerPass) {
  Tensor x = from_vector<double>({1}).set_requires_grad();
  std::vector<int> order;
  x.register_hook([&](const Tensor& g) {
    EXPECT_TRUE(autograd::in_backward());
    autograd::queue_callback([&] {
      order.push_back(1);
      autograd::queue_callback([&] { order.push_back(3); });
    });
    autograd::queue_callback([&] { order.push_back(2); });
    return g;
  });
  (x * 3.0).sum().backward();
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3}));
  (x * 3.0).sum().backward();  // a new pass: the callbacks of the first are gone
  EXPECT_EQ(order, (std::vector<int>{1, 2, 3, 1, 2, 3}));
}

TEST(AutogradCallback, RunsInGradToo) {
  Tensor x = from_vector<double>({2}).set_requires_grad();
  int calls = 0;
  Tensor mid = x * 1.0;  // a non-leaf's hook runs in grad() as well
  mid.register_hook([&](const Tensor& g) {
    autograd::queue_callback([&] { ++calls; });
    return g;
  });
  TensorList g = autograd::grad({(mid * mid).sum()}, {x});
  EXPECT_EQ(calls, 1);
  EXPECT_DOUBLE_EQ(g[0].item<double>(), 4.0);
}

TEST(AutogradCallback, ExceptionsReachTheCallerAndLaterCallbacksDoNotRun) {
  Tensor x = from_vector<double>({1}).set_requires_grad();
  bool second_ran = false;
  x.register_post_accumulate_grad_hook([&](const Tensor&) {
    autograd::queue_callback([] { EMBER_FAIL("the callback failed on purpose"); });
    autograd::queue_callback([&] { second_ran = true; });
  });
  EXPECT_TRUE(throws_with([&] { (x * 2.0).sum().backward(); }, {"the callback failed on purpose"}));
  EXPECT_FALSE(second_ran);
  EXPECT_FALSE(autograd::in_backward());
  EXPECT_TRUE(GradMode::is_enabled());  // restored by backward despite the exception
}

TEST(AutogradCallback, NestedPassesKeepTheirOwnCallbacks) {
  Tensor x = from_vector<double>({1}).set_requires_grad();
  Tensor inner_leaf = from_vector<double>({5}).set_requires_grad();
  std::vector<std::string> events;
  x.register_hook([&](const Tensor& g) {
    autograd::queue_callback([&] { events.push_back("outer"); });
    // A backward of its own inside the outer one.
    inner_leaf.register_post_accumulate_grad_hook(
        [&](const Tensor&) { autograd::queue_callback([&] { events.push_back("inner"); }); });
    {
      EnableGradGuard grad;  // the engine runs hooks with grad mode off
      (inner_leaf * 2.0).sum().backward();
    }
    events.push_back("inner returned");
    return g;
  });
  (x * 2.0).sum().backward();
  EXPECT_EQ(events, (std::vector<std::string>{"inner", "inner returned", "outer"}));
}

TEST(AutogradCallback, QueuingOutsideABackwardIsAnError) {
  EXPECT_TRUE(throws_with([] { autograd::queue_callback([] {}); }, {"queue_callback", "no backward pass"}));
}

}  // namespace
}  // namespace ember
