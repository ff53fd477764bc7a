// Weight tying (Module::replace_parameter): a GPT-like head sharing the
// token embedding's table is one tensor for parameters(), the optimizer,
// to(), state dicts, nn::save/nn::load and clone(), with the gradients of
// both uses summed; compared with an untied model computed by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "ember/ember.h"
#include "support/cuda_compare.h"
#include "support/error_message.h"
#include "support/temp_dir.h"

namespace ember {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using ::testing::HasSubstr;

constexpr int64_t kVocab = 7, kDim = 4;

// Embedding -> Linear head; tied: head.weight = tok.weight, in the
// constructor so that clone() rebuilds the tie.
class TinyLm : public nn::Module {
 public:
  explicit TinyLm(bool tied) : tied(tied) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(kVocab, kDim));
    head = register_module("head", std::make_shared<nn::Linear>(kDim, kVocab, false));
    if (tied) head->replace_parameter("weight", tok->weight);
  }
  Tensor forward(const Tensor& idx) { return (*head)((*tok)(idx)); }  // (B, T) -> (B, T, vocab)
  std::shared_ptr<nn::Module> clone() const override { return clone_as<TinyLm>(tied); }

  const bool tied;
  std::shared_ptr<nn::Embedding> tok;
  std::shared_ptr<nn::Linear> head;
};

Tensor batch() { return from_vector<int64_t>({0, 3, 5, 3, 6, 1}, {2, 3}); }
Tensor targets() { return from_vector<int64_t>({3, 5, 3, 6, 1, 2}); }

Tensor loss_of(TinyLm& m) { return nn::functional::cross_entropy(m.forward(batch()).view({-1, kVocab}), targets()); }

bool same_values(const Tensor& a, const Tensor& b) { return equal(a.cpu(), b.cpu()); }

TEST(WeightTying, TheHeadUsesTheEmbeddingTensorAndItIsListedOnce) {
  auto m = std::make_shared<TinyLm>(true);
  EXPECT_TRUE(m->head->weight.is_same(m->tok->weight));
  EXPECT_EQ(m->named_parameters().keys(), (std::vector<std::string>{"tok.weight"}));
  EXPECT_EQ(m->parameters().size(), 1u);
  EXPECT_TRUE(m->head->named_parameters(false).at("weight").is_same(m->tok->weight));
  // state_dict keeps both names, as PyTorch's, on one storage.
  auto sd = m->state_dict();
  EXPECT_EQ(sd.keys(), (std::vector<std::string>{"tok.weight", "head.weight"}));
  EXPECT_EQ(sd.at("tok.weight").storage(), sd.at("head.weight").storage());
  // The head's forward reads the embedding's table.
  NoGradGuard no_grad;
  Tensor x = randn({3, kDim});
  EXPECT_TRUE(allclose(m->head->forward(x), matmul(x, m->tok->weight.t())));
}

// One SGD step of the tied model equals the step of an untied copy (same
// values in both places) whose two gradients are added by hand.
TEST(WeightTying, OneTrainingStepUpdatesTheTiedWeightOnceWithTheSumOfBothGradients) {
  auto tied = std::make_shared<TinyLm>(true);
  tied->to(DType::Float64);
  auto untied = std::make_shared<TinyLm>(false);
  untied->to(DType::Float64);
  const Tensor w0 = tied->tok->weight.detach().clone();
  {
    NoGradGuard no_grad;
    untied->tok->weight.copy_(w0);
    untied->head->weight.copy_(w0);
  }
  const double lr = 0.5;
  optim::SGD opt(tied->parameters(), {.lr = lr});
  ASSERT_EQ(opt.param_groups()[0].params.size(), 1u);
  loss_of(*tied).backward();
  opt.step();
  loss_of(*untied).backward();
  const Tensor g_emb = untied->tok->weight.grad(), g_head = untied->head->weight.grad();
  ASSERT_TRUE(g_emb.defined() && g_head.defined());
  EXPECT_GT(g_head.abs().sum().item<double>(), 0);
  EXPECT_TRUE(allclose(tied->tok->weight.grad(), g_emb + g_head, 1e-12, 1e-14));
  EXPECT_TRUE(allclose(tied->tok->weight, w0 - lr * (g_emb + g_head), 1e-12, 1e-14));
  EXPECT_TRUE(tied->head->weight.is_same(tied->tok->weight));
}

