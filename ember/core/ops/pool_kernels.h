// Kernel signatures and stubs of 2-D pooling (max, average, adaptive
// average) over NCHW planes.
//
// Contract: the front-end (ember/core/ops/pool.cpp) has checked the parameters and
// hands dense arrays of one floating dtype: input (planes, h, w) with
// planes = N * C, output and indices (planes, out_h, out_w), out_h, out_w
// >= 1, planes >= 1; all NCHW, or all channels-last (N, H, W, C in memory)
// when channels_last is set (ember/kernels/pool_layout.h says where each plane
// lies), except grad_output, whose layout is its own (below). Window of output (oy, ox), rows (columns alike):
//   Max          rows oy * stride_h - padding_h + i * dilation_h, i < kernel_h,
//                those inside [0, h). output = the largest value; indices
//                (int64) = its position iy * w + ix in the plane: the first
//                one on ties, the last NaN if any (as PyTorch); the first
//                position in the window when every value is -inf; -1 when no
//                tap is inside the input.
//   Avg          rows [start, end) with start = oy * stride_h - padding_h,
//                end = min(start + kernel_h, h + padding_h), then clipped to
//                [0, h); the sum is divided by the unclipped area when
//                count_include_pad, else by the clipped one (0 for an empty
//                window). dilation is 1.
//   AdaptiveAvg  rows [floor(oy * h / out_h), ceil((oy + 1) * h / out_h)),
//                the mean over the window.
// Backward writes every element of grad_input (planes, h, w): the sum, over
// the windows that hold the element, of the gradient it got (Max: only the
// window's argmax gets it; Avg: grad_output / divisor). Sums are in acc_t
// and each result rounds once. grad_output has its own layout
// (grad_output_channels_last: NCHW or channels-last, dense either way), so
// that a gradient that comes back NCHW (through a flatten, say) needs no copy.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

enum class PoolOp : uint8_t { Max, Avg, AdaptiveAvg };

struct PoolArgs {
  int device = 0;
  DType dtype = DType::Float32;
  int64_t planes = 0, h = 0, w = 0, out_h = 0, out_w = 0;
  int64_t channels = 1;        // C: planes / N
  bool channels_last = false;  // every array but grad_output (N, H, W, C) in memory
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t padding_h = 0, padding_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  bool count_include_pad = true;
  const void* input = nullptr;             // forward
  void* output = nullptr;                  // forward
  int64_t* indices = nullptr;              // Max: written by forward, read by backward
  const void* grad_output = nullptr;       // backward
  bool grad_output_channels_last = false;  // grad_output (N, H, W, C) in memory
  void* grad_input = nullptr;              // backward
};

using PoolKernelFn = void(PoolOp op, const PoolArgs& args);
extern KernelStub<PoolKernelFn> pool2d_forward_stub;
extern KernelStub<PoolKernelFn> pool2d_backward_stub;

}  // namespace ember
