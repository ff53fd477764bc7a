// Pooling layers: option checks and forward through the ember ops.
#include "ember/nn/pooling.h"

#include "ember/core/ops.h"

namespace ember::nn {
namespace {

std::string flag(bool b) { return b ? "true" : "false"; }

void check_window(const char* layer, Size2 kernel_size, Size2 stride, Size2 padding) {
  EMBER_CHECK(kernel_size.h > 0 && kernel_size.w > 0 && stride.h > 0 && stride.w > 0,
              layer << ": kernel_size " << kernel_size.str() << " and stride " << stride.str() << " must be positive");
  EMBER_CHECK(padding.h >= 0 && padding.w >= 0 && 2 * padding.h <= kernel_size.h && 2 * padding.w <= kernel_size.w,
              layer << ": padding " << padding.str() << " must be non-negative and at most half the kernel size "
                    << kernel_size.str());
}

}  // namespace

MaxPool2d::MaxPool2d(Size2 kernel_size, OptionalSize2 stride, Size2 padding, Size2 dilation, bool ceil_mode)
    : kernel_size(kernel_size),
      stride(stride.value_or(kernel_size)),
      padding(padding),
      dilation(dilation),
      ceil_mode(ceil_mode) {
  check_window("MaxPool2d", kernel_size, this->stride, padding);
  EMBER_CHECK(dilation.h > 0 && dilation.w > 0, "MaxPool2d: dilation " << dilation.str() << " must be positive");
}

Tensor MaxPool2d::forward(const Tensor& input) {
  return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode);
}

std::shared_ptr<Module> MaxPool2d::clone() const {
  return clone_as<MaxPool2d>(kernel_size, stride, padding, dilation, ceil_mode);
}

std::string MaxPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size.str() + ", stride=" + stride.str() + ", padding=" + padding.str() +
         ", dilation=" + dilation.str() + ", ceil_mode=" + flag(ceil_mode);
}

AvgPool2d::AvgPool2d(Size2 kernel_size, OptionalSize2 stride, Size2 padding, bool ceil_mode, bool count_include_pad)
    : kernel_size(kernel_size),
      stride(stride.value_or(kernel_size)),
      padding(padding),
      ceil_mode(ceil_mode),
      count_include_pad(count_include_pad) {
  check_window("AvgPool2d", kernel_size, this->stride, padding);
}

Tensor AvgPool2d::forward(const Tensor& input) {
  return avg_pool2d(input, kernel_size, stride, padding, ceil_mode, count_include_pad);
}

std::shared_ptr<Module> AvgPool2d::clone() const {
  return clone_as<AvgPool2d>(kernel_size, stride, padding, ceil_mode, count_include_pad);
}

std::string AvgPool2d::extra_repr() const {
  return "kernel_size=" + kernel_size.str() + ", stride=" + stride.str() + ", padding=" + padding.str() +
         ", ceil_mode=" + flag(ceil_mode) + ", count_include_pad=" + flag(count_include_pad);
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2 output_size) : output_size(output_size) {
  EMBER_CHECK(output_size.h > 0 && output_size.w > 0,
              "AdaptiveAvgPool2d: output_size " << output_size.str() << " must be positive");
}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) { return adaptive_avg_pool2d(input, output_size); }

std::shared_ptr<Module> AdaptiveAvgPool2d::clone() const { return clone_as<AdaptiveAvgPool2d>(output_size); }

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + output_size.str(); }

}  // namespace ember::nn
