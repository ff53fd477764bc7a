// masked_fill: where's kernel (where_stub) with the fill value as a 0-dim
// operand of x's dtype, so no kernel of its own: the kernel reads mask, x
// and one broadcast value per element, as a dedicated one would. The value
// is cast to x's dtype first, so the result never promotes.
#include "ember/core/ops/masked_fill.h"

#include <cfloat>
#include <cmath>

#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/elementwise_kernels.h"
#include "ember/core/ops/op_utils.h"

namespace ember {
namespace detail {

Tensor masked_fill_value(const char* op, const Tensor& x, const Tensor& mask, const Tensor& value) {
  EMBER_CHECK(x.defined() && mask.defined() && value.defined(), op << ": got an undefined tensor");
  EMBER_CHECK(mask.dtype() == DType::Bool, op << ": expected a bool mask, got " << describe(mask)
                                              << "; make one with a comparison (x > 0) or .to(DType::Bool)");
  EMBER_CHECK(mask.device() == x.device(), op << ": the mask " << describe(mask) << " is not on the device of "
                                              << describe(x) << "; move it with .to(device)");
  EMBER_CHECK(value.dim() == 0, op << ": only supports a 0-dimensional value tensor, but got " << describe(value)
                                   << "; pass a Scalar, or a one-element tensor reshaped to {}");
  EMBER_CHECK(value.device() == x.device() || value.device().is_cpu(),
              op << ": the value " << describe(value) << " is on neither the device of " << describe(x)
                 << " nor the CPU; move it with .to(device)");
  NoGradGuard no_grad;
  return value.to(x.device(), x.dtype());
}

Tensor masked_fill_scalar(const char* op, const Tensor& x, const Scalar& value) {
  EMBER_CHECK(x.defined(), op << ": got an undefined tensor");
  const DType dt = x.dtype();
  const double v = value.to_double();
  bool fits = true;
  if (dt == DType::Int32 || dt == DType::Int64) {
    const double lo = dt == DType::Int32 ? -2147483648.0 : -9223372036854775808.0;
    if (value.is_floating()) {
      fits = std::isfinite(v) && std::trunc(v) >= lo && std::trunc(v) < -lo;
    } else if (dt == DType::Int32) {
      fits = value.to_int() >= INT32_MIN && value.to_int() <= INT32_MAX;
    }
  } else if (dt != DType::Bool && std::isfinite(v)) {
    const double max = dt == DType::Float16 ? 65504.0 : dt == DType::BFloat16 ? 3.3895313892515355e38 : FLT_MAX;
    fits = dt == DType::Float64 || std::fabs(v) <= max;
  }
  EMBER_CHECK(fits, op << ": value " << (value.is_floating() ? v : double(value.to_int())) << " cannot be converted to "
                       << dtype_name(dt) << " (the dtype of " << describe(x)
                       << ") without overflow; convert the tensor to a wider dtype first");
  return full({}, value, dt, x.device());
}

}  // namespace detail

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value) {
  Tensor fill = detail::masked_fill_value("masked_fill", x, mask, value);
  const Shape shape = broadcast_shapes("masked_fill", x.shape(), mask.shape());
  Tensor in = x.detach();
  Tensor out = empty_elementwise_output(shape, x.dtype(), x.device(), {&in, &mask});
  where_stub(x.device().type)(make_elementwise_args("masked_fill", out, {&mask, &fill, &in}), x.dtype());
  if (is_floating(x.dtype()) && autograd::needs_grad(x, value)) {
    Tensor m = mask.detach();
    const Shape x_shape = x.shape();
    const bool grad_x = x.requires_grad(), grad_value = value.requires_grad();
    const DType value_dtype = value.dtype();
    const Device value_device = value.device();
    autograd::record("MaskedFillBackward", {&out}, {x, value}, [=](const TensorList& g) {
      Tensor dx = grad_x ? sum_to(masked_fill(g[0], m, 0), x_shape) : Tensor();
      Tensor dv = grad_value ? sum(where(m, g[0], zeros_like(g[0]))).to(value_device, value_dtype) : Tensor();
      return TensorList{dx, dv};
    });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  return masked_fill(x, mask, detail::masked_fill_scalar("masked_fill", x, value));
}

Tensor Tensor::masked_fill(const Tensor& mask, const Scalar& value) const {
  return ember::masked_fill(*this, mask, value);
}
Tensor Tensor::masked_fill(const Tensor& mask, const Tensor& value) const {
  return ember::masked_fill(*this, mask, value);
}

}  // namespace ember
