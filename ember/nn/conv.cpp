// Conv2d: option checks, PyTorch's initialization, forward through
// ember::conv2d.
#include "ember/nn/conv.h"

#include <cmath>

#include "ember/core/ops.h"
#include "ember/nn/init.h"

namespace ember::nn {

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Size2 stride, Size2 padding,
               Size2 dilation, int64_t groups, bool bias)
    : in_channels(in_channels),
      out_channels(out_channels),
      kernel_size(kernel_size),
      stride(stride),
      padding(padding),
      dilation(dilation),
      groups(groups) {
  EMBER_CHECK(groups > 0, "Conv2d: groups must be positive, got " << groups);
  EMBER_CHECK(in_channels > 0 && out_channels > 0 && in_channels % groups == 0 && out_channels % groups == 0,
              "Conv2d: in_channels (" << in_channels << ") and out_channels (" << out_channels
                                      << ") must be positive multiples of groups (" << groups << ")");
  EMBER_CHECK(kernel_size.h > 0 && kernel_size.w > 0 && stride.h > 0 && stride.w > 0 && dilation.h > 0 &&
                  dilation.w > 0 && padding.h >= 0 && padding.w >= 0,
              "Conv2d: kernel_size " << kernel_size.str() << ", stride " << stride.str() << " and dilation "
                                     << dilation.str() << " must be positive and padding " << padding.str()
                                     << " non-negative");
  weight = register_parameter("weight", empty({out_channels, in_channels / groups, kernel_size.h, kernel_size.w}));
  if (bias) this->bias = register_parameter("bias", empty({out_channels}));
  reset_parameters();
}

void Conv2d::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    init::uniform_(bias, -1.0 / std::sqrt(double(fan_in)), 1.0 / std::sqrt(double(fan_in)));
  }
}

Tensor Conv2d::forward(const Tensor& input) { return conv2d(input, weight, bias, stride, padding, dilation, groups); }

std::shared_ptr<Module> Conv2d::clone() const {
  return clone_as<Conv2d>(in_channels, out_channels, kernel_size, stride, padding, dilation, groups, bias.defined());
}

std::string Conv2d::extra_repr() const {
  std::string s = std::to_string(in_channels) + ", " + std::to_string(out_channels) +
                  ", kernel_size=" + kernel_size.str() + ", stride=" + stride.str();
  if (!(padding == Size2(0))) s += ", padding=" + padding.str();
  if (!(dilation == Size2(1))) s += ", dilation=" + dilation.str();
  if (groups != 1) s += ", groups=" + std::to_string(groups);
  if (!bias.defined()) s += ", bias=false";
  return s;
}

}  // namespace ember::nn
