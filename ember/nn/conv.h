// Conv2d: 2-D convolution over NCHW input, as torch.nn.Conv2d.
//
// Input (N, C_in, H, W), output (N, C_out, H_out, W_out) with
// H_out = (H + 2 padding.h - dilation.h (kernel.h - 1) - 1) / stride.h + 1
// (likewise W). groups splits the channels into groups convolved
// separately; in_channels and out_channels must both divide by it. weight
// (C_out, C_in / groups, kH, kW) and bias (C_out) start as PyTorch's:
// kaiming_uniform_(a = sqrt(5)) and U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with
// fan_in = C_in / groups * kH * kW. Zero padding only. The op is
// ember::conv2d (ember/core/ops.h).
#pragma once

#include "ember/nn/module.h"
#include "ember/nn/size2.h"

namespace ember::nn {

class Conv2d : public UnaryModule {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride = 1, Size2 padding = 0,
         Size2 dilation = 1, int64_t groups = 1, bool bias = true);

  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  // "3, 16, kernel_size=(3, 3), stride=(2, 2)": non-default options only, as PyTorch.
  std::string extra_repr() const override;
  void reset_parameters();

  const int64_t in_channels;
  const int64_t out_channels;
  const Size2 kernel_size;
  const Size2 stride;
  const Size2 padding;
  const Size2 dilation;
  const int64_t groups;
  Tensor weight;  // (out_channels, in_channels / groups, kH, kW)
  Tensor bias;    // (out_channels), undefined when built with bias = false

 protected:
  void parameter_replaced(const std::string& name, const Tensor& parameter) override {
    (name == "weight" ? weight : bias) = parameter;
  }
};

}  // namespace ember::nn
