// What both layer-norm front-ends (layer_norm, add_layer_norm) set up for a
// forward over the rows of x (the dense input and parameters the kernels
// read, the outputs they write, and the kernels' arguments pointing at them),
// and the arguments of their backward.
#pragma once

#include "ember/core/ops/layer_norm_kernels.h"
#include "ember/core/tensor.h"

namespace ember::detail {

struct LayerNormForward {
  Tensor x, weight, bias;  // dense (contiguous) views or copies, detached; weight and bias may be undefined
  Tensor y, mean, rstd;    // y of x's shape and y_dtype; mean and rstd [rows] of the statistics dtype
  LayerNormArgs args;      // rows, cols, dtype, eps and the pointers above
};

// x's last dims must equal normalized_shape and weight and bias (when
// defined) must match it: the caller has checked both. y_dtype is x's dtype
// but in add_layer_norm's residual form (layer_norm_kernels.h).
LayerNormForward layer_norm_forward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                    const Tensor& bias, double eps, DType y_dtype);

// The forward's arguments `forward` turned into a backward's: x the saved
// input (dense), weight dense or undefined, mean and rstd the forward's,
// grad_y (dense, of the y_dtype the kernels then read) and the gradients written (grad_weight, grad_bias
// undefined: not asked for); the forward's outputs, the bias and the
// residual form's pointers cleared.
LayerNormArgs layer_norm_backward(LayerNormArgs forward, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& grad_y, const Tensor& grad_x,
                                  const Tensor& grad_weight, const Tensor& grad_bias);

}  // namespace ember::detail
