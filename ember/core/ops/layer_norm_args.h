// What both layer-norm front-ends (layer_norm, add_layer_norm) set up for a
// forward over the rows of x: the dense input and parameters the kernels
// read, the outputs they write, and the kernels' arguments pointing at them.
#pragma once

#include "ember/core/ops/layer_norm_kernels.h"
#include "ember/core/tensor.h"

namespace ember::detail {

struct LayerNormForward {
  Tensor x, weight, bias;  // dense (contiguous) views or copies, detached; weight and bias may be undefined
  Tensor y, mean, rstd;    // y of x's shape and dtype; mean and rstd [rows] of the statistics dtype
  LayerNormArgs args;      // rows, cols, dtype, eps and the pointers above
};

// x's last dims must equal normalized_shape and weight and bias (when
// defined) must match it: the caller has checked both.
LayerNormForward layer_norm_forward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                    const Tensor& bias, double eps);

}  // namespace ember::detail
