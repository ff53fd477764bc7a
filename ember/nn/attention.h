// MultiheadAttention, as torch.nn.MultiheadAttention (same parameter
// names, so state dicts line up: in_proj_weight, in_proj_bias,
// out_proj.weight, out_proj.bias).
//
// Shapes, with E = embed_dim, L the target and S the source length:
// query (L, N, E), key and value (S, N, E); with batch_first (N, L, E) and
// (N, S, E); unbatched (L, E) and (S, E). The output has the query's shape.
// Each head h of size D = E / num_heads computes
//   softmax(q_h k_h^T / sqrt(D) + mask) v_h
// from q = query W_q^T + b_q, k = key W_k^T + b_k, v = value W_v^T + b_v
// (W_q, W_k, W_v the three row blocks of in_proj_weight); the heads are
// concatenated and go through out_proj. Dropout (p = dropout) applies to
// the attention probabilities in training only. forward runs the fused
// nn::functional::scaled_dot_product_attention (no (N, num_heads, L, S)
// matrix is stored); forward_with_weights, which must return the weights,
// runs the composed scaled_dot_product_attention_with_weights. Their outputs
// agree up to rounding, except that with dropout they drop different
// positions.
//
// Masks (AttentionOptions), all optional and combinable:
// - attn_mask (L, S) or (N * num_heads, L, S): bool, true = may NOT attend
//   (nn.MultiheadAttention's convention, the opposite of SDPA's), or
//   floating, added to the scores.
// - key_padding_mask (N, S) (unbatched: (S)): bool, true = that key is
//   padding and is ignored, or floating, added.
// - is_causal: position i attends to key positions j <= i only (a GPT
//   decoder's mask; needs no attn_mask).
// A query row with every key blocked gives zeros (and zero gradients).
// Initialization as PyTorch: in_proj_weight xavier_uniform_, the biases
// zeros, out_proj.weight Linear's default.
#pragma once

#include <utility>

#include "ember/nn/linear.h"
#include "ember/nn/module.h"

namespace ember::nn {

struct AttentionOptions {
  Tensor attn_mask;
  Tensor key_padding_mask;
  bool is_causal = false;
  // forward_with_weights: average the weights over the heads (N, L, S), or
  // keep them per head (N, num_heads, L, S).
  bool average_attn_weights = true;
};

class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     bool batch_first = false);

  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionOptions& options = {});
  Tensor operator()(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionOptions& options = {}) {
    return forward(query, key, value, options);
  }
  // The output and the attention weights (after dropout, as PyTorch);
  // unbatched inputs drop the batch dim of the weights too.
  std::pair<Tensor, Tensor> forward_with_weights(const Tensor& query, const Tensor& key, const Tensor& value,
                                                 const AttentionOptions& options = {});

  std::shared_ptr<Module> clone() const override;
  // "embed_dim=8, num_heads=2, dropout=0, batch_first=false"
  std::string extra_repr() const override;
  void reset_parameters();

  const int64_t embed_dim;
  const int64_t num_heads;
  const int64_t head_dim;
  const double dropout_p;
  const bool batch_first;
  Tensor in_proj_weight;             // (3 E, E): W_q, W_k, W_v stacked
  Tensor in_proj_bias;               // (3 E), undefined when built with bias = false
  std::shared_ptr<Linear> out_proj;  // E -> E

 protected:
  void parameter_replaced(const std::string& name, const Tensor& parameter) override {
    (name == "in_proj_weight" ? in_proj_weight : in_proj_bias) = parameter;
  }

 private:
  // forward and forward_with_weights: the weights are undefined unless
  // need_weights (then the composed attention runs).
  std::pair<Tensor, Tensor> attend(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionOptions& options, bool need_weights);
};

}  // namespace ember::nn
