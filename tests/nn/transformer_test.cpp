// A small GPT-style model built from nn layers: it is causal end to end,
// and a few plain SGD steps on a fixed sequence lower its loss.
#include <gtest/gtest.h>

#include "ember/ember.h"
#include "tiny_gpt.h"

namespace ember {
namespace {

TEST(NnTransformer, TinyGptIsCausalAndLearns) {
  manual_seed(1);
  auto gpt = std::make_shared<testing::TinyGpt>(11, 16, 2, 8);
  EXPECT_EQ(gpt->parameters().size(), 16u);
  Tensor idx = from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8, 3, 1, 4, 1, 5, 9, 2, 6}, {2, 8});
  Tensor logits = gpt->forward(idx);
  ASSERT_EQ(logits.shape(), (Shape{2, 8, 11}));

  // Position t's logits do not depend on tokens after t.
  Tensor changed = idx.clone();
  {
    NoGradGuard no_grad;
    changed.narrow(1, 5, 3).fill_(0);
  }
  Tensor logits2 = gpt->forward(changed);
  EXPECT_TRUE(equal(logits2.narrow(1, 0, 5), logits.narrow(1, 0, 5)));
  EXPECT_FALSE(allclose(logits2.narrow(1, 5, 1), logits.narrow(1, 5, 1)));

  // Next-token prediction on the fixed batch.
  Tensor inputs = idx.narrow(1, 0, 7), targets = idx.narrow(1, 1, 7).contiguous();
  auto loss_of = [&] {
    return nn::functional::cross_entropy(gpt->forward(inputs).reshape({-1, 11}), targets.reshape({-1}));
  };
  double first = loss_of().item<double>();
  for (int step = 0; step < 20; ++step) {
    gpt->zero_grad();
    loss_of().backward();
    NoGradGuard no_grad;
    for (Tensor p : gpt->parameters()) p.sub_(p.grad() * 0.1);
  }
  double last = loss_of().item<double>();
  EXPECT_LT(last, 0.7 * first) << "loss " << first << " -> " << last;
}

}  // namespace
}  // namespace ember
