// A whole GPT training step captured in one cuda::Graph: token and position
// embeddings, layer_norm, fused causal attention, the MLP's linear_gelu
// (GELU tanh), the tied head,
// cross-entropy under bf16 autocast with float32 master weights, backward,
// clip_grad_norm_ and AdamW. Replays of the captured step must give the
// losses, gradient norms and parameters that the same steps give eagerly.
//
// The model is ember-gpt's (examples/gpt/model.h; the one gpt_train
// captures) at a toy shape; tests/nn/tiny_gpt.h has one block, exact GELU and
// MultiheadAttention's forward, so it would not cover gpt_train's path.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "ember/core/cuda/graph.h"
#include "ember/ember.h"
#include "ember/optim/optim.h"
#include "examples/gpt/model.h"
#include "support/cuda_compare.h"

namespace ember {
namespace {

// Below the gradient norm of every step here (about 1 to 1.8), so that each
// replay's clip scales the gradients.
constexpr double kMaxNorm = 0.5;

// A step's outputs, made on the device.
struct StepOut {
  Tensor loss, grad_norm;
};

StepOut train_step(gpt::Gpt& model, optim::AdamW& opt, const Tensor& ids, const Tensor& next) {
  StepOut out;
  {
    amp::autocast autocast(DeviceType::CUDA, DType::BFloat16);
    out.loss = gpt::Gpt::loss(model.forward(ids), next);
  }
  opt.zero_grad();
  out.loss.backward();
  out.grad_norm = optim::clip_grad_norm_(model.parameters(), kMaxNorm);
  opt.step();
  return out;
}

TEST(GptStepGraph, ReplaysGiveTheEagerStepsLossesAndParameters) {
  EMBER_REQUIRE_CUDA();
  const Device gpu = cuda_device(0);
  const gpt::GptConfig config{.vocab = 97, .layers = 2, .width = 64, .heads = 2, .context = 32};
  constexpr int64_t kBatch = 4;
  constexpr int kSteps = 4;  // the first is the graphed copy's eager warm-up
  manual_seed(5);
  auto eager = std::make_shared<gpt::Gpt>(config);
  auto graphed = nn::clone(eager);
  eager->to(gpu);
  graphed->to(gpu);
  ASSERT_EQ(eager->parameters().size(), graphed->parameters().size());
  // lr 1e-2: a replay that ran stale work (an old weight cast, say) would
  // differ from the eager step by about lr, well above the tolerance.
  const optim::AdamWOptions options{.lr = 1e-2, .betas = {0.9, 0.95}, .weight_decay = 0.1};
  optim::AdamW eager_opt(eager->parameters(), options);
  optim::AdamW graph_opt(graphed->parameters(), options);
  std::vector<Tensor> batches_ids, batches_next;
  for (int i = 0; i < kSteps; ++i) {
    batches_ids.push_back(randint(0, config.vocab, {kBatch, config.context}, DType::Int64));
    batches_next.push_back(randint(0, config.vocab, {kBatch, config.context}, DType::Int64));
  }
  // The static inputs that every step, eager or replayed, reads.
  Tensor ids = zeros({kBatch, config.context}, DType::Int64, gpu);
  Tensor next = zeros({kBatch, config.context}, DType::Int64, gpu);

  cuda::Graph graph;
  StepOut captured;
  for (int i = 0; i < kSteps; ++i) {
    ids.copy_(batches_ids[size_t(i)]);
    next.copy_(batches_next[size_t(i)]);
    const StepOut want = train_step(*eager, eager_opt, ids, next);
    if (i == 0) {
      // Warm-up: AdamW's state, the kept bf16 weight casts, cuBLAS's first use.
      const StepOut warm = train_step(*graphed, graph_opt, ids, next);
      EXPECT_NEAR(warm.loss.item<double>(), want.loss.item<double>(), 1e-5);
      continue;
    }
    if (i == 1) {
      graph.capture([&] { captured = train_step(*graphed, graph_opt, ids, next); });
      ASSERT_TRUE(graph.captured());
    }
    graph.replay();
    const double want_norm = want.grad_norm.item<double>();
    EXPECT_GT(want_norm, kMaxNorm) << "step " << i << " did not clip, so it does not test the captured clip";
    EXPECT_NEAR(captured.loss.item<double>(), want.loss.item<double>(), 2e-3) << "step " << i;
    EXPECT_NEAR(captured.grad_norm.item<double>(), want_norm, 1e-2 * want_norm) << "step " << i;
    const auto a = eager->named_parameters();
    const auto b = graphed->named_parameters();
    for (const std::string& name : a.keys()) {
      EXPECT_TRUE(testing::tensors_close(b[name].cpu(), a[name].cpu(), {1e-2, 2e-3})) << name << " after step " << i;
    }
  }
}

}  // namespace
}  // namespace ember
