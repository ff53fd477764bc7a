// MultiheadAttention: input projection, per-head scaled dot-product
// attention (fused, or composed when the weights are asked for) with the
// masks folded into one additive mask, output projection.
#include "ember/nn/attention.h"

#include <limits>
#include <sstream>
#include <tuple>

#include "ember/core/ops.h"
#include "ember/nn/functional.h"
#include "ember/nn/init.h"

namespace ember::nn {
namespace {

// A mask as scores to add: bool true -> -inf, false -> 0; floating as is.
Tensor additive(const char* what, const Tensor& mask, const Tensor& like) {
  EMBER_CHECK(mask.device() == like.device(), "MultiheadAttention: " << what << " is on " << mask.device()
                                                                     << " but the query is on " << like.device()
                                                                     << "; move the mask with .to(device)");
  if (mask.dtype() == DType::Bool) {
    return where(mask, -std::numeric_limits<double>::infinity(), zeros({}, like.dtype(), like.device()));
  }
  EMBER_CHECK(is_floating(mask.dtype()), "MultiheadAttention: " << what
                                                                << " must be bool (true = blocked) or floating "
                                                                   "(added to the scores), got "
                                                                << dtype_name(mask.dtype()));
  return mask.to(like.dtype());
}

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                       bool batch_first)
    : embed_dim(embed_dim),
      num_heads(num_heads),
      head_dim(num_heads > 0 ? embed_dim / num_heads : 0),
      dropout_p(dropout),
      batch_first(batch_first) {
  EMBER_CHECK(embed_dim > 0 && num_heads > 0 && embed_dim % num_heads == 0,
              "MultiheadAttention: embed_dim (" << embed_dim << ") must be a positive multiple of num_heads ("
                                                << num_heads << ")");
  EMBER_CHECK(dropout >= 0.0 && dropout <= 1.0, "MultiheadAttention: dropout must be in [0, 1], got " << dropout);
  in_proj_weight = register_parameter("in_proj_weight", empty({3 * embed_dim, embed_dim}));
  if (bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * embed_dim}));
  out_proj = register_module("out_proj", std::make_shared<Linear>(embed_dim, embed_dim, bias));
  reset_parameters();
}

void MultiheadAttention::reset_parameters() {
  init::xavier_uniform_(in_proj_weight);
  if (in_proj_bias.defined()) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
}

std::pair<Tensor, Tensor> MultiheadAttention::attend(const Tensor& query, const Tensor& key, const Tensor& value,
                                                     const AttentionOptions& options, bool need_weights) {
  EMBER_CHECK(query.defined() && key.defined() && value.defined(),
              "MultiheadAttention: query, key and value must be defined");
  const bool unbatched = query.dim() == 2;
  EMBER_CHECK((query.dim() == 2 || query.dim() == 3) && key.dim() == query.dim() && value.dim() == query.dim(),
              "MultiheadAttention: expected query, key and value all 3-D ("
                  << (batch_first ? "N, L, E" : "L, N, E") << ") or all 2-D (L, E), got " << shape_str(query.shape())
                  << ", " << shape_str(key.shape()) << " and " << shape_str(value.shape()));
  // Everything below works on (N, length, E).
  auto to_batch_first = [&](const Tensor& t) {
    return unbatched ? t.unsqueeze(0) : batch_first ? t : t.transpose(0, 1);
  };
  Tensor q = to_batch_first(query), k = to_batch_first(key), v = to_batch_first(value);
  const int64_t E = embed_dim, H = num_heads, D = head_dim;
  const int64_t N = q.size(0), L = q.size(1), S = k.size(1);
  EMBER_CHECK(q.size(2) == E && k.size(2) == E && v.size(2) == E && k.size(0) == N && v.size(0) == N && v.size(1) == S,
              "MultiheadAttention: query " << shape_str(query.shape()) << ", key " << shape_str(key.shape())
                                           << " and value " << shape_str(value.shape())
                                           << " must share the batch size and embed_dim = " << E
                                           << ", and key and value the source length");

  auto project = [&](const Tensor& x, int64_t block, int64_t length) {
    Tensor w = in_proj_weight.narrow(0, block * E, E);
    Tensor b = in_proj_bias.defined() ? in_proj_bias.narrow(0, block * E, E) : Tensor();
    return functional::linear(x, w, b).reshape({N, length, H, D}).transpose(1, 2);  // (N, H, length, D)
  };
  Tensor qh = project(q, 0, L), kh = project(k, 1, S), vh = project(v, 2, S);

  Tensor mask;  // additive, broadcasting to (N, H, L, S)
  if (options.attn_mask.defined()) {
    const Tensor& m = options.attn_mask;
    bool ok = (m.dim() == 2 && m.shape() == Shape{L, S}) || (m.dim() == 3 && m.shape() == Shape{N * H, L, S});
    EMBER_CHECK(ok, "MultiheadAttention: attn_mask must have shape "
                        << shape_str({L, S}) << " or " << shape_str({N * H, L, S}) << " (batch * num_heads, L, S), got "
                        << shape_str(m.shape()));
    mask = additive("attn_mask", m.dim() == 3 ? m.reshape({N, H, L, S}) : m, q);
  }
  if (options.key_padding_mask.defined()) {
    const Tensor& m = options.key_padding_mask;
    Shape expected = unbatched ? Shape{S} : Shape{N, S};
    EMBER_CHECK(m.shape() == expected, "MultiheadAttention: key_padding_mask must have shape "
                                           << shape_str(expected) << " (batch, source length), got "
                                           << shape_str(m.shape()));
    Tensor padding = additive("key_padding_mask", m.reshape({N, 1, 1, S}), q);
    mask = mask.defined() ? mask + padding : padding;
  }

  const double p = is_training() ? dropout_p : 0.0;
  Tensor heads, weights;
  if (need_weights) {
    Tensor probs;
    std::tie(heads, probs) =
        functional::scaled_dot_product_attention_with_weights(qh, kh, vh, mask, p, options.is_causal);
    weights = options.average_attn_weights ? probs.mean({1}) : probs;
    if (unbatched) weights = weights.squeeze(0);
  } else {
    heads = functional::scaled_dot_product_attention(qh, kh, vh, mask, p, options.is_causal);
  }
  // heads (N, H, L, D) is laid out as (N, L, H, D) by the fused op, so this
  // reshape is a view there.
  Tensor out = out_proj->forward(heads.transpose(1, 2).reshape({N, L, E}));
  if (unbatched) return {out.squeeze(0), weights};
  return {batch_first ? out : out.transpose(0, 1), weights};
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionOptions& options) {
  return attend(query, key, value, options, false).first;
}

std::pair<Tensor, Tensor> MultiheadAttention::forward_with_weights(const Tensor& query, const Tensor& key,
                                                                   const Tensor& value,
                                                                   const AttentionOptions& options) {
  return attend(query, key, value, options, true);
}

std::shared_ptr<Module> MultiheadAttention::clone() const {
  return clone_as<MultiheadAttention>(embed_dim, num_heads, dropout_p, in_proj_bias.defined(), batch_first);
}

std::string MultiheadAttention::extra_repr() const {
  std::ostringstream s;
  s << "embed_dim=" << embed_dim << ", num_heads=" << num_heads << ", dropout=" << dropout_p
    << ", batch_first=" << (batch_first ? "true" : "false");
  return s.str();
}

}  // namespace ember::nn
