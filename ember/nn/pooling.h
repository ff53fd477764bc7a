// Pooling layers over NCHW input: MaxPool2d, AvgPool2d and
// AdaptiveAvgPool2d, as torch.nn's. No parameters.
//
// Each calls its ember op (ember/core/ops.h) with the options it was built with;
// the output size rules are PyTorch's (floor, or ceil with ceil_mode). A
// stride left out equals the kernel size.
#pragma once

#include <optional>

#include "ember/nn/module.h"
#include "ember/nn/size2.h"

namespace ember::nn {

class MaxPool2d : public UnaryModule {
 public:
  explicit MaxPool2d(Size2 kernel_size, OptionalSize2 stride = {}, Size2 padding = 0, Size2 dilation = 1,
                     bool ceil_mode = false);
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  const Size2 kernel_size;
  const Size2 stride;
  const Size2 padding;
  const Size2 dilation;
  const bool ceil_mode;
};

// count_include_pad: whether zero padding counts in each window's divisor.
class AvgPool2d : public UnaryModule {
 public:
  explicit AvgPool2d(Size2 kernel_size, OptionalSize2 stride = {}, Size2 padding = 0, bool ceil_mode = false,
                     bool count_include_pad = true);
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  const Size2 kernel_size;
  const Size2 stride;
  const Size2 padding;
  const bool ceil_mode;
  const bool count_include_pad;
};

// Averages over the windows that split H x W into output_size cells
// (window i spans [floor(i H / out), ceil((i + 1) H / out))).
class AdaptiveAvgPool2d : public UnaryModule {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size);
  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  std::string extra_repr() const override;

  const Size2 output_size;
};

}  // namespace ember::nn
