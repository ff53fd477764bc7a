// conv2d on CUDA through cuDNN: the three launchers that fill the conv2d
// stubs for DeviceType::CUDA (contract in ember/core/ops/conv_kernels.h).
//
// They are the whole of ember's use of cuDNN for convolution, defined in
// ember/kernels/cuda/libraries/cudnn_conv.cpp on cuDNN's graph (backend) API: one
// convolution node per operation graph, its execution plan made once per
// configuration and reused. Each runs on the current stream of args.device
// with a workspace from ember's caching allocator; float32 uses TF32 tensor
// cores only when allow_tf32() is on.
#pragma once

#include "ember/core/ops/conv_kernels.h"

namespace ember::cuda {

// output = conv(input, weight) (+ bias).
void cudnn_conv_forward(const ConvArgs& args);
// grad_input from grad_output and weight.
void cudnn_conv_backward_data(const ConvArgs& args);
// grad_weight from grad_output and input, and grad_bias; each when non-null
// (a small filter's by ember/kernels/cuda/conv_small_filter.h).
void cudnn_conv_backward_filter(const ConvArgs& args);

}  // namespace ember::cuda
