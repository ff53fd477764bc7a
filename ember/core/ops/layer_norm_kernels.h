// Kernel signatures and stubs of layer normalization.
//
// Contract: x is a dense [rows, cols] block (the normalized dims flattened
// into cols); weight and bias are dense [cols] or null. Forward writes
// y = (x - mean) * rstd * weight + bias and, per row, mean and
// rstd = 1 / sqrt(var + eps) with the biased variance, in the statistics
// dtype (float32 for float32 and the half types, float64 for float64);
// statistics are computed with Welford's algorithm. Backward takes the
// saved mean and rstd and writes dx (dense [rows, cols]) and, when their
// pointers are non-null, dweight and dbias (dense [cols], in x's dtype).
//
// The residual form (add_layer_norm's fused kernels, which may decline):
// forward also reads residual (dense [rows, cols] of residual_dtype: x's
// dtype, or float16/bfloat16 when x is float32), writes sum = x + residual
// (rounded to x's dtype, as ember::add) and normalizes the sum instead of x.
// Backward then takes x = the saved sum and grad_sum (dense [rows, cols] of
// x's dtype, or null: zero) and writes grad_x = grad_sum + the layer norm's
// input gradient and, when grad_residual is non-null, that same gradient
// rounded to residual_dtype there. In the residual form y (forward) and
// grad_y (backward) are of y_dtype: x's dtype, or residual_dtype (the
// normalized output rounded once to that half type, and its gradient read
// in it); every other kernel takes y_dtype == dtype. Each returns false,
// having written nothing, when it does not take the call.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

struct LayerNormArgs {
  int device = 0;
  int64_t rows = 0, cols = 0;
  DType dtype = DType::Float32;  // x, y, weight, bias, grads
  double eps = 1e-5;
  const void* x = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* y = nullptr;
  DType y_dtype = DType::Float32;  // y, and grad_y in the backward (see the top)
  void* mean = nullptr;            // [rows], statistics dtype
  void* rstd = nullptr;            // [rows], statistics dtype
  // backward only
  const void* grad_y = nullptr;
  void* grad_x = nullptr;
  void* grad_weight = nullptr;
  void* grad_bias = nullptr;
  // the residual form only
  const void* residual = nullptr;
  DType residual_dtype = DType::Float32;
  void* sum = nullptr;
  const void* grad_sum = nullptr;
  void* grad_residual = nullptr;
};

// The dtype mean and rstd are kept in for an input dtype.
inline DType layer_norm_stats_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

using LayerNormKernelFn = void(const LayerNormArgs& args);
extern KernelStub<LayerNormKernelFn> layer_norm_forward_stub;
extern KernelStub<LayerNormKernelFn> layer_norm_backward_stub;

using AddLayerNormKernelFn = bool(const LayerNormArgs& args);
extern KernelStub<AddLayerNormKernelFn> add_layer_norm_forward_stub;
extern KernelStub<AddLayerNormKernelFn> add_layer_norm_backward_stub;

}  // namespace ember
