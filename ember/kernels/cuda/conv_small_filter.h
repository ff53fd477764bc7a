// conv2d's weight gradient on CUDA for filters of few taps: one input
// channel (or a few) per group times a small window, as a network's first
// layer over grey or RGB images, or a depthwise convolution. The gradient
// of each of the c_out * taps weights is a sum over every output position
// (n * out_h * out_w of them), a reduction cuDNN's engines run as a split-K
// GEMM wrapped in layout transposes, four launches and 30-40 us of host
// time on the train_step CNN's first layer. Here it is two launches: each
// thread keeps the taps (and bias sums) of a chunk of a group's output
// channels in registers over its positions, the blocks write per-block
// partial sums, and one warp per weight adds a weight's partials in a fixed
// order, so the result is the same bits from run to run on a device. Sums
// in acc_t (float for the 16-bit types, double for float64), each result
// rounded once; no TF32. applies() also asks for 32-bit indices (the padded
// input and the output below 2^30 elements); larger problems go to cuDNN.
//
// Contract: ConvArgs as in ember/core/ops/conv_kernels.h (NCHW or channels-last),
// with grad_weight non-null and applies(args) true; writes grad_weight and,
// when non-null, grad_bias, on the current stream of args.device.
#pragma once

#include "ember/core/ops/conv_kernels.h"

namespace ember::cuda {

// The most taps, c_in / groups * kernel_h * kernel_w, taken here: an RGB
// image's 3x3 window.
constexpr int64_t kSmallFilterMaxTaps = 27;

bool small_filter_weight_grad_applies(const ConvArgs& args);
void small_filter_weight_grad(const ConvArgs& args);

}  // namespace ember::cuda
