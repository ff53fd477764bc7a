// conv2d: shape and parameter checks, dispatch to the convolution kernels
// (ember/core/ops/conv_kernels.h), and its backward.
//
// The two backward computations are ops of their own here, each recording a
// node when its inputs need grad, so that higher-order gradients
// (create_graph) close over three functions and their adjoints:
//   conv(x, w)                 d/dx: backward_input(gy, w)   d/dw: backward_weight(gy, x)
//   backward_input(gy, w)      d/dgy: conv(v, w)             d/dw: backward_weight(gy, v)
//   backward_weight(gy, x)     d/dgy: conv(x, u)             d/dx: backward_input(gy, u)
// (v, u: the gradient flowing into the backward op's result), and the bias
// gradient, sum(gy) over N, H, W, whose gradient broadcasts v back. Without
// create_graph, the weight and bias gradients come from one kernel call.
#include <sstream>

#include "ember/core/autocast_state.h"
#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/conv_kernels.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

KernelStub<ConvKernelFn> conv2d_forward_stub("conv2d");
KernelStub<ConvKernelFn> conv2d_backward_input_stub("conv2d_backward_input");
KernelStub<ConvKernelFn> conv2d_backward_weight_stub("conv2d_backward_weight");

using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

namespace {

using detail::describe;

struct ConvParams {
  Int2 stride, padding, dilation;
  int64_t groups;
};

std::string pair_str(Int2 v) {
  std::ostringstream s;
  s << "(" << v[0] << ", " << v[1] << ")";
  return s.str();
}

std::string params_str(const ConvParams& p) {
  return "stride " + pair_str(p.stride) + ", padding " + pair_str(p.padding) + ", dilation " + pair_str(p.dilation) +
         ", groups " + std::to_string(p.groups);
}

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t pad, int64_t d) {
  return (in + 2 * pad - d * (k - 1) - 1) / s + 1;
}

void check_conv(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p) {
  EMBER_CHECK(x.defined() && w.defined(), "conv2d: input and weight must be defined tensors");
  EMBER_CHECK(x.dim() == 4, "conv2d: expected a 4-D input (N, C_in, H, W), but got shape "
                                << shape_str(x.shape()) << "; add a batch dim with unsqueeze(0)");
  EMBER_CHECK(w.dim() == 4,
              "conv2d: expected a 4-D weight (C_out, C_in / groups, kH, kW), but got shape " << shape_str(w.shape()));
  EMBER_CHECK(p.groups >= 1, "conv2d: groups must be positive, got " << p.groups);
  for (int i = 0; i < 2; ++i) {
    EMBER_CHECK(p.stride[i] >= 1 && p.dilation[i] >= 1 && p.padding[i] >= 0,
                "conv2d: stride and dilation must be positive and padding non-negative, got " << params_str(p));
  }
  EMBER_CHECK(w.size(0) >= 1 && w.size(1) >= 1 && w.size(2) >= 1 && w.size(3) >= 1,
              "conv2d: weight of shape " << shape_str(w.shape()) << " has a zero-size dim");
  EMBER_CHECK(w.size(0) % p.groups == 0, "conv2d: weight of shape " << shape_str(w.shape()) << " has " << w.size(0)
                                                                    << " output channels, which groups=" << p.groups
                                                                    << " does not divide");
  EMBER_CHECK(x.size(1) == w.size(1) * p.groups, "conv2d: input of shape "
                                                     << shape_str(x.shape()) << " has " << x.size(1)
                                                     << " channels, but weight of shape " << shape_str(w.shape())
                                                     << " with groups=" << p.groups << " expects "
                                                     << w.size(1) * p.groups << " (weight.size(1) * groups)");
  for (int i = 0; i < 2; ++i) {
    int64_t span = p.dilation[i] * (w.size(2 + i) - 1) + 1, padded = x.size(2 + i) + 2 * p.padding[i];
    EMBER_CHECK(span <= padded, "conv2d: the kernel of shape "
                                    << shape_str(w.shape()) << " spans " << span << " " << (i == 0 ? "rows" : "columns")
                                    << " with " << params_str(p) << ", more than the padded input (" << padded
                                    << ") of shape " << shape_str(x.shape())
                                    << "; use more padding or a smaller kernel or dilation");
  }
  if (b.defined()) {
    EMBER_CHECK(b.dim() == 1 && b.size(0) == w.size(0),
                "conv2d: bias must have shape [" << w.size(0) << "] (C_out of weight " << shape_str(w.shape())
                                                 << "), but got " << shape_str(b.shape()));
  }
  for (const Tensor* t : {&w, &b}) {
    if (!t->defined()) continue;
    EMBER_CHECK(t->device() == x.device() && t->dtype() == x.dtype(),
                "conv2d: expected input, weight and bias on one device with one dtype, but got input "
                    << describe(x) << " and " << (t == &w ? "weight " : "bias ") << describe(*t)
                    << "; convert with .to(device, dtype)");
  }
  EMBER_CHECK(is_floating(x.dtype()),
              "conv2d: expected a floating dtype, but got input " << describe(x) << "; convert with .to(dtype)");
}

