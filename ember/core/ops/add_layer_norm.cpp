// add_layer_norm: the residual add and the layer norm after it as one op
// (contract in ember/core/ops.h): when the fused kernels take the call, one
// forward pass and one backward pass; otherwise the composition.
#include "ember/core/autocast_state.h"
#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/layer_norm_args.h"
#include "ember/core/ops/layer_norm_kernels.h"

namespace ember {

KernelStub<AddLayerNormKernelFn> add_layer_norm_forward_stub("add_layer_norm");
KernelStub<AddLayerNormKernelFn> add_layer_norm_backward_stub("add_layer_norm_backward");

namespace {

constexpr const char* kBackward = "AddLayerNormBackward";

bool is_half(DType t) { return t == DType::Float16 || t == DType::BFloat16; }

// A weight or bias the kernels read as they are: absent, or of x's dtype,
// device and the normalized shape.
bool plain_param(const Tensor& p, const Tensor& x, const Shape& normalized_shape) {
  return !p.defined() || (p.dtype() == x.dtype() && p.device() == x.device() && p.shape() == normalized_shape);
}

// Whether the fused kernels may take the call: one shape, delta of x's dtype
// or half beside a float32 x (so the sum is x's dtype), x the dtype
// layer_norm computes in (float32 under autocast), the normalized output in
// x's or delta's dtype, parameters as they are, and a device with the
// kernels.
bool fused_applies(const Tensor& x, const Tensor& delta, const Shape& normalized_shape, const Tensor& weight,
                   const Tensor& bias, DType normed_dtype) {
  const int64_t k = int64_t(normalized_shape.size());
  if (!x.defined() || !delta.defined() || !is_floating(x.dtype()) || x.shape() != delta.shape() ||
      x.device() != delta.device() || k < 1 || x.dim() < k ||
      Shape(x.shape().end() - k, x.shape().end()) != normalized_shape) {
    return false;
  }
  if (delta.dtype() != x.dtype() && !(x.dtype() == DType::Float32 && is_half(delta.dtype()))) return false;
  if (normed_dtype != x.dtype() && normed_dtype != delta.dtype()) return false;
  if (autocast_state::any_enabled() && x.dtype() != DType::Float32) return false;
  if (!plain_param(weight, x, normalized_shape) || !plain_param(bias, x, normalized_shape)) return false;
  return add_layer_norm_forward_stub.has(x.device().type) && add_layer_norm_backward_stub.has(x.device().type);
}

std::pair<Tensor, Tensor> composed(const Tensor& x, const Tensor& delta, const Shape& normalized_shape,
                                   const Tensor& weight, const Tensor& bias, double eps,
                                   std::optional<DType> normed_dtype) {
  Tensor sum = x + delta;
  Tensor normed = layer_norm(sum, normalized_shape, weight, bias, eps);
  return {sum, normed_dtype ? normed.to(*normed_dtype) : normed};
}

}  // namespace

std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& delta, const Shape& normalized_shape,
                                         const Tensor& weight, const Tensor& bias, double eps,
                                         std::optional<DType> normed_dtype) {
  if (!x.defined() || !fused_applies(x, delta, normalized_shape, weight, bias, normed_dtype.value_or(x.dtype()))) {
    return composed(x, delta, normalized_shape, weight, bias, eps, normed_dtype);
  }
  detail::LayerNormForward f =
      detail::layer_norm_forward(x, normalized_shape, weight, bias, eps, normed_dtype.value_or(x.dtype()));
  const Tensor dc = delta.detach().contiguous(), mean = f.mean, rstd = f.rstd;
  Tensor sum = empty(x.shape(), x.dtype(), x.device()), normed = f.y;
  LayerNormArgs& a = f.args;
  a.residual = dc.data_ptr();
  a.residual_dtype = delta.dtype();
  a.sum = sum.data_ptr();
  if (a.rows == 0 || !add_layer_norm_forward_stub(x.device().type)(a)) {
    return composed(x, delta, normalized_shape, weight, bias, eps, normed_dtype);
  }

  if (autograd::needs_grad({&x, &delta, &weight, &bias})) {
    autograd::SavedTensor saved_sum = autograd::SavedTensor::output(sum), saved_weight(weight);
    const bool need_w = weight.defined() && weight.requires_grad(), need_b = bias.defined() && bias.requires_grad();
    const DType delta_dtype = delta.dtype(), normed_type = normed.dtype();
    // a's mean and rstd point into these tensors: the closure holds them.
    autograd::record(
        kBackward, {&sum, &normed}, {x, delta, weight, bias}, [=, mean = mean, rstd = rstd](const TensorList& g) {
          EMBER_CHECK(!GradMode::is_enabled(),
                      "add_layer_norm: double backward (create_graph=true) is not supported; "
                      "its backward is a fused kernel without a recorded graph");
          if (!g[1].defined()) {  // only the sum's gradient: the add's backward
            return TensorList{g[0], g[0].to(delta_dtype), Tensor(), Tensor()};
          }
          const Tensor sv = saved_sum.unpack(kBackward).detach().contiguous();
          const Tensor wv = saved_weight.defined() ? saved_weight.unpack(kBackward).detach().contiguous() : Tensor();
          const Tensor gy = g[1].to(normed_type).contiguous();
          const Tensor gs = g[0].defined() ? g[0].contiguous() : Tensor();
          Tensor dx = empty(sv.shape(), sv.dtype(), sv.device());
          Tensor dd = delta_dtype == sv.dtype() ? Tensor() : empty(sv.shape(), delta_dtype, sv.device());
          Tensor dw = need_w ? empty(normalized_shape, sv.dtype(), sv.device()) : Tensor();
          Tensor db = need_b ? empty(normalized_shape, sv.dtype(), sv.device()) : Tensor();
          LayerNormArgs ba = detail::layer_norm_backward(a, sv, wv, mean, rstd, gy, dx, dw, db);
          ba.grad_sum = gs.defined() ? gs.data_ptr() : nullptr;
          ba.grad_residual = dd.defined() ? dd.data_ptr() : nullptr;
          if (!add_layer_norm_backward_stub(sv.device().type)(ba)) {
            // The layer norm's own backward (its gradient in the sum's
            // dtype), then the add's.
            layer_norm_backward_stub(sv.device().type)(
                detail::layer_norm_backward(a, sv, wv, mean, rstd, gy.to(sv.dtype()).contiguous(), dx, dw, db));
            if (gs.defined()) dx = dx + gs;
            dd = dd.defined() ? dx.to(delta_dtype) : Tensor();
          }
          return TensorList{dx, dd.defined() ? dd : dx, dw, db};
        });
  }
  return {sum, normed};
}

}  // namespace ember
