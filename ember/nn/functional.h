// nn::functional: the op behind every layer, as a free function
// (torch.nn.functional).
//
// The ops that ember's core already provides are re-exported here under
// their PyTorch names; embedding (PyTorch's argument order), linear and
// scaled_dot_product_attention_with_weights are defined in nn
// (functional.cpp); the
// losses are declared in ember/nn/loss.h. Flatten's op is Tensor::flatten.
#pragma once

#include <optional>
#include <utility>

#include "ember/core/generator.h"
#include "ember/core/ops.h"
#include "ember/nn/loss.h"

namespace ember::nn::functional {

// ---------------- core ops (ember/core/ops.h) ----------------
using ember::adaptive_avg_pool2d;
using ember::avg_pool2d;
using ember::batch_norm;
using ember::conv2d;
using ember::dropout;
using ember::gelu;
using ember::layer_norm;
using ember::log_softmax;
using ember::max_pool2d;
using ember::relu;
using ember::sigmoid;
using ember::softmax;
using ember::tanh;

// ---------------- defined in nn ----------------
// torch.nn.functional.embedding(input, weight): the rows of weight
// (num_embeddings, embedding_dim) picked by the integer (int64 or int32)
// input of any shape; the result is input.shape + [embedding_dim]. PyTorch's
// order, indices first; ember::embedding(weight, indices) is torch.embedding,
// table first. Swapped arguments (a floating input, an integral weight) are an
// ember::Error that says so.
Tensor embedding(const Tensor& input, const Tensor& weight);

// y = input weight^T + bias: input (*, in), weight (out, in), bias (out) or
// undefined; all of one dtype and device.
Tensor linear(const Tensor& input, const Tensor& weight, const Tensor& bias = {});
// gelu(linear(input, weight, bias), approximate) in one op, the bias and the
// GELU in the GEMM's epilogue on CUDA (ember/core/ops.h has its semantics).
using ember::linear_gelu;
// linear(gelu(linear(input, weight1, bias1), approximate), weight2, bias2) in
// one op, an MLP whose backward takes gelu' in a GEMM's epilogue on CUDA
// (ember/core/ops.h has its semantics).
using ember::linear_gelu_linear;

// torch.nn.functional.scaled_dot_product_attention: ember's fused op
// (ember/core/ops.h has its semantics).
using ember::scaled_dot_product_attention;
// The same computation composed of matmul, where, softmax and dropout, also
// returning the attention probabilities (..., L, S) after dropout (what
// nn.MultiheadAttention reports as its weights). It stores the (..., L, S)
// scores and probabilities and has a double backward. A row with every
// position blocked gives zeros, as the fused op. Dropout drops other
// positions than the fused op does for the same seed.
std::pair<Tensor, Tensor> scaled_dot_product_attention_with_weights(const Tensor& query, const Tensor& key,
                                                                    const Tensor& value, const Tensor& attn_mask = {},
                                                                    double dropout_p = 0.0, bool is_causal = false,
                                                                    std::optional<double> scale = std::nullopt,
                                                                    Generator* gen = nullptr);

}  // namespace ember::nn::functional
