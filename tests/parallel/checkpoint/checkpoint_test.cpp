// Activation checkpointing (ember/parallel/checkpoint/checkpoint.h): checkpointed and plain
// computations give the same loss and gradients bit for bit on the CPU,
// Dropout recomputes its mask, nesting, autocast, checkpoint_sequential,
// post-accumulate-grad hooks fire once, errors, and the activation bytes it
// saves (the GPU's peak memory: tests/parallel/amp_cuda_test.cpp).
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "ember/core/autograd/saved_tensor_hooks.h"
#include "ember/ember.h"
#include "support/error_message.h"

namespace ember {
namespace {

using parallel::checkpoint;
using parallel::checkpoint_sequential;
using testing::throws_with;

std::shared_ptr<nn::Sequential> make_mlp(double dropout, uint64_t seed) {
  manual_seed(seed);
  auto seq = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 4; ++i) {
    seq->push_back(std::make_shared<nn::Linear>(12, 12));
    seq->push_back(std::make_shared<nn::GELU>());
    if (dropout > 0) seq->push_back(std::make_shared<nn::Dropout>(dropout));
  }
  seq->push_back(std::make_shared<nn::LayerNorm>(Shape{12}));
  seq->push_back(std::make_shared<nn::Linear>(12, 3));
  return seq;
}

// The model's forward as a function for checkpoint (holding the model).
std::function<Tensor(const Tensor&)> forward_of(const std::shared_ptr<nn::Sequential>& model) {
  return [model](const Tensor& in) { return model->forward(in); };
}

struct Result {
  Tensor loss;
  TensorList grads;
  Tensor input_grad;
  Tensor after;  // a draw from the CPU generator after backward
};

// Loss and gradients of one forward/backward: forward(model, x) gives the
// output; the generator is seeded first so runs are comparable.
Result run(nn::Sequential& model, const std::function<Tensor(const Tensor&)>& forward, uint64_t seed = 9) {
  manual_seed(seed);
  Tensor x = randn({6, 12}).set_requires_grad();
  Tensor target = randint(0, 3, {6});
  model.zero_grad();
  Result r;
  r.loss = nn::functional::cross_entropy(forward(x), target);
  r.loss.backward();
  for (const Tensor& p : model.parameters()) r.grads.push_back(p.grad());
  r.input_grad = x.grad();
  r.after = rand({4});
  return r;
}

void expect_identical(const Result& a, const Result& b) {
  EXPECT_TRUE(equal(a.loss, b.loss)) << a.loss.item<double>() << " vs " << b.loss.item<double>();
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_TRUE(a.grads[i].defined() && b.grads[i].defined()) << "parameter " << i;
    EXPECT_TRUE(equal(a.grads[i], b.grads[i])) << "parameter " << i;
  }
  ASSERT_EQ(a.input_grad.defined(), b.input_grad.defined());
  if (a.input_grad.defined()) EXPECT_TRUE(equal(a.input_grad, b.input_grad));
  EXPECT_TRUE(equal(a.after, b.after)) << "the generator's stream after backward differs";
}

TEST(Checkpoint, SameLossAndGradientsBitForBit) {
  auto model = make_mlp(0.0, 1);
  Result plain = run(*model, [&](const Tensor& x) { return model->forward(x); });
  Result ckpt = run(*model, [&](const Tensor& x) { return checkpoint(forward_of(model), x); });
  expect_identical(plain, ckpt);
}

TEST(Checkpoint, DropoutRecomputesTheSameMask) {
  auto model = make_mlp(0.3, 2);
  Result plain = run(*model, [&](const Tensor& x) { return model->forward(x); });
  Result ckpt = run(*model, [&](const Tensor& x) { return checkpoint(forward_of(model), x); });
  expect_identical(plain, ckpt);
  // Without the RNG replay the mask differs, and so do the gradients.
  parallel::CheckpointOptions no_replay;
  no_replay.preserve_rng_state = false;
  Result unreplayed = run(*model, [&](const Tensor& x) {
    return checkpoint(
        no_replay, [model](const Tensor& in) { return model->forward(in); }, x);
  });
  EXPECT_TRUE(equal(unreplayed.loss, plain.loss));
  EXPECT_FALSE(equal(unreplayed.grads[0], plain.grads[0]));
}

