// In-place ops: copy_, fill_, zero_, masked_fill_ and the arithmetic
// add_/sub_/mul_/div_.
//
// Contract: the written tensor keeps its dtype, shape and storage; the other
// operand broadcasts to it; its version counter is bumped, so backward
// detects a saved tensor that was overwritten. Under grad mode an in-place
// op on a tensor that needs grad rewires its history (as PyTorch does for
// non-view tensors); on a leaf that requires grad, or a view of a tensor
// that requires grad, it is an error naming the fix.
#include <algorithm>

#include "ember/core/autograd/function.h"
#include "ember/core/inference_mode.h"
#include "ember/core/ops.h"
#include "ember/core/ops/elementwise_kernels.h"
#include "ember/core/ops/masked_fill.h"

namespace ember {
namespace {

void check_writable(const char* op, const Tensor& self) {
  EMBER_CHECK(self.defined(), op << ": called on an undefined tensor");
  EMBER_CHECK(!self.is_inference() || InferenceMode::is_enabled(),
              op << ": in-place update of an inference tensor (shape " << shape_str(self.shape())
                 << ", made under InferenceMode) outside inference mode is not allowed; clone() it first to get a "
                    "normal tensor, or update it inside InferenceMode");
  for (int64_t d = 0; d < self.dim(); ++d) {
    EMBER_CHECK(self.strides()[d] != 0 || self.sizes()[d] <= 1,
                op << ": more than one element of the written-to tensor (shape " << shape_str(self.shape())
                   << ", strides " << shape_str(self.strides())
                   << ") refers to a single memory location (it was made by expand); clone() it first");
  }
}

void check_autograd_inplace(const char* op, const Tensor& self, bool other_requires_grad) {
  if (!GradMode::is_enabled()) return;
  if (self.requires_grad() && self.is_leaf()) {
    EMBER_FAIL(op << ": a leaf tensor that requires grad (shape " << shape_str(self.shape())
                  << ") is being used in an in-place operation; do it under NoGradGuard, or use the out-of-place op");
  }
  if ((self.requires_grad() || other_requires_grad) && self.impl()->is_view) {
    EMBER_FAIL(op << ": in-place operation on a view (shape " << shape_str(self.shape())
                  << ") with gradient tracking is not supported by ember; use the out-of-place op, or clone() "
                     "the view first");
  }
}

// Source that may alias the destination's memory is copied first, so a
// kernel never reads what it already overwrote.
Tensor unalias(const Tensor& dst, const Tensor& src) {
  if (dst.storage() != src.storage()) return src;
  if (src.storage_offset() == dst.storage_offset() && src.strides() == dst.strides() && src.shape() == dst.shape()) {
    return src;
  }
  NoGradGuard no_grad;
  return src.clone();
}

// PyTorch's canCast: floating results do not go into integral or bool
// tensors, nor integral results into bool ones.
bool can_cast(DType from, DType to) {
  if (is_floating(from) && !is_floating(to)) return false;
  return from == DType::Bool || to != DType::Bool;
}

// Makes self take over the history of r, computed out of place.
void take_history(Tensor& self, const Tensor& r) { autograd::set_history(self, r.grad_fn(), r.output_nr()); }

}  // namespace

Tensor& Tensor::copy_(const Tensor& src_in) {
  check_writable("copy_", *this);
  EMBER_CHECK(src_in.defined(), "copy_: the source is undefined");
  bool src_grad = autograd::needs_grad(src_in);
  check_autograd_inplace("copy_", *this, src_grad);
  broadcast_shapes("copy_", src_in.shape(), shape());
  EMBER_CHECK(int64_t(src_in.dim()) <= dim() && broadcast_shapes("copy_", src_in.shape(), shape()) == shape(),
              "copy_: source of shape " << shape_str(src_in.shape()) << " does not broadcast to the destination shape "
                                        << shape_str(shape()));
  Tensor src = unalias(*this, src_in.detach());
  if (src.device() == device() && dim() > kMaxElementwiseDims) {
    // More dims than a kernel takes (if they do not merge): copy slice by
    // slice, so that contiguous() works for tensors of any rank.
    NoGradGuard no_grad;
    Tensor expanded = src.expand(shape());
    for (int64_t i = 0; i < size(0); ++i) select(0, i).copy_(expanded.select(0, i));
  } else if (src.device() == device()) {
    cast_stub(device().type)(make_elementwise_args("copy_", *this, {&src}), dtype(), src.dtype());
  } else {
    // Across devices: make a dense copy in the destination dtype on the
    // source side, move the bytes, then scatter into this tensor's layout.
    NoGradGuard no_grad;
    // A dense destination with the source's strides (a channels-last copy,
    // say) takes the bytes as they are.
    Tensor converted = src.to(dtype());
    const bool same_layout =
        converted.shape() == shape() && converted.strides() == strides() && is_non_overlapping_and_dense();
    Tensor dense = same_layout ? converted : converted.expand(shape()).contiguous();
    bool direct = same_layout || is_contiguous();
    Tensor landing = direct ? *this : empty(shape(), dtype(), device());
    cross_device_copy_stub(DeviceType::CUDA)(landing.data_ptr(), device(), dense.data_ptr(), dense.device(),
                                             size_t(numel()) * element_size());
    if (!direct) cast_stub(device().type)(make_elementwise_args("copy_", *this, {&landing}), dtype(), dtype());
  }
  storage()->bump_version();
  if (src_grad) {
    EMBER_CHECK(is_floating(dtype()),
                "copy_: cannot copy a tensor that requires grad into a " << dtype_name(dtype()) << " tensor");
    Shape src_shape = src_in.shape();
    DType src_dtype = src_in.dtype();
    Device src_dev = src_in.device();
    Tensor self = *this;
    autograd::record("CopyBackward", {&self}, {src_in}, [src_shape, src_dtype, src_dev](const TensorList& g) {
      return TensorList{sum_to(g[0], src_shape).to(src_dev, src_dtype)};
    });
  } else if (GradMode::is_enabled() && requires_grad()) {
    // Overwritten entirely by a constant: the old history no longer matters.
    autograd::meta(*this).grad_fn = nullptr;
    autograd::meta(*this).requires_grad = false;
  }
  return *this;
}

Tensor& Tensor::fill_(const Scalar& value) {
  check_writable("fill_", *this);
  check_autograd_inplace("fill_", *this, false);
  fill_stub(device().type)(make_elementwise_args("fill_", *this, {}), dtype(), value);
  storage()->bump_version();
  if (GradMode::is_enabled() && requires_grad()) {
    autograd::meta(*this).grad_fn = nullptr;
    autograd::meta(*this).requires_grad = false;
  }
  return *this;
}

Tensor& Tensor::zero_() { return fill_(0); }

namespace {

// self = op(self, other) in place. The fast path writes straight into self;
// with autograd, or a result dtype that differs from self's, the op runs out
// of place and is copied back (the in-place result type must be castable).
template <typename OutOfPlace>
Tensor& inplace(const char* name, Tensor& self, bool other_requires_grad, DType result, OutOfPlace op) {
  check_writable(name, self);
  check_autograd_inplace(name, self, other_requires_grad);
  EMBER_CHECK(can_cast(result, self.dtype()), name << ": result type " << dtype_name(result)
                                                   << " can't be cast to the desired output type "
                                                   << dtype_name(self.dtype()) << " of the in-place tensor");
  if (GradMode::is_enabled() && (self.requires_grad() || other_requires_grad)) {
    Tensor r = op(self.clone());
    {
      NoGradGuard no_grad;
      self.copy_(r);
    }
    take_history(self, r);
    return self;
  }
  Tensor r = op(self);
  self.copy_(r);
  return self;
}

template <typename Fn>
Tensor& inplace_binary(const char* name, BinaryOp bop, Tensor& self, const Tensor& other, Fn out_of_place) {
  EMBER_CHECK(self.defined() && other.defined(), name << ": called with an undefined tensor");
  EMBER_CHECK(broadcast_shapes(name, self.shape(), other.shape()) == self.shape(),
              name << ": the operand of shape " << shape_str(other.shape())
                   << " does not broadcast to the in-place tensor of shape " << shape_str(self.shape()));
  DType result = result_type(self, other);
  if (bop == BinaryOp::Div && !is_floating(result)) result = kDefaultFloat;
  bool tracked = GradMode::is_enabled() && (self.requires_grad() || other.requires_grad());
  bool fast = result == self.dtype() && other.device() == self.device() && !tracked;
  if (fast) {
    check_writable(name, self);
    Tensor o = unalias(self, other);
    binary_stub(self.device().type)(bop, make_elementwise_args(name, self, {&self, &o}), result, {});
    self.storage()->bump_version();
    return self;
  }
  return inplace(name, self, autograd::needs_grad(other), result, out_of_place);
}

template <typename Fn>
Tensor& inplace_scalar(const char* name, BinaryOp bop, Tensor& self, const Scalar& s, Fn out_of_place) {
  DType result = promote_with_scalar(self.dtype(), s);
  if (bop == BinaryOp::Div && !is_floating(result)) result = kDefaultFloat;
  if (result == self.dtype() && !(GradMode::is_enabled() && self.requires_grad())) {
    check_writable(name, self);
    binary_stub(self.device().type)(bop, make_elementwise_args(name, self, {&self}), result,
                                    {ScalarOperand::Side::Rhs, s});
    self.storage()->bump_version();
    return self;
  }
  return inplace(name, self, false, result, out_of_place);
}

}  // namespace

Tensor& Tensor::add_(const Tensor& other, const Scalar& alpha) {
  if (alpha.to_double() != 1.0) {
    Tensor scaled = mul(other, alpha);
    return add_(scaled);
  }
  return inplace_binary("add_", BinaryOp::Add, *this, other, [&](const Tensor& s) { return add(s, other); });
}
Tensor& Tensor::sub_(const Tensor& other) {
  return inplace_binary("sub_", BinaryOp::Sub, *this, other, [&](const Tensor& s) { return sub(s, other); });
}
Tensor& Tensor::mul_(const Tensor& other) {
  return inplace_binary("mul_", BinaryOp::Mul, *this, other, [&](const Tensor& s) { return mul(s, other); });
}
Tensor& Tensor::div_(const Tensor& other) {
  return inplace_binary("div_", BinaryOp::Div, *this, other, [&](const Tensor& s) { return div(s, other); });
}
Tensor& Tensor::add_(const Scalar& v) {
  return inplace_scalar("add_", BinaryOp::Add, *this, v, [&](const Tensor& s) { return add(s, v); });
}
Tensor& Tensor::sub_(const Scalar& v) {
  return inplace_scalar("sub_", BinaryOp::Sub, *this, v, [&](const Tensor& s) { return sub(s, v); });
}
Tensor& Tensor::mul_(const Scalar& v) {
  return inplace_scalar("mul_", BinaryOp::Mul, *this, v, [&](const Tensor& s) { return mul(s, v); });
}
Tensor& Tensor::div_(const Scalar& v) {
  return inplace_scalar("div_", BinaryOp::Div, *this, v, [&](const Tensor& s) { return div(s, v); });
}

// masked_fill_ writes value into self through where's kernel (operands:
// mask, the value as a 0-dim tensor of self's dtype, self); with autograd it
// runs out of place and takes over the history.
Tensor& Tensor::masked_fill_(const Tensor& mask, const Tensor& value) {
  Tensor fill = detail::masked_fill_value("masked_fill_", *this, mask, value);
  EMBER_CHECK(broadcast_shapes("masked_fill_", shape(), mask.shape()) == shape(),
              "masked_fill_: the mask of shape " << shape_str(mask.shape())
                                                 << " does not broadcast to the in-place tensor of shape "
                                                 << shape_str(shape()) << "; use the out-of-place masked_fill");
  if (GradMode::is_enabled() && (requires_grad() || value.requires_grad())) {
    return inplace("masked_fill_", *this, autograd::needs_grad(value), dtype(),
                   [&](const Tensor& s) { return ember::masked_fill(s, mask, value); });
  }
  check_writable("masked_fill_", *this);
  Tensor m = unalias(*this, mask);
  where_stub(device().type)(make_elementwise_args("masked_fill_", *this, {&m, &fill, this}), dtype());
  storage()->bump_version();
  return *this;
}
Tensor& Tensor::masked_fill_(const Tensor& mask, const Scalar& value) {
  return masked_fill_(mask, detail::masked_fill_scalar("masked_fill_", *this, value));
}

}  // namespace ember
