// ember-gpt's model (examples/gpt/model.h), which gpt_train and dp_vs_ddp
// train too: the parameter counts of GPT-2 small (head tied, 124,439,808)
// and of dp_vs_ddp's default GPT (head untied, 162,447,360), and the
// formula at small shapes; the parameter names (ember-gpt's checkpoints and
// benchmarks/torch_models.py use them); that each block's MLP reaches
// linear_gelu's fused kernel; the forward with its fused residual norms
// against the blocks' plain chain; the two initializations;
// clone() keeping the tie or its absence.
#include "examples/gpt/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "benchmarks/dp_vs_ddp/workload.h"
#include "ember/core/ops/gemm_kernels.h"
#include "ember/ember.h"
#include "support/cuda_compare.h"
#include "support/error_message.h"

namespace ember::gpt {
namespace {

using testing::throws_with;

int64_t parameter_count(const nn::Module& model) {
  int64_t n = 0;
  for (const Tensor& p : model.parameters()) n += p.numel();
  return n;
}

// The count model.h states: embeddings, 12 C^2 + 13 C per block (two
// LayerNorms, qkv, proj and the MLP's two Linears), ln_f, an untied head.
int64_t formula(const GptConfig& c) {
  const int64_t C = c.width;
  return (c.vocab + c.context) * C + c.layers * (12 * C * C + 13 * C) + 2 * C + (c.tied_head ? 0 : c.vocab * C);
}

// A model's parameter count without initializing its values.
int64_t built_count(const GptConfig& config) {
  nn::init::SkipInitGuard shapes_only;
  return parameter_count(*std::make_shared<Gpt>(config));
}

TEST(GptModel, Gpt2SmallHas124439808ParametersWithTheHeadTied) {
  nn::init::SkipInitGuard shapes_only;  // shapes only: 500 MB of float32 left untouched
  const auto model = std::make_shared<Gpt>(GptConfig::gpt2_small());
  EXPECT_TRUE(model->head->weight.is_same(model->tok->weight));
  EXPECT_EQ(parameter_count(*model), 124439808);
  EXPECT_EQ(formula(model->config), 124439808);
}

TEST(GptModel, DpVsDdpDefaultGptHas162447360ParametersWithTheHeadUntied) {
  const GptConfig config = bench::dp_vs_ddp_gpt();
  EXPECT_FALSE(config.tied_head);
  EXPECT_EQ(built_count(config), 162447360);
  EXPECT_EQ(formula(config), 162447360);
}

TEST(GptModel, ParameterCountMatchesTheFormulaTiedAndUntied) {
  for (const bool tied : {true, false}) {
    for (const GptConfig shape : {GptConfig{.vocab = 97, .layers = 1, .width = 16, .heads = 2, .context = 8},
                                  GptConfig{.vocab = 256, .layers = 3, .width = 24, .heads = 4, .context = 33}}) {
      GptConfig config = shape;
      config.tied_head = tied;
      EXPECT_EQ(built_count(config), formula(config)) << config.str() << (tied ? ", tied" : ", untied");
    }
  }
}

TEST(GptModel, ParameterNamesAreNanoGptsAndTheHeadIsListedOnlyUntied) {
  const std::vector<std::string> block = {
      "blocks.0.ln1.weight",       "blocks.0.ln1.bias",       "blocks.0.attn_qkv.weight", "blocks.0.attn_qkv.bias",
      "blocks.0.attn_proj.weight", "blocks.0.attn_proj.bias", "blocks.0.ln2.weight",      "blocks.0.ln2.bias",
      "blocks.0.mlp.0.weight",     "blocks.0.mlp.0.bias",     "blocks.0.mlp.2.weight",    "blocks.0.mlp.2.bias"};
  std::vector<std::string> tied = {"tok.weight", "pos.weight"};
  tied.insert(tied.end(), block.begin(), block.end());
  tied.insert(tied.end(), {"ln_f.weight", "ln_f.bias"});
  std::vector<std::string> untied = tied;
  untied.push_back("head.weight");
  const GptConfig config{.vocab = 11, .layers = 1, .width = 8, .heads = 2, .context = 4};
  EXPECT_EQ(std::make_shared<Gpt>(config)->named_parameters().keys(), tied);
  GptConfig untied_config = config;
  untied_config.tied_head = false;
  EXPECT_EQ(std::make_shared<Gpt>(untied_config)->named_parameters().keys(), untied);
}

// Installs, for a scope, a CPU kernel of gemm_bias_gelu_stub (the CPU has
// none) that counts its calls and declines, so that linear_gelu composes
// the result as it does on the CPU without it.
class CountingGeluKernel {
 public:
  CountingGeluKernel() {
    calls = 0;
    gemm_bias_gelu_stub.set(DeviceType::CPU, &decline);
  }
  ~CountingGeluKernel() { gemm_bias_gelu_stub.set(DeviceType::CPU, nullptr); }
  CountingGeluKernel(const CountingGeluKernel&) = delete;
  CountingGeluKernel& operator=(const CountingGeluKernel&) = delete;

  static inline int calls = 0;

