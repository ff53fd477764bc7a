// nn::functional: embedding, linear (ember::linear, with the fused bias GEMM
// on CUDA) and the composed scaled dot-product attention that returns its
// weights (ember/core/ops/attention.h).
#include "ember/nn/functional.h"

#include "ember/core/ops/attention.h"
#include "ember/core/ops/op_utils.h"

namespace ember::nn::functional {
using ember::detail::describe;

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
  ember::detail::check_attention_inputs(query, key, value, attn_mask, dropout_p);
  return ember::detail::scaled_dot_product_attention_composed(query, key, value, attn_mask, dropout_p, is_causal, scale,
                                                              gen);
}

}  // namespace ember::nn::functional
