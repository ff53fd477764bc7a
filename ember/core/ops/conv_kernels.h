// Kernel signatures and stubs of 2-D convolution (NCHW or channels-last).
//
// Contract: the front-end (ember/core/ops/conv.cpp) has checked every shape and
// parameter and hands dense arrays of one floating dtype, all contiguous
// NCHW, or all channels-last when channels_last is set (input, output and
// their gradients (N, H, W, C) in memory, weight and its gradient
// (C_out, kH, kW, C_in / groups)):
//   input        (n, c_in, h, w)
//   weight       (c_out, c_in / groups, kernel_h, kernel_w)
//   bias         (c_out) or null
//   output       (n, c_out, out_h, out_w)
// with out = (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1
// >= 1 in both dims, and n, c_in, c_out >= 1. Output channel o of group
// g = o / (c_out / groups) sees input channels g * (c_in / groups) onward:
//
//   output[b, o, y, x] = bias[o] + sum over i, p, q of
//       weight[o, i, p, q] * input[b, g * c_in / groups + i,
//                                  y * stride_h - padding_h + p * dilation_h,
//                                  x * stride_w - padding_w + q * dilation_w]
//   (terms outside the input are zero)
//
// - forward writes output (bias added when non-null).
// - backward_input writes grad_input from grad_output and weight (every
//   element, zeros where no window reached).
// - backward_weight writes grad_weight from grad_output and input, and
//   grad_bias (the sum of grad_output over n, out_h, out_w), each only when
//   its pointer is non-null (input is null when grad_weight is).
// float64 computes in double, float32 in float (TF32 only when allow_tf32()
// of ember/core/ops.h is on), float16 and bfloat16 accumulate in float and round
// each result once.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

// Plain data: the same struct travels to the CPU kernels and the cuDNN wrapper.
struct ConvArgs {
  int device = 0;
  DType dtype = DType::Float32;
  int64_t n = 0, c_in = 0, h = 0, w = 0;
  int64_t c_out = 0, kernel_h = 0, kernel_w = 0;
  int64_t out_h = 0, out_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  int64_t padding_h = 0, padding_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
  bool channels_last = false;  // every array channels-last in memory (see above)
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* output = nullptr;
  // backward only
  const void* grad_output = nullptr;
  void* grad_input = nullptr;
  void* grad_weight = nullptr;
  void* grad_bias = nullptr;
};

using ConvKernelFn = void(const ConvArgs& args);
extern KernelStub<ConvKernelFn> conv2d_forward_stub;
extern KernelStub<ConvKernelFn> conv2d_backward_input_stub;
extern KernelStub<ConvKernelFn> conv2d_backward_weight_stub;

}  // namespace ember
