// A GPT-2-shaped decoder built from ember's layers, for the benchmarks:
// token ids (B, T) int64 in, next-token logits (B, T, vocab) out.
//
//   GptShape{}                        dp_vs_ddp's GPT: 12 layers, width 768,
//                                     12 heads, context 256, vocab 50257
//   GptShape::gpt2_small()            GPT-2 small itself (gpt_train): context
//                                     1024 and gpt2 = true
//   auto gpt = std::make_shared<bench::Gpt>(shape);
//   Tensor loss = bench::Gpt::loss(gpt->forward(ids), next_ids);
//
// Layers (names as in the state dict):
//   tok   Embedding(vocab, width)       the token embedding
//   pos   Embedding(context, width)     the learned position embedding
//   blocks.<i>, i < layers, each pre-LN:
//     x = x + attn(ln1(x))              causal self-attention, bias
//     x = x + mlp(ln2(x))               Linear(width, 4 width), GELU,
//                                       Linear(4 width, width)
//   ln_f  LayerNorm(width)
//   head  Linear(width, vocab, bias = false)
// attn is an nn::MultiheadAttention for its parameters (in_proj_weight,
// in_proj_bias, out_proj), but the block computes it itself:
// nn::functional::scaled_dot_product_attention(q, k, v, {}, 0.0,
// is_causal = true) on (B, heads, T, width / heads) views of the one
// in_proj GEMM's output, the attention that fused kernels take.
// MultiheadAttention's forward would also compute the attention weights,
// which nothing reads here; the values are the same.
//
// shape.gpt2 picks GPT-2's own choices (off by default):
//   off  head untied; GELU exact (erf); PyTorch's default initialization
//        (162,447,360 parameters at the default shape)
//   on   head.weight IS tok.weight (Module::replace_parameter, so the
//        parameters list it once); GELU's tanh approximation; GPT-2's
//        initialization (nanoGPT's): every matrix and embedding N(0, 0.02),
//        the residual projections (attn.out_proj, mlp.2) N(0, 0.02 /
//        sqrt(2 layers)), biases 0, LayerNorms 1 and 0 (124,439,808
//        parameters for GPT-2 small)
// No dropout. benchmarks/torch_models.py builds the same layers in
// PyTorch (dp_vs_ddp_torch.py and gpt_train_torch.py train them).
//
// Contract: forward takes (B, T) indices with T <= context and each in
// [0, vocab) (ember::Error otherwise, from Embedding); loss(logits, target)
// is the mean cross-entropy over all B * T positions (target (B, T) int64).
// clone() copies the whole model, tie included (DataParallel's replicas).
// Header-only: each benchmark is one .cpp file built into its own program.
#pragma once

#include <cmath>
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
  bool gpt2 = false;  // tied head, GELU tanh, GPT-2's initialization (see above)

  static GptShape gpt2_small() { return {.context = 1024, .gpt2 = true}; }

  // "12 layers, width 768, 12 heads, context 256, vocab 50257" (and ", GPT-2
  // style" when gpt2)
  std::string str() const {
    return std::to_string(layers) + " layers, width " + std::to_string(width) + ", " + std::to_string(heads) +
           " heads, context " + std::to_string(context) + ", vocab " + std::to_string(vocab) +
           (gpt2 ? ", GPT-2 style" : "");
  }
};

class GptBlock : public nn::UnaryModule {
 public:
  explicit GptBlock(const GptShape& shape) : shape(shape) {
    const int64_t width = shape.width;
    ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{width}));
    attn = register_module("attn", std::make_shared<nn::MultiheadAttention>(width, shape.heads, /*dropout=*/0.0,
                                                                            /*bias=*/true, /*batch_first=*/true));
    ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{width}));
    fc = std::make_shared<nn::Linear>(width, 4 * width);
    proj = std::make_shared<nn::Linear>(4 * width, width);
    mlp = register_module(
        "mlp", std::make_shared<nn::Sequential>(fc, std::make_shared<nn::GELU>(shape.gpt2 ? "tanh" : "none"), proj));
    if (shape.gpt2) {
      const double residual_std = 0.02 / std::sqrt(2.0 * double(shape.layers));
      nn::init::normal_(attn->in_proj_weight, 0.0, 0.02);
      nn::init::normal_(attn->out_proj->weight, 0.0, residual_std);
      nn::init::normal_(fc->weight, 0.0, 0.02);
      nn::init::zeros_(fc->bias);
      nn::init::normal_(proj->weight, 0.0, residual_std);
      nn::init::zeros_(proj->bias);
    }
  }

  // x (B, T, width) -> (B, T, width)
  Tensor forward(const Tensor& x) override {
    const Tensor y = x + self_attention((*ln1)(x));
    return y + (*mlp)((*ln2)(y));
  }
  std::shared_ptr<nn::Module> clone() const override { return clone_as<GptBlock>(shape); }

  const GptShape shape;
  std::shared_ptr<nn::LayerNorm> ln1, ln2;
  std::shared_ptr<nn::MultiheadAttention> attn;
  std::shared_ptr<nn::Sequential> mlp;
  std::shared_ptr<nn::Linear> fc, proj;  // mlp's two Linears

 private:
  // h (B, T, width) -> (B, T, width): causal attention over attn's parameters.
  Tensor self_attention(const Tensor& h) const {
    const int64_t B = h.size(0), T = h.size(1), H = shape.heads, D = shape.width / shape.heads;
    const Tensor qkv = nn::functional::linear(h, attn->in_proj_weight, attn->in_proj_bias).view({B, T, 3, H, D});
    auto heads = [&](int64_t i) { return qkv.select(2, i).transpose(1, 2); };  // (B, H, T, D) view
    const Tensor y = nn::functional::scaled_dot_product_attention(heads(0), heads(1), heads(2), {}, 0.0,
                                                                  /*is_causal=*/true);
    return (*attn->out_proj)(y.transpose(1, 2).reshape({B, T, shape.width}));
  }
};

class Gpt : public nn::UnaryModule {
 public:
  explicit Gpt(GptShape shape) : shape(shape) {
    tok = register_module("tok", std::make_shared<nn::Embedding>(shape.vocab, shape.width));
    pos = register_module("pos", std::make_shared<nn::Embedding>(shape.context, shape.width));
    blocks = register_module("blocks", std::make_shared<nn::Sequential>());
    for (int64_t i = 0; i < shape.layers; ++i) blocks->push_back(std::make_shared<GptBlock>(shape));
    ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{shape.width}));
    head = register_module("head", std::make_shared<nn::Linear>(shape.width, shape.vocab, /*bias=*/false));
    if (shape.gpt2) {
      head->replace_parameter("weight", tok->weight);
      nn::init::normal_(tok->weight, 0.0, 0.02);
      nn::init::normal_(pos->weight, 0.0, 0.02);
    }
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