TEST(WeightTying, AdamStateHasOneEntryAndRoundTripsIntoAFreshTiedModel) {
  auto train_step = [](TinyLm& model, optim::Optimizer& opt) {
    opt.zero_grad();
    loss_of(model).backward();
    opt.step();
  };
  auto m = std::make_shared<TinyLm>(true);
  optim::Adam opt(m->parameters(), {.lr = 1e-2});
  train_step(*m, opt);
  train_step(*m, opt);
  optim::OptimizerStateDict sd = opt.state_dict();
  ASSERT_EQ(sd.state.size(), 1u);
  EXPECT_EQ(sd.state.at(0).at("step").item<int64_t>(), 2);
  EXPECT_EQ(sd.param_groups[0].params, (std::vector<int64_t>{0}));

  auto resumed = std::make_shared<TinyLm>(true);
  resumed->load_state_dict(m->state_dict());
  EXPECT_TRUE(resumed->head->weight.is_same(resumed->tok->weight));
  optim::Adam opt2(resumed->parameters(), {.lr = 1e-2});
  opt2.load_state_dict(sd);
  train_step(*m, opt);
  train_step(*resumed, opt2);
  EXPECT_TRUE(same_values(resumed->tok->weight, m->tok->weight));
}

TEST(WeightTying, ToDtypeAndCloneKeepTheTie) {
  auto m = std::make_shared<TinyLm>(true);
  loss_of(*m).backward();
  m->to(DType::Float64);
  EXPECT_TRUE(m->head->weight.is_same(m->tok->weight));
  EXPECT_EQ(m->head->weight.dtype(), DType::Float64);
  EXPECT_EQ(m->tok->weight.grad().dtype(), DType::Float64);
  auto copy = nn::clone(m);
  EXPECT_TRUE(copy->head->weight.is_same(copy->tok->weight));
  EXPECT_FALSE(copy->tok->weight.is_same(m->tok->weight));
  EXPECT_TRUE(same_values(copy->tok->weight, m->tok->weight));
  EXPECT_EQ(copy->parameters().size(), 1u);
}

TEST(WeightTying, ToCudaKeepsTheTie) {
  EMBER_REQUIRE_CUDA();
  auto m = std::make_shared<TinyLm>(true);
  m->to(cuda_device(0));
  EXPECT_TRUE(m->head->weight.is_same(m->tok->weight));
  EXPECT_TRUE(m->tok->weight.is_cuda());
  optim::SGD opt(m->parameters(), {.lr = 0.1});
  Tensor before = m->tok->weight.cpu().clone();
  nn::functional::cross_entropy(m->forward(batch().cuda()).view({-1, kVocab}), targets().cuda()).backward();
  opt.step();
  EXPECT_TRUE(m->head->weight.is_same(m->tok->weight));
  EXPECT_FALSE(same_values(before, m->tok->weight));
}

using TiedFiles = testing::TempDirTest;

// As safetensors.torch.save_model: the first name in byte order is kept,
// the other is recorded in the metadata.
TEST_F(TiedFiles, SaveWritesTheTensorOnceAndLoadRestoresBothNamesAndTheTie) {
  auto m = std::make_shared<TinyLm>(true);
  nn::save(*m, path("m.safetensors"), {{"note", "x"}});
  SafetensorsContents file = load_safetensors(path("m.safetensors"));
  ASSERT_EQ(file.tensors.size(), 1u);
  EXPECT_EQ(file.tensors.begin()->first, "head.weight");
  EXPECT_EQ(file.metadata.at("tok.weight"), "head.weight");
  EXPECT_EQ(file.metadata.at("note"), "x");

  auto fresh = std::make_shared<TinyLm>(true);
  nn::LoadStateDictResult r = nn::load(*fresh, path("m.safetensors"));
  EXPECT_TRUE(r.missing_keys.empty());
  EXPECT_TRUE(r.unexpected_keys.empty());
  EXPECT_TRUE(fresh->head->weight.is_same(fresh->tok->weight));
  EXPECT_TRUE(same_values(fresh->tok->weight, m->tok->weight));
}

TEST_F(TiedFiles, AFileWithBothNamesLoadsWhenTheyAreEqualAndIsAnErrorWhenNot) {
  auto m = std::make_shared<TinyLm>(true);
  const Tensor w = m->tok->weight.detach();
  save_safetensors(path("both.safetensors"), {{"tok.weight", w}, {"head.weight", w}});
  auto fresh = std::make_shared<TinyLm>(true);
  nn::load(*fresh, path("both.safetensors"));
  EXPECT_TRUE(fresh->head->weight.is_same(fresh->tok->weight));
  EXPECT_TRUE(same_values(fresh->tok->weight, w));

  save_safetensors(path("differ.safetensors"), {{"tok.weight", w}, {"head.weight", w + 1}});
  const Tensor before = fresh->tok->weight.detach().clone();
  EXPECT_TRUE(testing::throws_with(
      [&] { nn::load(*fresh, path("differ.safetensors")); },
      {"differ.safetensors", "\"head.weight\" and \"tok.weight\"", "different values", "ties them"}));
  EXPECT_TRUE(same_values(fresh->tok->weight, before));
}

