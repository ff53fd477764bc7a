// The bias of conv2d on CUDA: added to the output after the convolution and
// summed for its gradient (contract of ConvArgs in ember/core/ops/conv_kernels.h).
// Hand-written kernels rather than cuDNN's cudnnAddTensor and
// cudnnConvolutionBackwardBias, so that every dtype conv2d takes (bfloat16
// included) is served, and the sums are taken in float (double for
// float64) as on the CPU.
#pragma once

#include "ember/core/ops/conv_kernels.h"

namespace ember::cuda {

// output (n, c_out, out_h, out_w) += bias (c_out), on the current stream.
void conv_bias_add(const ConvArgs& args);
// grad_bias (c_out) = grad_output summed over n, out_h and out_w.
void conv_bias_grad(const ConvArgs& args);

}  // namespace ember::cuda
