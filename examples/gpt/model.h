// The GPT-2-style decoder that ember-gpt trains and the GPT benchmarks
// (benchmarks/gpt_train, benchmarks/dp_vs_ddp) time, its initialization and
// its text generation. benchmarks/torch_models.py's Gpt is its PyTorch twin.
//
//   Gpt(GptConfig{.layers = 4, .width = 128, .heads = 4, .context = 128})  // ember-gpt's
//   Gpt(GptConfig::gpt2_small())                            // GPT-2 small, 124,439,808 parameters
//   Tensor logits = gpt->forward(ids);                      // (B, T) -> (B, T, vocab)
//   Tensor loss = Gpt::loss(logits, next_ids);
//   std::vector<int64_t> tokens = generate(*gpt, prompt_ids, 200, {.temperature = 0.8, .top_k = 40}, gen);
//
// Layers (names as in the state dict, as nanoGPT's):
//   tok   Embedding(vocab, width)            token embedding
//   pos   Embedding(context, width)          learned position embedding
//   drop  Dropout(dropout)                   on the summed embeddings
//   blocks.<i>, pre-LN:
//     x = x + attn_proj(attention(ln1(x)))   attn_qkv: Linear(width, 3 width);
//                                            causal scaled_dot_product_attention
//                                            on (B, heads, T, width / heads)
//                                            views of its output
//     x = x + mlp(ln2(x))                    mlp: Sequential(Linear(width, 4 width),
//                                            GELU(config.gelu), Linear(4 width,
//                                            width), Dropout)
//   ln_f  LayerNorm(width)
//   head  Linear(width, vocab, bias = false); with tied_head its weight IS
//         tok.weight (Module::replace_parameter): one tensor, listed once by
//         parameters()
// Parameters: (vocab + context) width + layers (12 width^2 + 13 width)
// + 2 width, plus vocab width for an untied head.
//
// mlp's Linear, GELU and Linear run as one op: nn::Sequential runs them as
// ember::linear_gelu_linear (on CUDA with "tanh", the bias and the GELU in
// the first GEMM's epilogue, and in the backward gelu' in the epilogue of
// the GEMM that produces its gradient). Each residual add and the layer
// norm after it (ln2 in a block; the next block's ln1, or ln_f, after it)
// run as one ember::add_layer_norm: Gpt::forward runs the blocks itself to
// pair a block's last add with the next norm.
//
// Initialization (config.init):
//   Gpt2     GPT-2's (nanoGPT's): every Linear weight and both embeddings
//            N(0, 0.02), biases 0, LayerNorms weight 1 and bias 0; the
//            projections that write into the residual stream (attn_proj and
//            mlp.2) N(0, 0.02 / sqrt(2 layers))
//   PyTorch  each layer's own default (PyTorch's: Linear uniform in
//            +-1/sqrt(in), Embedding N(0, 1), LayerNorm 1 and 0)
// Both draw from the CPU's default generator at construction; a clone()
// draws nothing (nn::init is skipped, the values copied).
//
// Contract:
// - The constructor checks that heads divide width and that gelu is "none"
//   or "tanh" (ember::Error naming the fix).
// - forward takes (B, T) int64 ids with 1 <= T <= context, each in [0, vocab)
//   (Embedding's ember::Error otherwise); dropout applies in training mode
//   only, and at 0 each Dropout returns its input.
// - generate runs in eval mode without autograd and restores the training
//   flag; it returns the `count` new tokens (not the prompt). Each step feeds
//   the last `context` tokens, divides the last position's logits by
//   temperature, keeps the top_k largest (top_k 0 or >= vocab: all) and draws
//   one token with ember::multinomial from `gen`. An empty prompt is an
//   ember::Error; temperature must be positive.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ember/core/generator.h"
#include "ember/nn/nn.h"

namespace ember::gpt {

enum class GptInit { Gpt2, PyTorch };

struct GptConfig {
  int64_t vocab = 256;
  int64_t layers = 4;
  int64_t width = 128;
  int64_t heads = 4;
  int64_t context = 128;
  double dropout = 0.0;
  bool tied_head = true;      // head.weight IS tok.weight
  std::string gelu = "tanh";  // the MLP's GELU: "tanh" or "none" (erf), as nn::GELU's approximate
  GptInit init = GptInit::Gpt2;

  // GPT-2 small: vocab 50257, 12 layers, width 768, 12 heads, context 1024,
  // tied head, GELU tanh, GPT-2's initialization, no dropout.
  static GptConfig gpt2_small();

  // "4 layers, width 128, 4 heads, context 128, vocab 256"
  std::string str() const;
};

class Block : public nn::UnaryModule {
 public:
  explicit Block(const GptConfig& config);
  // x (B, T, width) -> (B, T, width)
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Module> clone() const override { return clone_as<Block>(config); }

  const GptConfig config;
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::Linear> attn_qkv, attn_proj;  // (3 width, width), (width, width)
  std::shared_ptr<nn::Sequential> mlp;
  // mlp's layers in order: fc (weight (4 width, width)), gelu, proj (weight (width, 4 width)), mlp_drop
  std::shared_ptr<nn::Linear> fc, proj;
  std::shared_ptr<nn::GELU> gelu;
  std::shared_ptr<nn::Dropout> mlp_drop;

  // x (B, T, width) after ln1 -> attn_proj(causal attention) (B, T, width)
  Tensor attention(const Tensor& x);
};

class Gpt : public nn::UnaryModule {
 public:
  explicit Gpt(const GptConfig& config);
  // ids (B, T) int64 -> logits (B, T, vocab)
  Tensor forward(const Tensor& ids) override;
  std::shared_ptr<nn::Module> clone() const override { return clone_as<Gpt>(config); }

  // logits (B, T, vocab), target (B, T) int64 -> the mean cross-entropy over B * T positions
  static Tensor loss(const Tensor& logits, const Tensor& target);

  const GptConfig config;
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::Dropout> drop;
  std::shared_ptr<nn::Sequential> blocks;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> head;
};

struct SampleOptions {
  double temperature = 1.0;
  int64_t top_k = 0;  // 0: the whole vocabulary
};

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t count,
                              const SampleOptions& options, Generator& gen);

}  // namespace ember::gpt
