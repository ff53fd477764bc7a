// linear (torch.nn.functional.linear): y = x W^T + b, its fused paths and
// its backward; and linear_gelu, gelu(linear(x, W, b)) with the GELU in the
// GEMM's epilogue.
//
// Shapes: x [..., in_features] of any rank >= 1, weight [out_features,
// in_features], bias [out_features] or undefined; y [..., out_features].
// All three share one dtype and one device (no promotion, as matmul).
//
// Fused forward: when there is a bias, the dtype is floating and x is
// "2-D-able" (its leading dims collapse to one row stride and its rows or
// columns have unit stride, so x is a [rows, in_features] GEMM operand
// without a copy), the product and the bias go to gemm_bias_stub in one
// call: on CUDA cublasLt's bias epilogue, with no second pass over y. A
// weight or bias of another layout is made contiguous first (they are the
// small operands). Otherwise, or when the kernel declines the problem,
// y = matmul(x, W^T) and the bias is added in place.
//
// Backward: dx = g W, dW = g^T x with the batch dims of x folded into its
// rows (the sum over them), db = g summed over all but its last dim. Without
// create_graph, dW and db come from one gemm_bias_grad_stub call where g
// and x are 2-D-able and the kernel takes the problem (on CUDA cublasLt's
// BGRADB epilogue); otherwise, and under create_graph, they are made of
// differentiable ops, so double backward works.
//
// Autocast: x is cast as autocast casts (with its autograd record), the
// weight and bias to the lower-precision dtype without one
// (autocast_state::cast_without_history), and the gradients go to the
// weight and bias themselves in their own dtype: dW and db of float32
// weights come out of the half-precision GEMM in float32 (or are cast
// there on the fallback path), so no cast kernel runs on them.
//
// linear_gelu: where gemm_bias_gelu_stub has a kernel (CUDA), approximate
// is "tanh" and fused_linear's conditions hold, one GEMM writes
// y = gelu_tanh(pre) and pre = x W^T + b. The graph recorded is the
// composition's: pre gets linear's node (LinearBackward above) and y a
// GeluBackward node on pre, so gradients, double backward and autocast are
// those of gelu(linear(x, W, b), "tanh"). Otherwise linear_gelu is that
// composition. (cublasLt's DGELU_BGRAD epilogue fuses gelu' into the GEMM
// that produces the incoming gradient, the next layer's dX; ember's ops are
// separate, so gelu_backward runs as one elementwise kernel before
// linear's backward GEMMs.)
#include <string_view>
#include <tuple>
#include <utility>

#include "ember/core/autocast_state.h"
#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/gemm_kernels.h"
#include "ember/core/ops/gemm_layout.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;
using detail::describe;

