// nn::functional: linear (ember::linear, with the fused bias GEMM on CUDA)
// and scaled dot-product attention, composed from matmul, where and softmax
// (their backward comes from those ops).
#include "ember/nn/functional.h"

#include <cmath>
#include <limits>

#include "ember/core/ops/op_utils.h"

namespace ember::nn::functional {
using ember::detail::describe;

namespace {

void check_same_kind(const char* op, const char* what, const Tensor& t, const char* ref_name, const Tensor& ref) {
  EMBER_CHECK(t.dtype() == ref.dtype() && t.device() == ref.device(),
              op << ": " << what << " is " << describe(t) << " but " << ref_name << " is " << describe(ref)
                 << "; convert one with .to(device, dtype) (for a module: module->to(...))");
}

}  // namespace

Tensor embedding(const Tensor& input, const Tensor& weight) {
  EMBER_CHECK(input.defined() && weight.defined(), "nn::functional::embedding: got an undefined input or weight");
  EMBER_CHECK(!(is_floating(input.dtype()) && is_integral(weight.dtype())),
              "nn::functional::embedding: expected (input, weight) as torch.nn.functional.embedding, integer "
              "indices first, but got input "
                  << describe(input) << " and weight " << describe(weight)
                  << "; swap the arguments (ember::embedding(weight, indices) is torch.embedding, table first)");
  return ember::embedding(weight, input);
}

Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias) {
  return ember::linear(input, weight, bias);  // the fused bias GEMM on CUDA
}

std::pair<Tensor, Tensor> scaled_dot_product_attention_with_weights(const Tensor& query, const Tensor& key,
                                                                    const Tensor& value, const Tensor& attn_mask,
                                                                    double dropout_p, bool is_causal,
                                                                    std::optional<double> scale, Generator* gen) {
  const char* op = "scaled_dot_product_attention";
  EMBER_CHECK(query.defined() && key.defined() && value.defined(), op << ": query, key and value must be defined");
  EMBER_CHECK(query.dim() >= 2 && key.dim() >= 2 && value.dim() >= 2,
              op << ": query, key and value need at least 2 dims (..., length, features), got "
                 << shape_str(query.shape()) << ", " << shape_str(key.shape()) << " and " << shape_str(value.shape()));
  EMBER_CHECK(query.size(-1) == key.size(-1), op << ": query " << shape_str(query.shape()) << " and key "
                                                 << shape_str(key.shape())
                                                 << " must have the same last dim (the feature size)");
  EMBER_CHECK(key.size(-2) == value.size(-2), op << ": key " << shape_str(key.shape()) << " and value "
                                                 << shape_str(value.shape())
                                                 << " must have the same source length (dim -2)");
  EMBER_CHECK(is_floating(query.dtype()), op << ": expected a floating query, got " << describe(query));
  check_same_kind(op, "key", key, "query", query);
  check_same_kind(op, "value", value, "query", query);
  EMBER_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, op << ": dropout_p must be in [0, 1], got " << dropout_p);

  const double inf = std::numeric_limits<double>::infinity();
  const int64_t L = query.size(-2), S = key.size(-2);
  double s = scale.value_or(1.0 / std::sqrt(double(query.size(-1))));
  Tensor scores = matmul(query, key.transpose(-2, -1)) * s;
  if (is_causal) {
    Tensor rows = arange(L, DType::Int64, query.device()).view({L, 1});
    Tensor cols = arange(S, DType::Int64, query.device()).view({1, S});
    scores = where(gt(cols, rows), -inf, scores);
  }
  if (attn_mask.defined()) {
    EMBER_CHECK(attn_mask.device() == query.device(), op << ": attn_mask is " << describe(attn_mask) << " but query is "
                                                         << describe(query) << "; move the mask with .to(device)");
    if (attn_mask.dtype() == DType::Bool) {
      scores = where(attn_mask, scores, -inf);
    } else {
      EMBER_CHECK(is_floating(attn_mask.dtype()), op << ": attn_mask must be bool (true = attend) or floating "
                                                        "(added to the scores), got "
                                                     << describe(attn_mask));
      scores = scores + attn_mask.to(scores.dtype());
    }
  }
  Tensor probs = softmax(scores, -1);
  if (dropout_p > 0.0) probs = dropout(probs, dropout_p, true, gen);
  return {matmul(probs, value), probs};
}

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* gen) {
  return scaled_dot_product_attention_with_weights(query, key, value, attn_mask, dropout_p, is_causal, scale, gen)
      .first;
}

}  // namespace ember::nn::functional
