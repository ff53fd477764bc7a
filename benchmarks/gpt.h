// A GPT-2-shaped decoder built from ember's layers, for the benchmarks:
// token ids (B, T) int64 in, next-token logits (B, T, vocab) out.
//
//   GptShape{}                        GPT-2 small: 12 layers, width 768,
//                                     12 heads, context 256, vocab 50257
//   auto gpt = std::make_shared<bench::Gpt>(shape);
//   Tensor loss = bench::Gpt::loss(gpt->forward(ids), next_ids);
//
// Layers (names as in the state dict):
//   tok   Embedding(vocab, width)       the token embedding
//   pos   Embedding(context, width)     the learned position embedding
//   blocks.<i>, i < layers, each pre-LN:
//     x = x + attn(ln1(x))              causal MultiheadAttention, batch_first, bias
//     x = x + mlp(ln2(x))               Linear(width, 4 width), GELU (erf),
//                                       Linear(4 width, width)
//   ln_f  LayerNorm(width)
//   head  Linear(width, vocab, bias = false)
// The head is a Linear of its own, not tied to `tok` as in GPT-2 (GPT-2
// small, tied and with context 1024, has 124M parameters; the default shape
// here, untied with context 256, has 162,447,360). No dropout.
// benchmarks/dp_vs_ddp_torch.py builds the same layers in PyTorch.
//
// Contract: forward takes (B, T) indices with T <= context and each in
// [0, vocab) (ember::Error otherwise, from Embedding); loss(logits, target)
// is the mean cross-entropy over all B * T positions (target (B, T) int64).
// clone() copies the whole model (DataParallel's replicas).
// Header-only: each benchmark is one .cpp file built into its own program.
#pragma once

#include <memory>
#include <string>

#include "ember/ember.h"

namespace ember::bench {

struct GptShape {
  int64_t layers = 12;
  int64_t width = 768;
  int64_t heads = 12;
  int64_t context = 256;
  int64_t vocab = 50257;

  // "12 layers, width 768, 12 heads, context 256, vocab 50257"
  std::string str() const {
    return std::to_string(layers) + " layers, width " + std::to_string(width) + ", " + std::to_string(heads) +
           " heads, context " + std::to_string(context) + ", vocab " + std::to_string(vocab);
  }
};

class GptBlock : public nn::UnaryModule {
 public:
  GptBlock(int64_t width, int64_t heads) : width(width), heads(heads) {
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{width}));
    attn = register_module("attn", std::make_shared<nn::MultiheadAttention>(width, heads, /*dropout=*/0.0,
                                                                            /*bias=*/true, /*batch_first=*/true));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{width}));
    mlp = register_module("mlp", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(width, 4 * width),
                                                                  std::make_shared<nn::GELU>(),
                                                                  std::make_shared<nn::Linear>(4 * width, width)));
  }

  // x (B, T, width) -> (B, T, width)
  Tensor forward(const Tensor& x) override {
    const Tensor h = (*ln1)(x);
    const Tensor y = x + (*attn)(h, h, h, {.is_causal = true});
    return y + (*mlp)((*ln2)(y));
  }
  std::shared_ptr<nn::Module> clone() const override { return clone_as<GptBlock>(width, heads); }

  const int64_t width, heads;
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::Sequential> mlp;
};

class Gpt : public nn::UnaryModule {
 public:
  explicit Gpt(GptShape shape) : shape(shape) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(shape.vocab, shape.width));
    pos = register_module("pos", std::make_shared<nn::Embedding>(shape.context, shape.width));
    blocks = register_module("blocks", std::make_shared<nn::Sequential>());
    for (int64_t i = 0; i < shape.layers; ++i) blocks->push_back(std::make_shared<GptBlock>(shape.width, shape.heads));
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{shape.width}));
    head = register_module("head", std::make_shared<nn::Linear>(shape.width, shape.vocab, /*bias=*/false));
  }

  // ids (B, T) int64 -> logits (B, T, vocab)
  Tensor forward(const Tensor& ids) override {
    const Tensor x = (*tok)(ids) + (*pos)(arange(ids.size(1), DType::Int64, ids.device()));
    return (*head)((*ln_f)((*blocks)(x)));
  }
  std::shared_ptr<nn::Module> clone() const override { return clone_as<Gpt>(shape); }

  // logits (B, T, vocab), target (B, T) -> the mean over the B * T positions
  static Tensor loss(const Tensor& logits, const Tensor& target) {
    return nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
  }

  const GptShape shape;
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::Sequential> blocks;
  std::shared_ptr<nn::LayerNorm> ln_f;
  std::shared_ptr<nn::Linear> head;
};

}  // namespace ember::bench