// A block of fused attention with dropout on its probabilities: the
// recomputation draws the same Philox keep pattern (the generator's state is
// replayed), so the checkpointed gradients equal the plain ones bit for bit.
TEST(Checkpoint, FusedAttentionWithDropoutRecomputesTheSameMask) {
  auto attend = [](const Tensor& q, const Tensor& k, const Tensor& v) {
    return nn::functional::scaled_dot_product_attention(q, k, v, {}, 0.3, /*is_causal=*/true);
  };
  auto grads_of = [&](bool checkpointed) {
    manual_seed(7);
    Tensor q = randn({2, 3, 70, 16}, DType::Float64).set_requires_grad();
    Tensor k = randn({2, 3, 70, 16}, DType::Float64).set_requires_grad();
    Tensor v = randn({2, 3, 70, 16}, DType::Float64).set_requires_grad();
    Tensor w = randn({2, 3, 70, 16}, DType::Float64);
    manual_seed(11);  // the dropout draw
    Tensor out = checkpointed ? checkpoint(attend, q, k, v) : attend(q, k, v);
    (out * w).sum().backward();
    return std::vector<Tensor>{out.detach(), q.grad(), k.grad(), v.grad()};
  };
  std::vector<Tensor> plain = grads_of(false), ckpt = grads_of(true);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_TRUE(equal(plain[i], ckpt[i])) << "tensor " << i;
}

TEST(Checkpoint, Nested) {
  auto model = make_mlp(0.2, 3);
  Result plain = run(*model, [&](const Tensor& x) { return model->forward(x); });
  auto inner = [model](const Tensor& in) {  // modules 3..8 in an inner checkpoint
    Tensor h = in;
    for (int64_t i = 3; i < 9; ++i) h = (*model)[i]->forward(h);
    return h;
  };
  auto outer = [model, inner](const Tensor& in) {
    Tensor h = in;
    for (int64_t i = 0; i < 3; ++i) h = (*model)[i]->forward(h);
    h = checkpoint(inner, h);
    for (int64_t i = 9; i < int64_t(model->size()); ++i) h = (*model)[i]->forward(h);
    return h;
  };
  Result ckpt = run(*model, [&](const Tensor& x) { return checkpoint(outer, x); });
  expect_identical(plain, ckpt);
}

TEST(Checkpoint, UnderAutocast) {
  auto model = make_mlp(0.1, 4);
  auto under = [](std::function<Tensor(const Tensor&)> f) {
    return [f](const Tensor& x) {
      amp::autocast guard(DeviceType::CPU, DType::BFloat16);
      return f(x);
    };
  };
  Result plain = run(*model, under([&](const Tensor& x) { return model->forward(x); }));
  Result ckpt = run(*model, under([&](const Tensor& x) {
    return checkpoint([model](const Tensor& in) { return model->forward(in); }, x);
  }));
  expect_identical(plain, ckpt);
  EXPECT_EQ(plain.grads[0].dtype(), DType::Float32);
}

TEST(Checkpoint, SequentialWithSeveralSegmentCounts) {
  auto model = make_mlp(0.25, 5);
  Result plain = run(*model, [&](const Tensor& x) { return model->forward(x); });
  for (int64_t segments : {int64_t(1), int64_t(2), int64_t(3), int64_t(5), int64_t(model->size())}) {
    SCOPED_TRACE("segments " + std::to_string(segments));
    Result ckpt = run(*model, [&](const Tensor& x) { return checkpoint_sequential(*model, segments, x); });
    expect_identical(plain, ckpt);
  }
  Tensor x = randn({2, 12});
  EXPECT_TRUE(throws_with([&] { checkpoint_sequential(*model, 0, x); }, {"checkpoint_sequential", "segments", "0"}));
  EXPECT_TRUE(throws_with([&] { checkpoint_sequential(*model, int64_t(model->size()) + 1, x); },
                          {"between 1 and the number of modules"}));
}

