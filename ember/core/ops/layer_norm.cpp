// layer_norm: checks, dispatch to the fused kernels, and its backward.
#include "ember/core/autocast_state.h"
#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/layer_norm_args.h"
#include "ember/core/ops/layer_norm_kernels.h"

namespace ember {

KernelStub<LayerNormKernelFn> layer_norm_forward_stub("layer_norm");
KernelStub<LayerNormKernelFn> layer_norm_backward_stub("layer_norm_backward");

namespace {

void check_param(const char* what, const Tensor& p, const Tensor& x, const Shape& normalized_shape) {
  if (!p.defined()) return;
  EMBER_CHECK(p.shape() == normalized_shape, "layer_norm: " << what << " has shape " << shape_str(p.shape())
                                                            << " but normalized_shape is "
                                                            << shape_str(normalized_shape));
  EMBER_CHECK(p.device() == x.device() && p.dtype() == x.dtype(),
              "layer_norm: " << what << " is " << dtype_name(p.dtype()) << " on " << p.device() << " but the input is "
                             << dtype_name(x.dtype()) << " on " << x.device());
}

}  // namespace

namespace detail {

LayerNormForward layer_norm_forward(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                                    const Tensor& bias, double eps, DType y_dtype) {
  LayerNormForward f;
  f.x = x.detach().contiguous();
  f.weight = weight.defined() ? weight.detach().contiguous() : Tensor();
  f.bias = bias.defined() ? bias.detach().contiguous() : Tensor();
  int64_t cols = 1;
  for (int64_t s : normalized_shape) cols *= s;
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  const DType stats = layer_norm_stats_dtype(x.dtype());
  f.y = empty(x.shape(), y_dtype, x.device());
  f.mean = empty({rows}, stats, x.device());
  f.rstd = empty({rows}, stats, x.device());
  LayerNormArgs& a = f.args;
  a.device = x.device().index;
  a.rows = rows;
  a.cols = cols;
  a.dtype = x.dtype();
  a.eps = eps;
  a.x = f.x.data_ptr();
  a.weight = f.weight.defined() ? f.weight.data_ptr() : nullptr;
  a.bias = f.bias.defined() ? f.bias.data_ptr() : nullptr;
  a.y = f.y.data_ptr();
  a.y_dtype = y_dtype;
  a.mean = f.mean.data_ptr();
  a.rstd = f.rstd.data_ptr();
  return f;
}

LayerNormArgs layer_norm_backward(LayerNormArgs forward, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                  const Tensor& rstd, const Tensor& grad_y, const Tensor& grad_x,
                                  const Tensor& grad_weight, const Tensor& grad_bias) {
  LayerNormArgs b = forward;
  b.x = x.data_ptr();
  b.weight = weight.defined() ? weight.data_ptr() : nullptr;
  b.bias = nullptr;
  b.y = nullptr;
  b.mean = mean.data_ptr();
  b.rstd = rstd.data_ptr();
  b.grad_y = grad_y.data_ptr();
  b.y_dtype = grad_y.dtype();
  b.grad_x = grad_x.data_ptr();
  b.grad_weight = grad_weight.defined() ? grad_weight.data_ptr() : nullptr;
  b.grad_bias = grad_bias.defined() ? grad_bias.data_ptr() : nullptr;
  b.residual = nullptr;
  b.sum = nullptr;
  b.grad_sum = nullptr;
  b.grad_residual = nullptr;
  return b;
}

}  // namespace detail

Tensor layer_norm(const Tensor& x_in, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor cx = x_in, cw = weight, cb = bias;
    if (autocast_state::float32_inputs({&cx, &cw, &cb})) {
      return layer_norm(cx, normalized_shape, cw, cb, eps);
    }
  }
  int64_t k = int64_t(normalized_shape.size());
  EMBER_CHECK(k >= 1 && x_in.dim() >= k && Shape(x_in.shape().end() - k, x_in.shape().end()) == normalized_shape,
              "layer_norm: normalized_shape " << shape_str(normalized_shape)
                                              << " must match the last dims of the input of shape "
                                              << shape_str(x_in.shape()));
  EMBER_CHECK(is_floating(x_in.dtype()), "layer_norm: expected a floating input, got " << dtype_name(x_in.dtype()));
  check_param("weight", weight, x_in, normalized_shape);
  check_param("bias", bias, x_in, normalized_shape);

  detail::LayerNormForward f = detail::layer_norm_forward(x_in, normalized_shape, weight, bias, eps, x_in.dtype());
  const LayerNormArgs& a = f.args;
  const Tensor mean = f.mean, rstd = f.rstd;
  Tensor y = f.y;
  const int64_t rows = a.rows;
  if (rows > 0) layer_norm_forward_stub(x_in.device().type)(a);

  if (autograd::needs_grad(x_in, weight, bias)) {
    autograd::SavedTensor sx(x_in), sw(weight);
    bool need_w = weight.defined() && weight.requires_grad(), need_b = bias.defined() && bias.requires_grad();
    Shape xs = x_in.shape();
    autograd::record("LayerNormBackward", {&y}, {x_in, weight, bias}, [=](const TensorList& g) {
      EMBER_CHECK(!GradMode::is_enabled(),
                  "layer_norm: double backward (create_graph=true) is not supported; its "
                  "backward is a fused kernel without a recorded graph");
      Tensor xv = sx.unpack("LayerNormBackward").detach().contiguous();
      Tensor wv = sw.defined() ? sw.unpack("LayerNormBackward").detach().contiguous() : Tensor();
      Tensor gy = g[0].contiguous();
      Tensor dx = empty(xs, xv.dtype(), xv.device());
      Tensor dw = need_w ? empty(normalized_shape, xv.dtype(), xv.device()) : Tensor();
      Tensor db = need_b ? empty(normalized_shape, xv.dtype(), xv.device()) : Tensor();
      const LayerNormArgs ba = detail::layer_norm_backward(a, xv, wv, mean, rstd, gy, dx, dw, db);
      if (rows > 0) {
        layer_norm_backward_stub(xv.device().type)(ba);
      } else {
        if (need_w) dw.zero_();
        if (need_b) db.zero_();
      }
      return TensorList{dx, dw, db};
    });
  }
  return y;
}

}  // namespace ember