TEST_F(TiedFiles, OneNameOfTheTieIsEnoughAndNeitherIsMissingBoth) {
  auto m = std::make_shared<TinyLm>(true);
  save_safetensors(path("tok.safetensors"), {{"tok.weight", m->tok->weight.detach()}});
  auto fresh = std::make_shared<TinyLm>(true);
  nn::load(*fresh, path("tok.safetensors"));
  EXPECT_TRUE(same_values(fresh->head->weight, m->tok->weight));

  save_safetensors(path("none.safetensors"), {{"other", zeros({1})}});
  nn::LoadStateDictResult r = nn::load(*fresh, path("none.safetensors"), /*strict=*/false);
  EXPECT_EQ(r.missing_keys, (std::vector<std::string>{"tok.weight", "head.weight"}));
  EXPECT_EQ(r.unexpected_keys, (std::vector<std::string>{"other"}));
}

TEST_F(TiedFiles, AnUntiedModelLoadsATiedFileOnlyWithBothNames) {
  auto m = std::make_shared<TinyLm>(true);
  nn::save(*m, path("m.safetensors"));
  auto untied = std::make_shared<TinyLm>(false);
  EXPECT_TRUE(
      testing::throws_with([&] { nn::load(*untied, path("m.safetensors")); }, {"missing keys", "\"tok.weight\""}));
}

TEST(WeightTying, ReplaceParameterErrorsNameTheProblemAndChangeNothing) {
  auto head = std::make_shared<nn::Linear>(kDim, kVocab);
  const Tensor old = head->weight;
  EXPECT_TRUE(testing::throws_with(
      [&] {
        head->replace_parameter("wieght", zeros({kVocab, kDim}));
      },
      {"replace_parameter", "no parameter named 'wieght'", "\"weight\", \"bias\""}));
  EXPECT_TRUE(testing::throws_with(
      [&] {
        head->replace_parameter("weight", zeros({kDim, kVocab}));
      },
      {"replace_parameter", "'weight'", "[7, 4]", "[4, 7]", "one shape, dtype"}));
  EXPECT_TRUE(testing::throws_with(
      [&] {
        head->replace_parameter("weight", zeros({kVocab, kDim}, DType::Float64));
      },
      {"float64", "float32"}));
  Tensor leaf = zeros({kVocab, kDim}).set_requires_grad();
  EXPECT_TRUE(
      testing::throws_with([&] { head->replace_parameter("weight", leaf * 2); }, {"replace_parameter", "not a leaf"}));

  class Custom : public nn::Module {
   public:
    Custom() { w = register_parameter("w", zeros({2})); }
    std::shared_ptr<nn::Module> clone() const override { return clone_as<Custom>(); }
    Tensor w;
  };
  auto custom = std::make_shared<Custom>();
  Tensor other = ones({2}).set_requires_grad();
  EXPECT_TRUE(testing::throws_with([&] { custom->replace_parameter("w", other); },
                                   {"replace_parameter", "Custom", "'w'", "override Module::parameter_replaced"}));
  EXPECT_TRUE(custom->named_parameters().at("w").is_same(custom->w));
  EXPECT_TRUE(head->weight.is_same(old));
  EXPECT_TRUE(head->named_parameters().at("weight").is_same(old));
}

TEST(WeightTying, EveryLayerWithParametersCanBeTied) {
  auto a = std::make_shared<nn::LayerNorm>(Shape{3});
  auto b = std::make_shared<nn::LayerNorm>(Shape{3});
  b->replace_parameter("weight", a->weight);
  b->replace_parameter("bias", a->bias);
  EXPECT_TRUE(b->weight.is_same(a->weight));
  EXPECT_TRUE(b->bias.is_same(a->bias));
  auto c1 = std::make_shared<nn::Conv2d>(2, 3, 3);
  auto c2 = std::make_shared<nn::Conv2d>(2, 3, 3);
  c2->replace_parameter("weight", c1->weight);
  EXPECT_TRUE(c2->weight.is_same(c1->weight));
  auto n1 = std::make_shared<nn::BatchNorm2d>(3);
  auto n2 = std::make_shared<nn::BatchNorm2d>(3);
  n2->replace_parameter("bias", n1->bias);
  EXPECT_TRUE(n2->bias.is_same(n1->bias));
  auto m1 = std::make_shared<nn::MultiheadAttention>(4, 2);
  auto m2 = std::make_shared<nn::MultiheadAttention>(4, 2);
  m2->replace_parameter("in_proj_weight", m1->in_proj_weight);
  EXPECT_TRUE(m2->in_proj_weight.is_same(m1->in_proj_weight));
}

}  // namespace
}  // namespace ember
