// ember-gpt's model: a GPT-2-style decoder over byte tokens, its
// initialization and its text generation.
//
//   Gpt(GptConfig{.layers = 4, .width = 128, .heads = 4, .context = 128})
//   Tensor logits = gpt->forward(ids);                      // (B, T) -> (B, T, vocab)
//   Tensor loss = Gpt::loss(logits, next_ids);
//   std::string text = generate(*gpt, prompt_ids, 200, {.temperature = 0.8, .top_k = 40}, gen);
//
// Layers (names as in the state dict, as nanoGPT's):
//   tok   Embedding(vocab, width)            token embedding; also the head
//   pos   Embedding(context, width)          learned position embedding
//   drop  Dropout(dropout)                   on the summed embeddings
//   blocks.<i>, pre-LN:
//     x = x + proj(attention(ln1(x)))        qkv: Linear(width, 3 width); causal
//                                            scaled_dot_product_attention on
//                                            (B, heads, T, width / heads) views
//     x = x + mlp(ln2(x))                    Linear(width, 4 width), GELU (tanh),
//                                            Linear(4 width, width), Dropout
//   ln_f  LayerNorm(width)
//   head  Linear(width, vocab, bias = false), its weight TIED to tok.weight
//         (Module::replace_parameter): one tensor, listed once by parameters().
//
// Initialization (GPT-2's): every Linear weight and both embeddings
// N(0, 0.02), biases 0, LayerNorms weight 1 and bias 0; the projections that
// write into the residual stream (attn_proj and the MLP's second Linear)
// N(0, 0.02 / sqrt(2 layers)).
//
// Contract:
// - forward takes (B, T) int64 ids with 1 <= T <= context, each in [0, vocab)
//   (Embedding's ember::Error otherwise); dropout applies in training mode only.
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

struct GptConfig {
  int64_t vocab = 256;
  int64_t layers = 4;
  int64_t width = 128;
  int64_t heads = 4;
  int64_t context = 128;
  double dropout = 0.0;

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

 private:
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

// Applies GPT-2's initialization (above) to a freshly built model.
void init_gpt2(Gpt& model, Generator* gen = nullptr);

struct SampleOptions {
  double temperature = 1.0;
  int64_t top_k = 0;  // 0: the whole vocabulary
};

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t count,
                              const SampleOptions& options, Generator& gen);

}  // namespace ember::gpt
