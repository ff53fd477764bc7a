// max_pool2d, avg_pool2d, adaptive_avg_pool2d: output sizes and parameter
// checks as PyTorch, dispatch to the pooling kernels
// (ember/core/ops/pool_kernels.h), and backward.
//
// Each backward is an op of its own that records a node when the incoming
// gradient needs grad (create_graph), so higher-order gradients work: the
// backward of an average pool is linear in the gradient, and its own
// gradient is the average pool again; max pooling's backward scatters to
// the saved argmax positions, and its gradient gathers from them.
#include <sstream>

#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/pool_kernels.h"

namespace ember {

KernelStub<PoolKernelFn> pool2d_forward_stub("pool2d");
KernelStub<PoolKernelFn> pool2d_backward_stub("pool2d_backward");

using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

namespace {

struct PoolParams {
  PoolOp op;
  Int2 kernel{1, 1}, stride{1, 1}, padding{0, 0}, dilation{1, 1};
  bool count_include_pad = true;
  Int2 out{0, 0};
};

const char* op_name(PoolOp op) {
  switch (op) {
    case PoolOp::Max: return "max_pool2d";
    case PoolOp::Avg: return "avg_pool2d";
    case PoolOp::AdaptiveAvg: return "adaptive_avg_pool2d";
  }
  return "pool2d";
}

const char* backward_name(PoolOp op) {
  switch (op) {
    case PoolOp::Max: return "MaxPool2dBackward";
    case PoolOp::Avg: return "AvgPool2dBackward";
    case PoolOp::AdaptiveAvg: return "AdaptiveAvgPool2dBackward";
  }
  return "Pool2dBackward";
}

const char* double_backward_name(PoolOp op) {
  switch (op) {
    case PoolOp::Max: return "MaxPool2dBackwardBackward";
    case PoolOp::Avg: return "AvgPool2dBackwardBackward";
    case PoolOp::AdaptiveAvg: return "AdaptiveAvgPool2dBackwardBackward";
  }
  return "Pool2dBackwardBackward";
}

std::string pair_str(Int2 v) {
  std::ostringstream s;
  s << "(" << v[0] << ", " << v[1] << ")";
  return s.str();
}

void check_input(const char* op, const Tensor& x) {
  EMBER_CHECK(x.defined(), op << ": got an undefined input");
  EMBER_CHECK(x.dim() == 4, op << ": expected a 4-D input (N, C, H, W), but got shape " << shape_str(x.shape())
                               << "; add a batch dim with unsqueeze(0)");
  EMBER_CHECK(x.size(2) >= 1 && x.size(3) >= 1,
              op << ": expected an input with non-zero H and W, but got shape " << shape_str(x.shape()));
  EMBER_CHECK(is_floating(x.dtype()), op << ": expected a floating input, but got " << dtype_name(x.dtype())
                                         << " of shape " << shape_str(x.shape()) << "; convert with .to(dtype)");
}

// PyTorch's pooling_output_shape: floor or ceil division, and in ceil mode
// the last window must start inside the input or its left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d, bool ceil_mode) {
  int64_t num = in + 2 * pad - d * (k - 1) - 1 + (ceil_mode ? s - 1 : 0);
  int64_t out = (num >= 0 ? num / s : -((-num + s - 1) / s)) + 1;
  if (ceil_mode && (out - 1) * s >= in + pad) --out;
  return out;
}

// Checks the window parameters and sets p.out.
void window_shape(const Tensor& x, PoolParams& p, bool ceil_mode) {
  const char* op = op_name(p.op);
  std::string params = "kernel_size " + pair_str(p.kernel) + ", stride " + pair_str(p.stride) + ", padding " +
                       pair_str(p.padding) + (p.op == PoolOp::Max ? ", dilation " + pair_str(p.dilation) : "") +
                       (ceil_mode ? ", ceil_mode" : "");
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(p.kernel[i] >= 1 && p.stride[i] >= 1 && p.dilation[i] >= 1,
                op << ": kernel_size, stride and dilation must be positive, got " << params);
    EMBER_CHECK(p.padding[i] >= 0 && p.padding[i] <= p.kernel[i] / 2,
                op << ": padding must be between 0 and half the kernel size, got " << params);
  }
  for (int i = 0; i < 2; ++i) {
    p.out[i] = pooled_size(x.size(2 + i), p.kernel[i], p.stride[i], p.padding[i], p.dilation[i], ceil_mode);
  }
  EMBER_CHECK(p.out[0] >= 1 && p.out[1] >= 1, op << ": input of shape " << shape_str(x.shape()) << " with " << params
                                                 << " gives an output of size " << p.out[0] << " x " << p.out[1]
                                                 << ", which is too small; use a smaller kernel or more padding");
}