 private:
  static bool decline(const GemmArgs&, const void*, void*, int64_t) {
    ++calls;
    return false;
  }
};

TEST(GptModel, EachBlocksMlpRunsThroughLinearGelusFusedKernel) {
  manual_seed(4);
  const auto model = std::make_shared<Gpt>(GptConfig{.vocab = 13, .layers = 2, .width = 8, .heads = 2, .context = 4});
  const Tensor ids = randint(0, 13, {2, 4}, DType::Int64);
  const Tensor unfused = model->forward(ids);
  const CountingGeluKernel spy;
  const Tensor with_spy = model->forward(ids);
  EXPECT_EQ(CountingGeluKernel::calls, 2);  // one per block
  EXPECT_TRUE(testing::tensors_close(with_spy, unfused, {0, 0}));
}

// Gpt::forward runs the blocks itself, each residual add fused with the
// layer norm after it: the logits and gradients of the plain chain, the
// blocks' own forwards then ln_f and the head (float64).
TEST(GptModel, ForwardEqualsTheBlocksChainInFloat64) {
  manual_seed(7);
  const auto model = std::make_shared<Gpt>(GptConfig{.vocab = 13, .layers = 3, .width = 8, .heads = 2, .context = 4});
  model->to(DType::Float64);
  const Tensor ids = randint(0, 13, {2, 4}, DType::Int64);
  const Tensor logits = model->forward(ids);
  const Tensor x = (*model->tok)(ids) + (*model->pos)(arange(4, DType::Int64));
  const Tensor chained = (*model->head)((*model->ln_f)((*model->blocks)(x)));
  EXPECT_TRUE(testing::tensors_close(logits, chained, {1e-12, 1e-12}));
  const TensorList params = model->parameters();
  const Tensor weights = randn(logits.shape(), DType::Float64);
  const TensorList got = autograd::grad({(logits * weights).sum()}, params);
  const TensorList want = autograd::grad({(chained * weights).sum()}, params);
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_TRUE(testing::tensors_close(got[i], want[i], {1e-12, 1e-12})) << "parameter " << i;
  }
}

// The standard deviation of a tensor's elements.
double std_of(const Tensor& t) { return std::sqrt(var(t.to(DType::Float64)).item<double>()); }

TEST(GptModel, Gpt2InitializationDrawsGpt2sDistributions) {
  manual_seed(5);
  const auto model = std::make_shared<Gpt>(GptConfig{.vocab = 64, .layers = 2, .width = 64, .heads = 2, .context = 64});
  const auto& block = dynamic_cast<const Block&>(*model->blocks->children()[1]);
  EXPECT_NEAR(std_of(model->tok->weight), 0.02, 0.002);
  EXPECT_NEAR(std_of(model->pos->weight), 0.02, 0.002);
  EXPECT_NEAR(std_of(block.attn_qkv->weight), 0.02, 0.002);
  EXPECT_NEAR(std_of(block.fc->weight), 0.02, 0.002);
  EXPECT_NEAR(std_of(block.attn_proj->weight), 0.01, 0.001);  // 0.02 / sqrt(2 layers)
  EXPECT_NEAR(std_of(block.proj->weight), 0.01, 0.001);
  for (const Tensor& bias : {block.attn_qkv->bias, block.attn_proj->bias, block.fc->bias, block.proj->bias})
    EXPECT_EQ(bias.abs().max().item<double>(), 0.0);
}

TEST(GptModel, PyTorchInitializationKeepsEachLayersDefault) {
  manual_seed(6);
  const auto model = std::make_shared<Gpt>(GptConfig{
      .vocab = 64, .layers = 2, .width = 64, .heads = 2, .context = 64, .tied_head = false, .init = GptInit::PyTorch});
  const auto& block = dynamic_cast<const Block&>(*model->blocks->children()[0]);
  EXPECT_NEAR(std_of(model->tok->weight), 1.0, 0.05);  // Embedding: N(0, 1)
  const double bound = 1.0 / std::sqrt(64.0);          // Linear: U(-1/sqrt(in), 1/sqrt(in))
  EXPECT_NEAR(std_of(block.fc->weight), bound / std::sqrt(3.0), 0.01);
  EXPECT_LE(block.fc->bias.abs().max().item<double>(), bound);
  EXPECT_GT(block.fc->bias.abs().max().item<double>(), 0.0);
  EXPECT_NEAR(std_of(model->head->weight), bound / std::sqrt(3.0), 0.01);
}

TEST(GptModel, CloneKeepsTheHeadTiedOrUntied) {
  for (const bool tied : {true, false}) {
    auto model = std::make_shared<Gpt>(
        GptConfig{.vocab = 11, .layers = 1, .width = 8, .heads = 2, .context = 4, .tied_head = tied});
    const auto copy = nn::clone(model);
    EXPECT_EQ(copy->head->weight.is_same(copy->tok->weight), tied);
    EXPECT_EQ(parameter_count(*copy), parameter_count(*model));
    EXPECT_TRUE(testing::tensors_close(copy->head->weight, model->head->weight, {0, 0}));
  }
}

TEST(GptModel, AGeluOtherThanNoneOrTanhIsAnError) {
  EXPECT_TRUE(
      throws_with([] { std::make_shared<Gpt>(GptConfig{.gelu = "erf"}); }, {"gelu", "'erf'", "'none'", "'tanh'"}));
}

}  // namespace
}  // namespace ember::gpt
