// batch_norm: checks, the running-statistics update, dispatch to the
// kernels (ember/core/ops/batch_norm_kernels.h), and backward.
//
// Backward runs the fused kernel; under create_graph it is composed from
// recorded ops instead (the statistics recomputed from the saved input), so
// higher-order gradients are right. The running statistics are buffers, not
// inputs of the graph: no gradient flows into them. A half input with float32
// parameters and statistics is normalized by the kernels in float32 as it
// is (no cast of it or of its gradient): y and dx in its dtype, the
// parameters' gradients in float32; the composed backward works on a
// float32 copy of it. A channels-last input gives a channels-last output
// and input gradient.
#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/batch_norm_kernels.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

KernelStub<BatchNormKernelFn> batch_norm_forward_stub("batch_norm");
KernelStub<BatchNormKernelFn> batch_norm_backward_stub("batch_norm_backward");

namespace {

using detail::describe;

void check_channel_tensor(const char* what, const Tensor& t, const Tensor& x, DType param_dtype) {
  if (!t.defined()) return;
  EMBER_CHECK(t.dim() == 1 && t.size(0) == x.size(1),
              "batch_norm: " << what << " must have shape [" << x.size(1) << "] (the channels of the input of shape "
                             << shape_str(x.shape()) << "), but got " << shape_str(t.shape()));
  EMBER_CHECK(t.dtype() == param_dtype && t.device() == x.device(),
              "batch_norm: " << what << " is " << describe(t) << " but the input is " << describe(x)
                             << "; convert it with .to(device, dtype)");
}

// Dims reduced per channel: every dim but 1.
Shape reduce_dims(int64_t ndim) {
  Shape dims{0};
  for (int64_t d = 2; d < ndim; ++d) dims.push_back(d);
  return dims;
}

// (C) -> (1, C, 1, ...) to broadcast against the input.
Tensor per_channel(const Tensor& t, int64_t ndim) {
  Shape s(size_t(ndim), 1);
  s[1] = t.size(0);
  return t.reshape(s);
}

// The backward formulas of ember/core/ops/batch_norm_kernels.h as recorded ops.
TensorList composed_backward(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& save_mean,
                             const Tensor& save_invstd, bool training, double eps) {
  const int64_t nd = x.dim();
  Shape dims = reduce_dims(nd);
  Tensor mean, invstd;
  if (training) {
    mean = x.mean(dims, true);
    invstd = rsqrt(square(x - mean).mean(dims, true) + eps);
  } else {
    mean = per_channel(save_mean.to(x.dtype()), nd);
    invstd = per_channel(save_invstd.to(x.dtype()), nd);
  }
  Tensor xhat = (x - mean) * invstd;
  Tensor gxhat = w.defined() ? gy * per_channel(w, nd) : gy;
  Tensor dx =
      training ? invstd * (gxhat - gxhat.mean(dims, true) - xhat * (gxhat * xhat).mean(dims, true)) : gxhat * invstd;
  return {dx, (gy * xhat).sum(dims), gy.sum(dims)};
}

// The dtype of the parameters and statistics: the input's, or float32 for
// a float16/bfloat16 input whose given parameters and statistics are all
// float32 (under autocast, or in a model cast to half with its BatchNorm
// kept in float32): such an input is normalized in float32 and returned in
// its own dtype; the input's gradient comes back in its dtype, the
// parameters' in float32.
DType param_dtype_for(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                      const Tensor& bias) {
  if (input.dtype() != DType::Float16 && input.dtype() != DType::BFloat16) return input.dtype();
  bool any = false, all_float32 = true;
  for (const Tensor* t : {&weight, &bias, &running_mean, &running_var}) {
    if (!t->defined()) continue;
    any = true;
    all_float32 = all_float32 && t->dtype() == DType::Float32;
  }
  return any && all_float32 ? DType::Float32 : input.dtype();
}

// The product of the dims after C (1 for a 2-D input).
int64_t inner_size(const Tensor& x) {
  int64_t inner = 1;
  for (int64_t d = 2; d < x.dim(); ++d) inner *= x.size(d);
  return inner;
}

// batch_norm's argument checks; returns the parameters' dtype.
DType check_batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                       const Tensor& bias, bool training, const Tensor& num_batches_tracked) {
  EMBER_CHECK(input.defined(), "batch_norm: got an undefined input");
  EMBER_CHECK(input.dim() >= 2, "batch_norm: expected an input of shape (N, C, *) with at least 2 dims, but got shape "
                                    << shape_str(input.shape()));
  EMBER_CHECK(is_floating(input.dtype()),
              "batch_norm: expected a floating input, but got " << describe(input) << "; convert with .to(dtype)");
  const DType param_dtype = param_dtype_for(input, running_mean, running_var, weight, bias);
  check_channel_tensor("weight", weight, input, param_dtype);
  check_channel_tensor("bias", bias, input, param_dtype);
  check_channel_tensor("running_mean", running_mean, input, param_dtype);
  check_channel_tensor("running_var", running_var, input, param_dtype);
  EMBER_CHECK(training || (running_mean.defined() && running_var.defined()),
              "batch_norm: eval mode (training=false) normalizes with running_mean and running_var, so both must be "
              "given (input of shape "
                  << shape_str(input.shape()) << ")");
  if (training && num_batches_tracked.defined()) {
    EMBER_CHECK(num_batches_tracked.dtype() == DType::Int64 && num_batches_tracked.dim() == 0 &&
                    num_batches_tracked.device() == input.device(),
                "batch_norm: num_batches_tracked must be a () int64 tensor on the input's device, but got "
                    << describe(num_batches_tracked) << " for input " << describe(input));
  }
  const int64_t n = input.size(0), inner = inner_size(input);
  EMBER_CHECK(!training || n * inner > 1,
              "batch_norm: expected more than 1 value per channel when training, but got "
              "an input of shape "
                  << shape_str(input.shape()) << " (" << n * inner << " per channel)");
  return param_dtype;
}