ConvArgs make_args(const Shape& xs, const Shape& ws, const ConvParams& p, DType dtype, Device device,
                   MemoryFormat format) {
  ConvArgs a;
  a.device = device.index;
  a.dtype = dtype;
  a.channels_last = format == MemoryFormat::ChannelsLast;
  a.n = xs[0];
  a.c_in = xs[1];
  a.h = xs[2];
  a.w = xs[3];
  a.c_out = ws[0];
  a.kernel_h = ws[2];
  a.kernel_w = ws[3];
  a.stride_h = p.stride[0];
  a.stride_w = p.stride[1];
  a.padding_h = p.padding[0];
  a.padding_w = p.padding[1];
  a.dilation_h = p.dilation[0];
  a.dilation_w = p.dilation[1];
  a.groups = p.groups;
  a.out_h = out_size(a.h, a.kernel_h, a.stride_h, a.padding_h, a.dilation_h);
  a.out_w = out_size(a.w, a.kernel_w, a.stride_w, a.padding_w, a.dilation_w);
  return a;
}

// PyTorch's rule: channels-last when the input or the weight is, except
// float64 on CUDA, which PyTorch's cuDNN path also keeps in NCHW.
MemoryFormat conv_format(const Tensor& x, const Tensor& w) {
  const bool cl = x.suggest_memory_format() == MemoryFormat::ChannelsLast ||
                  w.suggest_memory_format() == MemoryFormat::ChannelsLast;
  const bool nchw_only = x.dtype() == DType::Float64 && x.is_cuda();
  return cl && !nchw_only ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
}

Tensor dense(const Tensor& t, MemoryFormat format) { return t.defined() ? t.detach().contiguous(format) : Tensor(); }

// The weight and bias gradients from one kernel call, recording nothing;
// either may be skipped (x is only read, and may be undefined, without want_w).
std::pair<Tensor, Tensor> weight_and_bias_grads(const Tensor& gy_in, const Tensor& x_in, const Shape& xs,
                                                const Shape& ws, const ConvParams& p, bool want_w, bool want_b,
                                                MemoryFormat format) {
  Tensor gy = dense(gy_in, format), x = dense(x_in, format);
  ConvArgs a = make_args(xs, ws, p, gy.dtype(), gy.device(), format);
  Tensor dw = want_w ? empty(ws, gy.dtype(), gy.device(), format) : Tensor();
  Tensor db = want_b ? empty({ws[0]}, gy.dtype(), gy.device()) : Tensor();
  if (a.n == 0) {
    if (want_w) dw.zero_();
    if (want_b) db.zero_();
    return {dw, db};
  }
  a.input = want_w ? x.data_ptr() : nullptr;
  a.grad_output = gy.data_ptr();
  a.grad_weight = want_w ? dw.data_ptr() : nullptr;
  a.grad_bias = want_b ? db.data_ptr() : nullptr;
  conv2d_backward_weight_stub(gy.device().type)(a);
  return {dw, db};
}

Tensor conv_forward(const Tensor& x, const Tensor& w, const Tensor& b, const ConvParams& p);
Tensor conv_backward_weight(const Tensor& gy, const Tensor& x, const Shape& ws, const ConvParams& p,
                            MemoryFormat format);

// The backward ops compute in the format of the forward they belong to.
Tensor conv_backward_input(const Tensor& gy_in, const Tensor& w_in, const Shape& xs, const ConvParams& p,
                           MemoryFormat format) {
  Tensor gy = dense(gy_in, format), w = dense(w_in, format);
  ConvArgs a = make_args(xs, w.shape(), p, w.dtype(), w.device(), format);
  Tensor dx = empty(xs, w.dtype(), w.device(), format);
  if (a.n > 0) {
    a.weight = w.data_ptr();
    a.grad_output = gy.data_ptr();
    a.grad_input = dx.data_ptr();
    conv2d_backward_input_stub(w.device().type)(a);
  }
  if (needs_grad(gy_in, w_in)) {
    SavedTensor sgy(gy_in), sw(w_in);
    Shape ws = w.shape();
    bool need_gy = gy_in.requires_grad(), need_w = w_in.requires_grad();
    record("Conv2dBackwardInputBackward", {&dx}, {gy_in, w_in}, [=](const TensorList& g) {
      const char* name = "Conv2dBackwardInputBackward";
      Tensor dgy = need_gy ? conv_forward(g[0], sw.unpack(name), {}, p) : Tensor();
      Tensor dw = need_w ? conv_backward_weight(sgy.unpack(name), g[0], ws, p, format) : Tensor();
      return TensorList{dgy, dw};
    });
  }
  return dx;
}