PoolArgs make_args(const Shape& xs, const PoolParams& p, DType dtype, Device device, MemoryFormat format) {
  PoolArgs a;
  a.device = device.index;
  a.dtype = dtype;
  a.planes = xs[0] * xs[1];
  a.channels = xs[1];
  a.channels_last = format == MemoryFormat::ChannelsLast;
  a.h = xs[2];
  a.w = xs[3];
  a.out_h = p.out[0];
  a.out_w = p.out[1];
  a.kernel_h = p.kernel[0];
  a.kernel_w = p.kernel[1];
  a.stride_h = p.stride[0];
  a.stride_w = p.stride[1];
  a.padding_h = p.padding[0];
  a.padding_w = p.padding[1];
  a.dilation_h = p.dilation[0];
  a.dilation_w = p.dilation[1];
  a.count_include_pad = p.count_include_pad;
  return a;
}

Shape out_shape(const Shape& xs, const PoolParams& p) { return {xs[0], xs[1], p.out[0], p.out[1]}; }

Tensor pool_forward(const Tensor& x, const PoolParams& p);

// The gradient of the input (shape xs) from gy; indices only for Max. The
// forward's format lays out indices and the result; gy is read as it comes
// when it is dense NCHW or channels-last, else laid out in that format.
Tensor pool_backward(const Tensor& gy_in, const Shape& xs, const PoolParams& p, const Tensor& indices,
                     MemoryFormat format) {
  const bool gy_dense = gy_in.is_contiguous() || gy_in.is_contiguous(MemoryFormat::ChannelsLast);
  Tensor gy = gy_dense ? gy_in.detach() : gy_in.detach().contiguous(format);
  Tensor dx = empty(xs, gy.dtype(), gy.device(), format);
  PoolArgs a = make_args(xs, p, gy.dtype(), gy.device(), format);
  if (a.planes > 0) {
    a.grad_output = gy.data_ptr();
    a.grad_output_channels_last = !gy.is_contiguous();
    a.grad_input = dx.data_ptr();
    a.indices = indices.defined() ? indices.data<int64_t>() : nullptr;
    pool2d_backward_stub(gy.device().type)(p.op, a);
  }
  if (needs_grad(gy_in)) {
    Shape ys = gy.shape();
    record(double_backward_name(p.op), {&dx}, {gy_in}, [=](const TensorList& g) {
      if (p.op != PoolOp::Max) return TensorList{pool_forward(g[0], p)};
      Tensor picked =
          gather(g[0].reshape({xs[0], xs[1], xs[2] * xs[3]}), 2, indices.reshape({ys[0], ys[1], ys[2] * ys[3]}));
      return TensorList{picked.reshape(ys)};
    });
  }
  return dx;
}

// A channels-last input is pooled in its layout, into a channels-last output.
Tensor pool_forward(const Tensor& x_in, const PoolParams& p) {
  const MemoryFormat format = x_in.suggest_memory_format();
  Tensor x = x_in.detach().contiguous(format);
  Shape ys = out_shape(x.shape(), p);
  Tensor y = empty(ys, x.dtype(), x.device(), format);
  Tensor indices = p.op == PoolOp::Max ? empty(ys, DType::Int64, x.device(), format) : Tensor();
  PoolArgs a = make_args(x.shape(), p, x.dtype(), x.device(), format);
  if (a.planes > 0) {
    a.input = x.data_ptr();
    a.output = y.data_ptr();
    a.indices = indices.defined() ? indices.data<int64_t>() : nullptr;
    pool2d_forward_stub(x.device().type)(p.op, a);
  }
  if (needs_grad(x_in)) {
    Shape xs = x.shape();
    record(backward_name(p.op), {&y}, {x_in},
           [=](const TensorList& g) { return TensorList{pool_backward(g[0], xs, p, indices, format)}; });
  }
  return y;
}

}  // namespace

Tensor max_pool2d(const Tensor& input, Size2 kernel_size, OptionalSize2 stride, Size2 padding, Size2 dilation,
                  bool ceil_mode) {
  check_input("max_pool2d", input);
  PoolParams p{PoolOp::Max, kernel_size, stride.value_or(kernel_size), padding, dilation};
  window_shape(input, p, ceil_mode);
  return pool_forward(input, p);
}

Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, OptionalSize2 stride, Size2 padding, bool ceil_mode,
                  bool count_include_pad) {
  check_input("avg_pool2d", input);
  PoolParams p{PoolOp::Avg, kernel_size, stride.value_or(kernel_size), padding, {1, 1}, count_include_pad};
  window_shape(input, p, ceil_mode);
  return pool_forward(input, p);
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size_hw) {
  const Int2 output_size = output_size_hw;
  check_input("adaptive_avg_pool2d", input);
  EMBER_CHECK(output_size[0] >= 1 && output_size[1] >= 1, "adaptive_avg_pool2d: output_size must be positive, got "
                                                              << pair_str(output_size) << " for input of shape "
                                                              << shape_str(input.shape()));
  PoolParams p{PoolOp::AdaptiveAvg};
  p.out = output_size;
  return pool_forward(input, p);
}

}  // namespace ember