// The forward kernel's arguments for x, dense in `format` (a channels-last
// input is normalized in its layout: as (N*H*W, C, 1)), and the dense
// running statistics rm and rv (read in eval, updated in training).
BatchNormArgs forward_args(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& rm, const Tensor& rv,
                           const Tensor& y, const Tensor& save_mean, const Tensor& save_invstd, DType param_dtype,
                           MemoryFormat format, bool training, double momentum, double eps) {
  const bool channels_last = format == MemoryFormat::ChannelsLast;
  const int64_t n = x.size(0), c = x.size(1), inner = inner_size(x);
  BatchNormArgs a;
  a.device = x.device().index;
  a.dtype = x.dtype();
  a.param_dtype = param_dtype;
  a.n = channels_last ? n * inner : n;
  a.c = c;
  a.inner = channels_last ? 1 : inner;
  a.training = training;
  a.momentum = momentum;
  a.eps = eps;
  a.input = x.data_ptr();
  a.weight = w.defined() ? w.data_ptr() : nullptr;
  a.bias = b.defined() ? b.data_ptr() : nullptr;
  a.running_mean = training && rm.defined() ? rm.data_ptr() : nullptr;
  a.running_var = training && rv.defined() ? rv.data_ptr() : nullptr;
  if (!training) {
    a.running_mean = rm.data_ptr();
    a.running_var = rv.data_ptr();
  }
  a.output = y.data_ptr();
  a.save_mean = save_mean.data_ptr();
  a.save_invstd = save_invstd.data_ptr();
  return a;
}

// After a training forward that ran the kernel: the running statistics the
// kernel updated in their dense copies (rm, rv) are written back to the
// given ones where those were strided; otherwise only their version moves.
void write_back_running_stats(const Tensor& running_mean, const Tensor& rm, const Tensor& running_var,
                              const Tensor& rv) {
  NoGradGuard no_grad;
  for (auto [stat, dense] : {std::pair{running_mean, rm}, std::pair{running_var, rv}}) {
    if (!stat.defined()) continue;
    if (dense.is_same(stat)) stat.storage()->bump_version();
    else stat.copy_(dense);
  }
}

