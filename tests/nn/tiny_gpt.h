// A small GPT-style decoder built from nn layers, shared by the transformer
// tests: token + position embeddings, one pre-norm block (causal
// self-attention, GELU MLP), final LayerNorm, and a head tied to the token
// embedding.
#pragma once

#include "ember/ember.h"

namespace ember::testing {

class TinyGpt : public nn::Module {
 public:
  TinyGpt(int64_t vocab, int64_t dim, int64_t heads, int64_t context)
      : vocab(vocab), dim(dim), heads(heads), context(context) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(vocab, dim));
    pos = register_module("pos", std::make_shared<nn::Embedding>(context, dim));
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{dim}));
    attn = register_module("attn", std::make_shared<nn::MultiheadAttention>(dim, heads, 0.0, true, true));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{dim}));
    mlp = register_module("mlp", std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(dim, 4 * dim),
                                                                  std::make_shared<nn::GELU>(),
                                                                  std::make_shared<nn::Linear>(4 * dim, dim)));
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{dim}));
  }

  // idx (B, T) int64 -> logits (B, T, vocab).
  Tensor forward(const Tensor& idx) {
    const int64_t T = idx.size(1);
    Tensor x = (*tok)(idx) + (*pos)(arange(T, DType::Int64, idx.device()));
    Tensor h = (*ln1)(x);
    x = x + (*attn)(h, h, h, {.is_causal = true});
    x = x + (*mlp)((*ln2)(x));
    return nn::functional::linear((*ln_f)(x), tok->weight);
  }
  std::shared_ptr<nn::Module> clone() const override { return clone_as<TinyGpt>(vocab, dim, heads, context); }

  const int64_t vocab, dim, heads, context;
  std::shared_ptr<nn::Embedding> tok, pos;
  std::shared_ptr<nn::LayerNorm> ln1, ln2, ln_f;
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::Sequential> mlp;
};

}  // namespace ember::testing