TEST(Checkpoint, EachParameterGradientBecomesFinalOnce) {
  auto model = make_mlp(0.0, 6);
  std::vector<int> fired(model->parameters().size(), 0);
  TensorList params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    params[i].register_post_accumulate_grad_hook([&fired, i](const Tensor&) { ++fired[i]; });
  }
  for (int iteration = 1; iteration <= 2; ++iteration) {
    Tensor x = randn({4, 12});  // needs no grad: only the parameters do
    Tensor y = checkpoint_sequential(*model, 3, x);
    y.sum().backward();
    for (size_t i = 0; i < fired.size(); ++i) EXPECT_EQ(fired[i], iteration) << "parameter " << i;
  }
}

TEST(Checkpoint, InputsThatNeedNoGradAndNonTensorArguments) {
  manual_seed(7);
  Tensor w = randn({5, 5}).set_requires_grad();
  Tensor x = randn({3, 5});  // no grad
  auto f = [w](const Tensor& in, double scale, int64_t power, const Tensor& maybe) {
    Tensor h = matmul(in, w) * scale;
    for (int64_t i = 1; i < power; ++i) h = h * tanh(h);
    return maybe.defined() ? h + maybe : h;
  };
  Tensor plain = f(x, 0.5, 3, Tensor());
  plain.sum().backward();
  Tensor expected = w.grad().clone();
  w.set_grad(Tensor());
  Tensor y = checkpoint(f, x, 0.5, int64_t(3), Tensor());
  EXPECT_TRUE(equal(y, plain));
  y.sum().backward();
  EXPECT_TRUE(equal(w.grad(), expected));
  EXPECT_FALSE(x.grad().defined());
}

TEST(Checkpoint, ReturnsTensorLists) {
  manual_seed(8);
  Tensor x = randn({4}).set_requires_grad();
  TensorList out = checkpoint([](const Tensor& in) { return TensorList{exp(in), sin(in)}; }, x);
  ASSERT_EQ(out.size(), 2u);
  (out[0] + out[1]).sum().backward();
  EXPECT_TRUE(allclose(x.grad(), exp(x.detach()) + cos(x.detach()), 1e-6, 1e-6));
}

TEST(Checkpoint, WithoutGradModeItJustRuns) {
  auto model = make_mlp(0.0, 10);
  Tensor x = randn({2, 12});
  NoGradGuard no_grad;
  Tensor y = checkpoint([model](const Tensor& in) { return model->forward(in); }, x);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(equal(y, model->forward(x)));
}

TEST(Checkpoint, BackwardTwiceThroughAFreedCheckpointIsAnError) {
  Tensor x = randn({3}).set_requires_grad();
  Tensor y = checkpoint([](const Tensor& in) { return exp(in) * in; }, x).sum();
  y.backward();
  EXPECT_TRUE(throws_with([&] { y.backward(); }, {"a second time", "retain_graph"}));
}

TEST(Checkpoint, RetainGraphBackwardsTwice) {
  Tensor x = randn({3}).set_requires_grad();
  Tensor y = checkpoint([](const Tensor& in) { return exp(in) * in; }, x).sum();
  y.backward({}, /*retain_graph=*/true);
  Tensor first = x.grad().clone();
  y.backward();
  EXPECT_TRUE(equal(x.grad(), first * 2.0));
}

