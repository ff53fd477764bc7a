// linear (torch.nn.functional.linear): y = x W^T + b, its fused path and
// its backward.
//
// Shapes: x [..., in_features] of any rank >= 1, weight [out_features,
// in_features], bias [out_features] or undefined; y [..., out_features].
// All three share one dtype and one device (no promotion, as matmul).
//
// Fused path: when there is a bias, the dtype is floating and x is
// "2-D-able" (its leading dims collapse to one row stride and its rows or
// columns have unit stride, so x is a [rows, in_features] GEMM operand
// without a copy), the product and the bias go to gemm_bias_stub in one
// call: on CUDA cublasLt's bias epilogue, with no second pass over y. A
// weight or bias of another layout is made contiguous first (they are the
// small operands). Otherwise, or when the kernel declines the problem,
// y = matmul(x, W^T) and the bias is added in place.
//
// Backward: dx = g W, dW = g^T x with the batch dims of x folded into its
// rows (the sum over them), db = g summed over all but its last dim. Each
// is made of differentiable ops, so double backward works.
#include "core/autocast_state.h"
#include "core/autograd/function.h"
#include "core/ops.h"
#include "core/ops/gemm_kernels.h"
#include "core/ops/gemm_layout.h"

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

namespace {

std::string describe(const char* what, const Tensor& t) {
  return std::string(what) + " " + shape_str(t.shape()) + " " + dtype_name(t.dtype()) + " on " + t.device().str();
}

void check_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  EMBER_CHECK(x.defined() && w.defined(), "linear: got an undefined " << (x.defined() ? "weight" : "input"));
  EMBER_CHECK(x.dim() >= 1, "linear: the input must be at least 1-D [..., in_features], but got shape "
                                << shape_str(x.shape()));
  EMBER_CHECK(w.dim() == 2, "linear: the weight must be 2-D [out_features, in_features], but got shape "
                                << shape_str(w.shape()));
  EMBER_CHECK(x.size(-1) == w.size(1), "linear: input shape " << shape_str(x.shape()) << " and weight shape "
                                                              << shape_str(w.shape())
                                                              << " do not match: the last dim of the input (size "
                                                              << x.size(-1) << ") must equal in_features, dim 1 of "
                                                              << "the weight (size " << w.size(1) << ")");
  if (b.defined()) {
    EMBER_CHECK(b.dim() == 1 && b.size(0) == w.size(0),
                "linear: the bias must be 1-D [out_features] = [" << w.size(0) << "] for weight shape "
                                                                  << shape_str(w.shape()) << ", but got shape "
                                                                  << shape_str(b.shape()));
  }
  for (const Tensor* t : {&w, &b}) {
    if (!t->defined()) continue;
    const char* name = t == &w ? "weight" : "bias";
    EMBER_CHECK(t->device() == x.device(), "linear: expected the input and the " << name
                                               << " on the same device, but found " << describe("input", x)
                                               << " and " << describe(name, *t) << "; move one with .to(device)");
    EMBER_CHECK(t->dtype() == x.dtype(), "linear: expected the input and the "
                                             << name << " to have the same dtype, but got " << describe("input", x)
                                             << " and " << describe(name, *t)
                                             << "; linear does not promote, convert one with .to(dtype)");
  }
  EMBER_CHECK(x.dtype() != DType::Bool, "linear: not defined for bool tensors (" << describe("input", x)
                                                                                 << "); convert them with .to(dtype)");
}

// y = x W^T + b through gemm_bias_stub, or an undefined tensor when x is not
// 2-D-able or the kernel declines. Takes detached tensors.
Tensor fused_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t k = x.size(-1), n = w.size(0);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  if (rows == 0 || k == 0 || n == 0) return {};
  auto row_stride = collapse_batch(x.sizes(), x.strides(), size_t(x.dim() - 1));
  if (!row_stride) return {};
  auto xl = matrix_layout(rows, k, *row_stride, x.stride(-1));
  if (!xl) return {};
  // op(B) = W^T, a k x n matrix with strides (w.stride(1), w.stride(0)).
  Tensor wc = w;
  auto wl = matrix_layout(k, n, w.stride(1), w.stride(0));
  if (!wl) {
    wc = w.contiguous();
    wl = matrix_layout(k, n, 1, k);
  }
  Tensor bc = b.contiguous();

  Shape out_shape = x.shape();
  out_shape.back() = n;
  Tensor y = empty(out_shape, x.dtype(), x.device());
  GemmArgs g;
  g.device = x.device().index;
  g.dtype = x.dtype();
  g.m = rows;
  g.n = n;
  g.k = k;
  g.a = x.data_ptr();
  g.trans_a = xl->trans;
  g.lda = xl->ld;
  g.b = wc.data_ptr();
  g.trans_b = wl->trans;
  g.ldb = wl->ld;
  g.c = y.data_ptr();
  g.ldc = n;
  g.stride_c = rows * n;
  if (!gemm_bias_stub(x.device().type)(g, bc.data_ptr())) return {};
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor cx = x, cw = weight, cb = bias;
    if (autocast_state::lower_precision_inputs({&cx, &cw, &cb})) return linear(cx, cw, cb);
  }
  check_linear(x, weight, bias);
  Tensor xd = x.detach(), wd = weight.detach(), bd = bias.defined() ? bias.detach() : Tensor();
  Tensor y;
  if (bd.defined() && is_floating(x.dtype())) y = fused_linear(xd, wd, bd);
  if (!y.defined()) {
    y = matmul(xd, wd.t());
    if (bd.defined()) y.add_(bd);
  }

  if (needs_grad(x, weight, bias)) {
    SavedTensor sx = weight.requires_grad() ? SavedTensor(x) : SavedTensor();
    SavedTensor sw = x.requires_grad() ? SavedTensor(weight) : SavedTensor();
    const bool bias_grad = bias.defined() && bias.requires_grad();
    const int64_t n = weight.size(0), k = weight.size(1);
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
    record("LinearBackward", {&y}, {x, weight, bias}, [=](const TensorList& g) {
      Tensor dx, dw, db;
      if (sw.defined()) dx = matmul(g[0], sw.unpack("LinearBackward"));
      if (sx.defined()) {
        Tensor xv = sx.unpack("LinearBackward");
        dw = matmul(g[0].reshape({rows, n}).t(), xv.reshape({rows, k}));
      }
      if (bias_grad) db = sum_to(g[0], {n});
      return TensorList{dx, dw, db};
    });
  }
  return y;
}

}  // namespace ember