// The backward kernel on gradient g of the forward of `forward` (its
// arguments), with the saved input xv and weight wv; a gradient is computed
// only where need_* says so.
TensorList fused_backward(const BatchNormArgs& forward, const Tensor& g, const Tensor& xv, const Tensor& wv,
                          MemoryFormat format, DType param_dtype, bool need_x, bool need_w, bool need_b) {
  const int64_t c = forward.c;
  Tensor gy = g.contiguous(format), xd = xv.detach().contiguous(format);
  Tensor wd = wv.defined() ? wv.detach().contiguous() : Tensor();
  Tensor dx = need_x ? empty(xd.shape(), xd.dtype(), xd.device(), format) : Tensor();
  Tensor dw = need_w ? empty({c}, param_dtype, xd.device()) : Tensor();
  Tensor db = need_b ? empty({c}, param_dtype, xd.device()) : Tensor();
  BatchNormArgs ba = forward;
  ba.input = xd.data_ptr();
  ba.weight = wd.defined() ? wd.data_ptr() : nullptr;
  ba.bias = nullptr;
  ba.running_mean = nullptr;
  ba.running_var = nullptr;
  ba.output = nullptr;
  ba.num_batches_tracked = nullptr;
  ba.grad_output = gy.data_ptr();
  ba.grad_input = need_x ? dx.data_ptr() : nullptr;
  ba.grad_weight = need_w ? dw.data_ptr() : nullptr;
  ba.grad_bias = need_b ? db.data_ptr() : nullptr;
  if (xd.numel() > 0) {
    batch_norm_backward_stub(xd.device().type)(ba);
  } else {
    if (need_w) dw.zero_();
    if (need_b) db.zero_();
  }
  return TensorList{dx, dw, db};
}

// Records BatchNormBackward for y: the fused kernel, or under create_graph
// the composed formulas.
void record_backward(Tensor& y, const Tensor& input, const Tensor& weight, const Tensor& bias, const BatchNormArgs& a,
                     const Tensor& save_mean, const Tensor& save_invstd, DType param_dtype, MemoryFormat format,
                     bool training, double eps) {
  autograd::SavedTensor sx(input), sw(weight);
  bool need_x = input.requires_grad(), need_w = weight.defined() && weight.requires_grad(),
       need_b = bias.defined() && bias.requires_grad();
  autograd::record("BatchNormBackward", {&y}, {input, weight, bias}, [=](const TensorList& g) {
    const char* name = "BatchNormBackward";
    Tensor xv = sx.unpack(name), wv = sw.defined() ? sw.unpack(name) : Tensor();
    if (GradMode::is_enabled()) {
      // In the parameters' dtype: a half input's composed backward runs on
      // its float32 copy, and dx comes back in its own dtype.
      const DType in_dtype = xv.dtype();
      TensorList d =
          composed_backward(g[0].to(param_dtype), xv.to(param_dtype), wv, save_mean, save_invstd, training, eps);
      return TensorList{need_x ? d[0].to(in_dtype) : Tensor(), need_w ? d[1] : Tensor(), need_b ? d[2] : Tensor()};
    }
    return fused_backward(a, g[0], xv, wv, format, param_dtype, need_x, need_w, need_b);
  });
}

}  // namespace

Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight,
                  const Tensor& bias, bool training, double momentum, double eps, const Tensor& num_batches_tracked) {
  const DType param_dtype =
      check_batch_norm(input, running_mean, running_var, weight, bias, training, num_batches_tracked);
  const bool count = training && num_batches_tracked.defined();

  const MemoryFormat format = input.suggest_memory_format();
  Tensor x = input.detach().contiguous(format);
  Tensor w = weight.defined() ? weight.detach().contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.detach().contiguous() : Tensor();
  // The kernel updates the running statistics in place; a strided one is
  // updated through a dense copy written back.
  auto dense_stat = [](const Tensor& t) { return t.defined() && !t.is_contiguous() ? t.detach().contiguous() : t; };
  Tensor rm = dense_stat(running_mean), rv = dense_stat(running_var);
  const int64_t c = input.size(1);
  DType stats = batch_norm_stats_dtype(x.dtype());
  Tensor save_mean = empty({c}, stats, x.device()), save_invstd = empty({c}, stats, x.device());
  Tensor y = empty(x.shape(), x.dtype(), x.device(), format);

  BatchNormArgs a =
      forward_args(x, w, b, rm, rv, y, save_mean, save_invstd, param_dtype, format, training, momentum, eps);
  if (count && x.numel() > 0) a.num_batches_tracked = static_cast<int64_t*>(num_batches_tracked.data_ptr());
  if (x.numel() > 0) batch_norm_forward_stub(x.device().type)(a);
  if (count) {
    NoGradGuard no_grad;
    if (x.numel() > 0) num_batches_tracked.storage()->bump_version();
    else Tensor(num_batches_tracked).add_(1);
  }
  if (training && x.numel() > 0) write_back_running_stats(running_mean, rm, running_var, rv);
  if (autograd::needs_grad(input, weight, bias)) {
    record_backward(y, input, weight, bias, a, save_mean, save_invstd, param_dtype, format, training, eps);
  }
  return y;
}

}  // namespace ember