namespace {

void check_linear(const Tensor& x, const Tensor& w, const Tensor& b) {
  EMBER_CHECK(x.defined() && w.defined(), "linear: got an undefined " << (x.defined() ? "weight" : "input"));
  EMBER_CHECK(x.dim() >= 1,
              "linear: the input must be at least 1-D [..., in_features], but got shape " << shape_str(x.shape()));
  EMBER_CHECK(w.dim() == 2,
              "linear: the weight must be 2-D [out_features, in_features], but got shape " << shape_str(w.shape()));
  EMBER_CHECK(x.size(-1) == w.size(1), "linear: input shape "
                                           << shape_str(x.shape()) << " and weight shape " << shape_str(w.shape())
                                           << " do not match: the last dim of the input (size " << x.size(-1)
                                           << ") must equal in_features, dim 1 of "
                                           << "the weight (size " << w.size(1) << ")");
  if (b.defined()) {
    EMBER_CHECK(b.dim() == 1 && b.size(0) == w.size(0), "linear: the bias must be 1-D [out_features] = ["
                                                            << w.size(0) << "] for weight shape "
                                                            << shape_str(w.shape()) << ", but got shape "
                                                            << shape_str(b.shape()));
  }
  for (const Tensor* t : {&w, &b}) {
    if (!t->defined()) continue;
    const char* name = t == &w ? "weight" : "bias";
    EMBER_CHECK(t->device() == x.device(), "linear: expected the input and the "
                                               << name << " on the same device, but found input " << describe(x)
                                               << " and " << name << " " << describe(*t)
                                               << "; move one with .to(device)");
    EMBER_CHECK(t->dtype() == x.dtype(), "linear: expected the input and the "
                                             << name << " to have the same dtype, but got input " << describe(x)
                                             << " and " << name << " " << describe(*t)
                                             << "; linear does not promote, convert one with .to(dtype)");
  }
  EMBER_CHECK(x.dtype() != DType::Bool,
              "linear: not defined for bool tensors (input " << describe(x) << "); convert them with .to(dtype)");
}

// y = x W^T + b through gemm_bias_stub, or an undefined tensor when x is not
// 2-D-able or the kernel declines. With `pre`, y = gelu_tanh(x W^T + b)
// through gemm_bias_gelu_stub instead, and *pre = x W^T + b (contiguous, of
// y's shape). Takes detached tensors.
Tensor fused_linear(const Tensor& x, const Tensor& w, const Tensor& b, Tensor* pre = nullptr) {
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
  const GemmArgs g = matrix_gemm(x, *xl, wc, *wl, rows, n, k, y.data_ptr());
  if (pre == nullptr) return gemm_bias_stub(x.device().type)(g, bc.data_ptr()) ? y : Tensor();
  Tensor p = empty(out_shape, x.dtype(), x.device());
  if (!gemm_bias_gelu_stub(x.device().type)(g, bc.data_ptr(), p.data_ptr(), n)) return {};
  *pre = p;
  return y;
}

// dW = g^T x and, with want_bias, db = g summed over its rows, through
// gemm_bias_grad_stub, in `dtype` (the weight's); both undefined when g or x
// is not 2-D-able or the kernel declines. Takes detached tensors.
std::pair<Tensor, Tensor> fused_weight_grad(const Tensor& g, const Tensor& x, bool want_bias, DType dtype) {
  const int64_t n = g.size(-1), k = x.size(-1);
  const int64_t rows = n == 0 ? 0 : g.numel() / n;
  // A weight of another dtype than both the product's and float32 (a
  // float16 weight under bfloat16 autocast) takes the composed path.
  if (rows == 0 || n == 0 || k == 0 || !gemm_bias_grad_pairs(g.dtype(), dtype)) return {};
  const auto g_row_stride = collapse_batch(g.sizes(), g.strides(), size_t(g.dim() - 1));
  const auto x_row_stride = collapse_batch(x.sizes(), x.strides(), size_t(x.dim() - 1));
  if (!g_row_stride || !x_row_stride) return {};
  // op(A) = g^T, n x rows; op(B) = x, rows x k.
  const auto gl = matrix_layout(n, rows, g.stride(-1), *g_row_stride);
  const auto xl = matrix_layout(rows, k, *x_row_stride, x.stride(-1));
  if (!gl || !xl) return {};
  Tensor dw = empty({n, k}, dtype, g.device());
  Tensor db = want_bias ? empty({n}, dtype, g.device()) : Tensor();
  const GemmArgs a = matrix_gemm(g, *gl, x, *xl, n, k, rows, dw.data_ptr());
  if (!gemm_bias_grad_stub(g.device().type)(a, dtype, want_bias ? db.data_ptr() : nullptr)) return {};
  return {dw, db};
}

// Records linear's backward for y = x w^T + b. x, w, b are the product's
// operands; the gradients go to x, weight and bias, in their dtypes (w and b
// are weight and bias themselves, or their casts without history under
// autocast).
void record_linear(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& weight,
                   const Tensor& bias) {
  if (needs_grad(x, weight, bias)) {
    const bool cast_weight = !w.is_same(weight);
    SavedTensor sx = weight.requires_grad() ? SavedTensor(x) : SavedTensor();
    SavedTensor sw = x.requires_grad() ? SavedTensor(w) : SavedTensor();
    // Under create_graph dx must reach the weight through its cast: the
    // cast is redone from the weight then.
    SavedTensor sweight = x.requires_grad() && cast_weight ? SavedTensor(weight) : SavedTensor();
    const bool bias_grad = bias.defined() && bias.requires_grad();
    const DType weight_dtype = weight.dtype(), bias_dtype = bias.defined() ? bias.dtype() : weight.dtype();
    const DType compute_dtype = w.dtype();
    const int64_t n = w.size(0), k = w.size(1);
    int64_t rows = 1;
    for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
    record("LinearBackward", {&y}, {x, weight, bias}, [=](const TensorList& g) {
      const char* node = "LinearBackward";
      const bool create_graph = GradMode::is_enabled();
      Tensor dx, dw, db;
      if (sw.defined()) {
        const Tensor wv = create_graph && sweight.defined() ? sweight.unpack(node).to(compute_dtype) : sw.unpack(node);
        dx = matmul(g[0], wv);
      }
      if (sx.defined()) {
        Tensor xv = sx.unpack(node);
        if (!create_graph) {
          std::tie(dw, db) = fused_weight_grad(g[0], xv, bias_grad && bias_dtype == weight_dtype, weight_dtype);
        }
        if (!dw.defined()) dw = matmul(g[0].reshape({rows, n}).t(), xv.reshape({rows, k})).to(weight_dtype);
      }
      if (bias_grad && !db.defined()) db = sum_to(g[0], {n}).to(bias_dtype);
      return TensorList{dx, dw, db};
    });
  }
}

// The op and its record (arguments as record_linear's).
Tensor linear_of(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& weight, const Tensor& bias) {
  check_linear(x, w, b);
  Tensor xd = x.detach(), wd = w.detach(), bd = b.defined() ? b.detach() : Tensor();
  Tensor y;
  if (bd.defined() && is_floating(x.dtype())) y = fused_linear(xd, wd, bd);
  if (!y.defined()) {
    y = matmul(xd, wd.t());
    if (bd.defined()) y.add_(bd);
  }
  record_linear(y, x, w, b, weight, bias);
  return y;
}

// linear_gelu's op and its records (arguments as record_linear's).
Tensor linear_gelu_of(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& weight, const Tensor& bias,
                      std::string_view approximate) {
  check_linear(x, w, b);
  if (approximate == "tanh" && b.defined() && is_floating(x.dtype()) && gemm_bias_gelu_stub.has(x.device().type)) {
    Tensor pre;
    Tensor y = fused_linear(x.detach(), w.detach(), b.detach(), &pre);
    if (y.defined()) {
      record_linear(pre, x, w, b, weight, bias);
      if (needs_grad(pre)) {
        SavedTensor saved(pre);
        record("GeluBackward", {&y}, {pre}, [saved](const TensorList& g) {
          return TensorList{gelu_backward(g[0], saved.unpack("GeluBackward"), "tanh")};
        });
      }
      return y;
    }
  }
  return gelu(linear_of(x, w, b, weight, bias), approximate);
}

// The product's operands: x, weight and bias, or under autocast x cast with
// its autograd record and weight and bias cast without one.
std::tuple<Tensor, Tensor, Tensor> product_operands(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!autocast_state::any_enabled()) [[likely]]
    return {x, weight, bias};
  using autocast_state::CastPolicy;
  return {autocast_state::cast(x, CastPolicy::LowerPrecision),
          autocast_state::cast_without_history(weight, CastPolicy::LowerPrecision),
          autocast_state::cast_without_history(bias, CastPolicy::LowerPrecision)};
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const auto [cx, cw, cb] = product_operands(x, weight, bias);
  return linear_of(cx, cw, cb, weight, bias);
}

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, std::string_view approximate) {
  EMBER_CHECK(approximate == "none" || approximate == "tanh",
              "linear_gelu: approximate must be 'none' or 'tanh' (as gelu's), got '" << approximate << "'");
  const auto [cx, cw, cb] = product_operands(x, weight, bias);
  return linear_gelu_of(cx, cw, cb, weight, bias, approximate);
}

}  // namespace ember
