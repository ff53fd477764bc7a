// The GPT, its initializations and sampling (see examples/gpt/model.h).
#include "examples/gpt/model.h"

#include <cmath>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "ember/core/error.h"
#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/parallel/amp/autocast.h"

namespace ember::gpt {

namespace {

// GPT-2's initialization (model.h) of a freshly built model.
void init_gpt2(Gpt& model) {
  NoGradGuard no_grad;
  constexpr double kStd = 0.02;
  const double residual_std = kStd / std::sqrt(2.0 * double(model.config.layers));
  nn::init::normal_(model.tok->weight, 0, kStd);
  nn::init::normal_(model.pos->weight, 0, kStd);
  for (const auto& m : model.blocks->children()) {
    auto& block = dynamic_cast<Block&>(*m);
    for (nn::Linear* linear : {block.attn_qkv.get(), block.attn_proj.get(), block.fc.get(), block.proj.get()}) {
      const bool residual = linear == block.attn_proj.get() || linear == block.proj.get();
      nn::init::normal_(linear->weight, 0, residual ? residual_std : kStd);
      nn::init::zeros_(linear->bias);
    }
  }
}

}  // namespace

GptConfig GptConfig::gpt2_small() { return {.vocab = 50257, .layers = 12, .width = 768, .heads = 12, .context = 1024}; }

std::string GptConfig::str() const {
  return std::to_string(layers) + " layers, width " + std::to_string(width) + ", " + std::to_string(heads) +
         " heads, context " + std::to_string(context) + ", vocab " + std::to_string(vocab);
}

Block::Block(const GptConfig& config) : config(config) {
  const int64_t w = config.width;
  ln1 = register_module("ln1", std::make_shared<nn::LayerNorm>(Shape{w}));
  attn_qkv = register_module("attn_qkv", std::make_shared<nn::Linear>(w, 3 * w));
  attn_proj = register_module("attn_proj", std::make_shared<nn::Linear>(w, w));
  ln2 = register_module("ln2", std::make_shared<nn::LayerNorm>(Shape{w}));
  fc = std::make_shared<nn::Linear>(w, 4 * w);
  gelu = std::make_shared<nn::GELU>(config.gelu);
  proj = std::make_shared<nn::Linear>(4 * w, w);
  mlp_drop = std::make_shared<nn::Dropout>(config.dropout);
  mlp = register_module("mlp", std::make_shared<nn::Sequential>(fc, gelu, proj, mlp_drop));
}

Tensor Block::attention(const Tensor& x) {
  const int64_t B = x.size(0), T = x.size(1), C = config.width, H = config.heads;
  // (B, T, 3C) -> three (B, H, T, hd) strided views of one tensor. split's
  // backward is one cat of the three gradients, which the attention writes
  // in (B, T, H, hd) layout: the way back to (B, T, 3C) copies nothing else.
  const TensorList qkv = split((*attn_qkv)(x), C, 2);
  const auto heads = [&](const Tensor& t) { return t.view({B, T, H, C / H}).transpose(1, 2); };
  const double p = is_training() ? config.dropout : 0.0;
  const Tensor y = nn::functional::scaled_dot_product_attention(heads(qkv[0]), heads(qkv[1]), heads(qkv[2]), {}, p,
                                                                /*is_causal=*/true);
  // (B, H, T, hd) -> (B, T, C)
  Tensor out = (*attn_proj)(y.transpose(1, 2).reshape({B, T, C}));
  return p > 0 ? nn::functional::dropout(out, p, true) : out;
}

namespace {

// {x + delta, norm(x + delta)} as one op (ember::add_layer_norm). Every
// normalized output feeds a Linear (the QKV projection, the MLP's first
// layer, the head), which under autocast would cast it to the autocast
// dtype: it comes in that dtype instead, rounded once by the same kernel.
std::pair<Tensor, Tensor> add_then_norm(const Tensor& x, const Tensor& delta, const nn::LayerNorm& norm) {
  const DeviceType device = x.device().type;
  const std::optional<DType> normed_dtype =
      amp::is_autocast_enabled(device) ? std::optional(amp::get_autocast_dtype(device)) : std::nullopt;
  return add_layer_norm(x, delta, norm.normalized_shape, norm.weight, norm.bias, norm.eps, normed_dtype);
}

}  // namespace

Tensor Block::forward(const Tensor& x) {
  const auto [y, normed] = add_then_norm(x, attention((*ln1)(x)), *ln2);
  return y + (*mlp)(normed);
}

Gpt::Gpt(const GptConfig& config) : config(config) {
  EMBER_CHECK(config.width % config.heads == 0, "ember-gpt: width " << config.width << " is not a multiple of heads "
                                                                    << config.heads << "; choose a width that "
                                                                    << config.heads << " heads divide");
  EMBER_CHECK(config.gelu == "none" || config.gelu == "tanh",
              "ember-gpt: gelu must be 'none' (erf) or 'tanh', got '" << config.gelu << "'");
  tok = register_module("tok", std::make_shared<nn::Embedding>(config.vocab, config.width));
  pos = register_module("pos", std::make_shared<nn::Embedding>(config.context, config.width));
  drop = register_module("drop", std::make_shared<nn::Dropout>(config.dropout));
  blocks = register_module("blocks", std::make_shared<nn::Sequential>());
  for (int64_t i = 0; i < config.layers; ++i) blocks->push_back(std::make_shared<Block>(config));
  ln_f = register_module("ln_f", std::make_shared<nn::LayerNorm>(Shape{config.width}));
  head = register_module("head", std::make_shared<nn::Linear>(config.width, config.vocab, /*bias=*/false));
  if (config.tied_head) head->replace_parameter("weight", tok->weight);
  if (config.init == GptInit::Gpt2) init_gpt2(*this);
}

Tensor Gpt::forward(const Tensor& ids) {
  const int64_t T = ids.size(1);
  EMBER_CHECK(T >= 1 && T <= config.context,
              "ember-gpt: a sequence of " << T << " tokens does not fit the context of " << config.context);
  Tensor x = (*drop)((*tok)(ids) + (*pos)(arange(T, DType::Int64, ids.device())));
  // The blocks' forwards, each residual add fused with the layer norm after
  // it (the next block's ln1, or ln_f after the last block).
  const std::vector<std::shared_ptr<nn::Module>> list = blocks->children();
  if (list.empty()) return (*head)((*ln_f)(x));
  Tensor normed = (*dynamic_cast<Block&>(*list.front()).ln1)(x);
  for (size_t i = 0; i < list.size(); ++i) {
    Block& block = dynamic_cast<Block&>(*list[i]);
    auto [y, normed2] = add_then_norm(x, block.attention(normed), *block.ln2);
    const nn::LayerNorm& next = i + 1 < list.size() ? *dynamic_cast<Block&>(*list[i + 1]).ln1 : *ln_f;
    std::tie(x, normed) = add_then_norm(y, (*block.mlp)(normed2), next);
  }
  return (*head)(normed);
}

Tensor Gpt::loss(const Tensor& logits, const Tensor& target) {
  return nn::functional::cross_entropy(logits.reshape({-1, logits.size(-1)}), target.reshape({-1}));
}

std::vector<int64_t> generate(Gpt& model, const std::vector<int64_t>& prompt, int64_t count,
                              const SampleOptions& options, Generator& gen) {
  EMBER_CHECK(!prompt.empty(), "ember-gpt: generation needs at least one prompt token");
  EMBER_CHECK(options.temperature > 0, "ember-gpt: the temperature must be positive, not " << options.temperature);
  NoGradGuard no_grad;
  const bool was_training = model.is_training();
  model.eval();
  const Device device = model.tok->weight.device();
  std::vector<int64_t> tokens = prompt, generated;
  for (int64_t i = 0; i < count; ++i) {
    const size_t n = std::min<size_t>(tokens.size(), size_t(model.config.context));
    const std::vector<int64_t> window(tokens.end() - std::ptrdiff_t(n), tokens.end());
    const Tensor ids = from_vector(window, {1, int64_t(n)}, device);
    // The last position's logits (vocab), in float32 whatever the model's dtype.
    Tensor logits = model.forward(ids).select(1, int64_t(n) - 1).select(0, 0).to(DType::Float32);
    logits = logits / options.temperature;
    int64_t next = 0;
    if (options.top_k > 0 && options.top_k < model.config.vocab) {
      auto [values, indices] = topk(logits, options.top_k);
      const Tensor pick = multinomial(softmax(values, -1), 1, false, &gen);
      next = index_select(indices, 0, pick).cpu().item<int64_t>();
    } else {
      next = multinomial(softmax(logits, -1), 1, false, &gen).cpu().item<int64_t>();
    }
    tokens.push_back(next);
    generated.push_back(next);
  }
  model.train(was_training);
  return generated;
}

}  // namespace ember::gpt