Tensor conv_backward_weight(const Tensor& gy, const Tensor& x, const Shape& ws, const ConvParams& p,
                            MemoryFormat format) {
  Tensor dw = weight_and_bias_grads(gy, x, x.shape(), ws, p, true, false, format).first;
  if (needs_grad(gy, x)) {
    SavedTensor sgy(gy), sx(x);
    Shape xs = x.shape();
    bool need_gy = gy.requires_grad(), need_x = x.requires_grad();
    record("Conv2dBackwardWeightBackward", {&dw}, {gy, x}, [=](const TensorList& g) {
      const char* name = "Conv2dBackwardWeightBackward";
      Tensor dgy = need_gy ? conv_forward(sx.unpack(name), g[0], {}, p) : Tensor();
      Tensor dx = need_x ? conv_backward_input(sgy.unpack(name), g[0], xs, p, format) : Tensor();
      return TensorList{dgy, dx};
    });
  }
  return dw;
}

// The bias gradient (the sum of gy over N, H, W) as an op: its own gradient
// broadcasts back.
Tensor conv_backward_bias(const Tensor& gy, const Shape& xs, const Shape& ws, const ConvParams& p,
                          MemoryFormat format) {
  Tensor db = weight_and_bias_grads(gy, Tensor(), xs, ws, p, false, true, format).second;
  if (needs_grad(gy)) {
    Shape ys = gy.shape();
    record("Conv2dBackwardBiasBackward", {&db}, {gy}, [ys](const TensorList& g) {
      return TensorList{g[0].reshape({1, ys[1], 1, 1}).expand(ys).contiguous()};
    });
  }
  return db;
}

Tensor conv_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const ConvParams& p) {
  const MemoryFormat format = conv_format(x_in, w_in);
  Tensor x = dense(x_in, format), w = dense(w_in, format), b = dense(b_in, MemoryFormat::Contiguous);
  ConvArgs a = make_args(x.shape(), w.shape(), p, x.dtype(), x.device(), format);
  Tensor y = empty({a.n, a.c_out, a.out_h, a.out_w}, x.dtype(), x.device(), format);
  if (a.n > 0) {
    a.input = x.data_ptr();
    a.weight = w.data_ptr();
    a.bias = b.defined() ? b.data_ptr() : nullptr;
    a.output = y.data_ptr();
    conv2d_forward_stub(x.device().type)(a);
  }
  if (needs_grad(x_in, w_in, b_in)) {
    bool need_x = x_in.requires_grad(), need_w = w_in.requires_grad(), need_b = b_in.defined() && b_in.requires_grad();
    SavedTensor sx = need_w ? SavedTensor(x_in) : SavedTensor();
    SavedTensor sw = need_x ? SavedTensor(w_in) : SavedTensor();
    Shape xs = x.shape(), ws = w.shape();
    record("Conv2dBackward", {&y}, {x_in, w_in, b_in}, [=](const TensorList& g) {
      const char* name = "Conv2dBackward";
      Tensor dx, dw, db;
      if (need_x) dx = conv_backward_input(g[0], sw.unpack(name), xs, p, format);
      if (GradMode::is_enabled()) {  // create_graph: differentiable pieces
        if (need_w) dw = conv_backward_weight(g[0], sx.unpack(name), ws, p, format);
        if (need_b) db = conv_backward_bias(g[0], xs, ws, p, format);
      } else if (need_w || need_b) {
        std::tie(dw, db) =
            weight_and_bias_grads(g[0], need_w ? sx.unpack(name) : Tensor(), xs, ws, p, need_w, need_b, format);
      }
      return TensorList{dx, dw, db};
    });
  }
  return y;
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, Size2 stride, Size2 padding,
              Size2 dilation, int64_t groups) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor ci = input, cw = weight, cb = bias;
    if (autocast_state::lower_precision_inputs({&ci, &cw, &cb})) {
      return conv2d(ci, cw, cb, stride, padding, dilation, groups);
    }
  }
  ConvParams p{stride, padding, dilation, groups};
  check_conv(input, weight, bias, p);
  return conv_forward(input, weight, bias, p);
}

}  // namespace ember