TEST(Checkpoint, AnInputModifiedBeforeBackwardIsAnError) {
  Tensor leaf = randn({3}).set_requires_grad();
  Tensor x = leaf * 1.0;
  Tensor y = checkpoint([](const Tensor& in) { return square(in); }, x).sum();
  {
    NoGradGuard no_grad;
    x.add_(1.0);
  }
  EXPECT_TRUE(throws_with([&] { y.backward(); }, {"modified by an in-place operation", "checkpoint"}));
}

TEST(Checkpoint, HigherOrderGradientsAreAnError) {
  Tensor x = randn({3}).set_requires_grad();
  Tensor y = checkpoint([](const Tensor& in) { return exp(in) * in; }, x).sum();
  EXPECT_TRUE(throws_with([&] { autograd::grad({y}, {x}, {}, false, /*create_graph=*/true); },
                          {"create_graph", "not supported"}));
}

TEST(Checkpoint, AFunctionThatComputesSomethingElseOnRecomputationIsAnError) {
  Tensor x = randn({4}).set_requires_grad();
  auto calls = std::make_shared<int>(0);
  Tensor y = checkpoint(
                 [calls](const Tensor& in) {
                   ++*calls;
                   return *calls == 1 ? square(in) : square(in.narrow(0, 0, 2));
                 },
                 x)
                 .sum();
  EXPECT_TRUE(throws_with([&] { y.backward(); }, {"checkpoint", "[2]", "[4]", "same thing"}));
  Tensor z = randn({4}).set_requires_grad();
  auto extra = std::make_shared<int>(0);
  Tensor w = checkpoint(
                 [extra](const Tensor& in) {
                   ++*extra;
                   return *extra == 1 ? square(in) : square(square(in));
                 },
                 z)
                 .sum();
  EXPECT_TRUE(throws_with([&] { w.backward(); }, {"checkpoint", "more tensors"}));
}

// Counts the bytes of the tensors saved for backward that are alive, and
// their peak; parameters (leaves that require grad) are not activations.
class SavedBytes final : public autograd::SavedTensorHooks {
 public:
  struct Packed final : autograd::PackedTensor {
    Tensor t;
    SavedBytes* owner;
    size_t bytes;
    ~Packed() override { owner->live -= bytes; }
    Tensor unpack() override { return t; }
  };
  std::shared_ptr<autograd::PackedTensor> pack(const Tensor& t) override {
    auto p = std::make_shared<Packed>();
    p->t = t;
    p->owner = this;
    p->bytes = t.is_leaf() && t.requires_grad() ? 0 : size_t(t.numel()) * t.element_size();
    live += p->bytes;
    peak = std::max(peak, live);
    return p;
  }
  size_t live = 0, peak = 0;
};

TEST(Checkpoint, KeepsFewerActivationsForBackward) {
  manual_seed(11);
  auto model = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 8; ++i) {
    model->push_back(std::make_shared<nn::Linear>(64, 64));
    model->push_back(std::make_shared<nn::ReLU>());
  }
  Tensor x = randn({32, 64});
  auto measure = [&](const std::function<Tensor(const Tensor&)>& forward) {
    SavedBytes counter;
    Tensor loss;
    {
      autograd::SavedTensorHooksGuard guard(&counter);
      loss = forward(x).sum();
    }
    const size_t held = counter.live;
    loss.backward();
    EXPECT_EQ(counter.live, 0u);  // all freed by backward
    return held;
  };
  const size_t plain = measure([&](const Tensor& in) { return model->forward(in); });
  const size_t ckpt = measure([&](const Tensor& in) { return checkpoint_sequential(*model, 4, in); });
  // Plain: each Linear keeps its input and each ReLU its output (16 tensors
  // of 32 x 64 float32). Checkpointed: the inputs of the 3 checkpointed
  // segments and the 4 tensors the last segment (2 layers) keeps.
  const size_t activation = 32 * 64 * sizeof(float);
  EXPECT_EQ(plain, 16 * activation);
  EXPECT_EQ(ckpt, (3 + 4) * activation);
}

}  // namespace
}  // namespace ember
