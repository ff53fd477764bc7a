// The pieces of scaled dot-product attention that the fused op
// (ember/core/ops/attention.cpp) and nn's composed form
// (nn::functional::scaled_dot_product_attention_with_weights) share, so both
// check the same things and name the same faults.
#pragma once

#include <optional>
#include <utility>

#include "ember/core/generator.h"
#include "ember/core/tensor.h"

namespace ember::detail {

// Checks query (..., L, E), key (..., S, E), value (..., S, Ev), the mask and
// dropout_p as torch.nn.functional.scaled_dot_product_attention takes them;
// an ember::Error naming the op, the shapes, dtypes and devices otherwise.
void check_attention_inputs(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask,
                            double dropout_p);

// Whether the fused kernels (ember/core/ops/attention_kernels.h) take this
// case. They do not when:
// - attn_mask is floating and needs its gradient (the kernels give none);
// - on CUDA, head_dim != value_dim or head_dim > 256 (the CUDA kernels'
//   limits; the CPU ones have none);
// - the device has no fused kernel registered.
// scaled_dot_product_attention then runs the composed form.
bool fused_attention_supports(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask);

// The composed form: matmul, where, softmax, dropout and matmul, recorded
// op by op (so it has a double backward). Returns the output and the
// attention probabilities (..., L, S) after dropout. A row with every
// position blocked gives zeros (output, probabilities and gradients), as the
// fused kernels do. Dropout draws its mask with ember::dropout over the
// probabilities, not with attention_dropout_keep: the two forms drop
// different positions for one seed. Inputs must have passed
// check_attention_inputs.
std::pair<Tensor, Tensor> scaled_dot_product_attention_composed(const Tensor& query, const Tensor& key,
                                                                const Tensor& value, const Tensor& attn_mask,
                                                                double dropout_p, bool is_causal,
                                                                std::optional<double> scale, Generator* gen);

}  // namespace ember::detail
