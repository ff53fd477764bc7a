// linear (torch.nn.functional.linear): y = x W^T + b, its fused paths and
// its backward; linear_gelu, gelu(linear(x, W, b)) with the GELU in the
// GEMM's epilogue; and linear_gelu_linear, linear(gelu(linear(x, W1, b1)),
// W2, b2) with gelu' in a backward GEMM's epilogue.
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
// composition.
//
// linear_gelu_linear: where linear_gelu fuses, its GEMM gives pre and
// h = gelu_tanh(pre), then y = linear(h, W2, b2), and one node,
// LinearGeluLinearBackward, holds the whole backward (see Note [MLP
// backward]). Otherwise it is linear(gelu(linear(x, W1, b1)), W2, b2), op
// by op. Both layers' operands are cast under autocast as linear casts
// them.
//
// Note [MLP backward]: without create_graph, from g = dL/dy,
//   dW2, db2  = g^T h, sum(g)            linear's weight-gradient GEMM
//   d_pre     = (g W2) * gelu_tanh'(pre)  gemm_dgelu_bgrad_stub (cublasLt
//                                         DGELU_BGRAD): gelu' in the dh
//                                         GEMM's epilogue, no dh in memory
//   dx        = d_pre W1
//   dW1, db1  = d_pre^T x, sum(d_pre)     linear's weight-gradient GEMM
// db1 comes from d_pre's GEMM when the bias is of d_pre's dtype and
// cublasLt takes DGELU_BGRAD; a float32 bias under half-precision autocast
// takes it from dW1's GEMM (BGRADB, in float32) instead, as linear's
// backward does, since cublasLt writes the DGELU_BGRAD bias gradient in the
// output's dtype (and so does a bias whose DGELU_BGRAD is declined). The
// dgelu kernel takes 16-bit types only; where it is missing or declines,
// d_pre = gelu_backward(g W2, pre) (linear_gelu's cost). Under create_graph the node recomputes pre and h from x with
// differentiable ops and composes the same formulas from them, so
// gradients of gradients reach x, W1 and b1 as through the composition.
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

// d_pre = (g w) * gelu_tanh'(pre) and, with want_bias, db = d_pre summed
// over its rows, both in g's dtype, through gemm_dgelu_bgrad_stub (db
// undefined when the kernel declines the bias gradient but takes the GEMM
// without it: the caller sums it then); both undefined when there is no
// kernel, g is not 2-D-able or the kernel declines. w is the second layer's [k, n] weight, pre the contiguous
// pre-activation of d_pre's shape. Takes detached tensors.
std::pair<Tensor, Tensor> fused_gelu_grad(const Tensor& g, const Tensor& w, const Tensor& pre, bool want_bias) {
  if (!gemm_dgelu_bgrad_stub.has(g.device().type)) return {};
  const int64_t k = w.size(0), n = w.size(1);
  const int64_t rows = k == 0 ? 0 : g.numel() / k;
  if (rows == 0 || n == 0 || k == 0) return {};
  const auto row_stride = collapse_batch(g.sizes(), g.strides(), size_t(g.dim() - 1));
  if (!row_stride) return {};
  const auto gl = matrix_layout(rows, k, *row_stride, g.stride(-1));
  if (!gl) return {};
  // op(B) = w, a k x n matrix.
  Tensor wc = w;
  auto wl = matrix_layout(k, n, w.stride(0), w.stride(1));
  if (!wl) {
    wc = w.contiguous();
    wl = matrix_layout(k, n, n, 1);
  }
  Tensor d_pre = empty(pre.shape(), g.dtype(), g.device());
  Tensor db = want_bias ? empty({n}, g.dtype(), g.device()) : Tensor();
  const GemmArgs a = matrix_gemm(g, *gl, wc, *wl, rows, n, k, d_pre.data_ptr());
  const auto kernel = gemm_dgelu_bgrad_stub(g.device().type);
  if (want_bias && kernel(a, pre.data_ptr(), n, db.data_ptr())) return {d_pre, db};
  if (kernel(a, pre.data_ptr(), n, nullptr)) return {d_pre, Tensor()};
  return {};
}

// The product of x's leading dims: the rows of linear's GEMMs.
int64_t leading_rows(const Tensor& x) {
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.dim(); ++d) rows *= x.size(d);
  return rows;
}

// A layer's weight and bias gradients from its output gradient g and input
// x: dW = g^T x (when weight_grad) in weight_dtype and db = g summed over
// all but its last dim (when bias_grad) in bias_dtype; x is read for dW
// only. Without create_graph both come from one fused_weight_grad call
// where it takes them (the bias when of the weight's dtype); otherwise, and
// under create_graph, from differentiable ops.
std::pair<Tensor, Tensor> weight_and_bias_grads(const Tensor& g, const Tensor& x, bool weight_grad, bool bias_grad,
                                                DType weight_dtype, DType bias_dtype, bool create_graph) {
  const int64_t n = g.size(-1);
  Tensor dw, db;
  if (weight_grad) {
    if (!create_graph)
      std::tie(dw, db) = fused_weight_grad(g, x, bias_grad && bias_dtype == weight_dtype, weight_dtype);
    if (!dw.defined()) {
      const int64_t rows = leading_rows(x);
      dw = matmul(g.reshape({rows, n}).t(), x.reshape({rows, x.size(-1)})).to(weight_dtype);
    }
  }
  if (bias_grad && !db.defined()) db = sum_to(g, {n}).to(bias_dtype);
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
    const bool weight_grad = weight.requires_grad();
    SavedTensor sx = weight_grad ? SavedTensor(x) : SavedTensor();
    SavedTensor sw = x.requires_grad() ? SavedTensor(w) : SavedTensor();
    // Under create_graph dx must reach the weight through its cast: the
    // cast is redone from the weight then.
    SavedTensor sweight = x.requires_grad() && cast_weight ? SavedTensor(weight) : SavedTensor();
    const bool bias_grad = bias.defined() && bias.requires_grad();
    const DType weight_dtype = weight.dtype(), bias_dtype = bias.defined() ? bias.dtype() : weight.dtype();
    const DType compute_dtype = w.dtype();
    const int64_t n = w.size(0);
    record("LinearBackward", {&y}, {x, weight, bias}, [=](const TensorList& g) {
      const char* node = "LinearBackward";
      const bool create_graph = GradMode::is_enabled();
      Tensor dx, dw, db;
      if (sw.defined()) {
        const Tensor wv = create_graph && sweight.defined() ? sweight.unpack(node).to(compute_dtype) : sw.unpack(node);
        dx = matmul(g[0], wv);
      }
      if (weight_grad) {
        std::tie(dw, db) =
            weight_and_bias_grads(g[0], sx.unpack(node), true, bias_grad, weight_dtype, bias_dtype, create_graph);
      } else if (bias_grad) {
        db = sum_to(g[0], {n}).to(bias_dtype);
      }
      return TensorList{dx, dw, db};
    });
  }
}

// y = x w^T + b of detached operands: linear's fused GEMM, or matmul and an
// in-place add.
Tensor linear_forward(const Tensor& x, const Tensor& w, const Tensor& b) {
  Tensor y;
  if (b.defined() && is_floating(x.dtype())) y = fused_linear(x, w, b);
  if (!y.defined()) {
    y = matmul(x, w.t());
    if (b.defined()) y.add_(b);
  }
  return y;
}

// The op and its record (arguments as record_linear's).
Tensor linear_of(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& weight, const Tensor& bias) {
  check_linear(x, w, b);
  Tensor y = linear_forward(x.detach(), w.detach(), b.defined() ? b.detach() : Tensor());
  record_linear(y, x, w, b, weight, bias);
  return y;
}

// Whether linear_gelu's fused GEMM may be asked for gelu(linear(x, w, b)).
bool gelu_epilogue_applies(const Tensor& x, const Tensor& b, std::string_view approximate) {
  return approximate == "tanh" && b.defined() && is_floating(x.dtype()) && gemm_bias_gelu_stub.has(x.device().type);
}

// linear_gelu's op and its records (arguments as record_linear's).
Tensor linear_gelu_of(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& weight, const Tensor& bias,
                      std::string_view approximate) {
  check_linear(x, w, b);
  if (gelu_epilogue_applies(x, b, approximate)) {
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

// A weight or bias as the product takes it: itself, or under autocast its
// cast to the lower-precision dtype without autograd record.
Tensor product_parameter(const Tensor& t) {
  if (!autocast_state::any_enabled()) [[likely]]
    return t;
  return autocast_state::cast_without_history(t, autocast_state::CastPolicy::LowerPrecision);
}

// The product's operands: x, weight and bias, or under autocast x cast with
// its autograd record and weight and bias cast without one.
std::tuple<Tensor, Tensor, Tensor> product_operands(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (!autocast_state::any_enabled()) [[likely]]
    return {x, weight, bias};
  return {autocast_state::cast(x, autocast_state::CastPolicy::LowerPrecision), product_parameter(weight),
          product_parameter(bias)};
}

// One layer of linear_gelu_linear: the parameters the gradients go to, the
// product's operands w and b (the parameters, or their casts under
// autocast) and whether each parameter asks for a gradient.
struct Layer {
  Tensor weight, bias, w, b;
  bool weight_grad() const { return weight.requires_grad(); }
  bool bias_grad() const { return bias.defined() && bias.requires_grad(); }
  DType bias_dtype() const { return bias.defined() ? bias.dtype() : weight.dtype(); }
};

// What LinearGeluLinearBackward saves, and its backward (Note [MLP
// backward]). The product's operands x, w1, b1 and w2 are saved when a
// gradient passes the GELU (x, weight1 or bias1 asks for one); the original
// weights and bias1 besides when autocast cast them, so that under
// create_graph the gradients reach them through their casts.
class MlpBackward {
 public:
  static constexpr const char* kName = "LinearGeluLinearBackward";

  MlpBackward(const Tensor& x, const Layer& first, const Layer& second, const Tensor& pre, const Tensor& h)
      : x_grad_(x.requires_grad()),
        w1_grad_(first.weight_grad()),
        b1_grad_(first.bias_grad()),
        w2_grad_(second.weight_grad()),
        b2_grad_(second.bias_grad()),
        compute_dtype_(x.dtype()),
        weight1_dtype_(first.weight.dtype()),
        bias1_dtype_(first.bias_dtype()),
        weight2_dtype_(second.weight.dtype()),
        bias2_dtype_(second.bias_dtype()) {
    if (w2_grad_) h_ = SavedTensor(h);
    if (!through_gelu()) return;
    x_ = SavedTensor(x);
    w1_ = SavedTensor(first.w);
    b1_ = SavedTensor(first.b);
    w2_ = SavedTensor(second.w);
    pre_ = SavedTensor(pre);
    if (!first.w.is_same(first.weight)) weight1_ = SavedTensor(first.weight);
    if (!first.b.is_same(first.bias)) bias1_ = SavedTensor(first.bias);
    if (!second.w.is_same(second.weight)) weight2_ = SavedTensor(second.weight);
  }

  TensorList operator()(const TensorList& grads) const {
    const bool create_graph = GradMode::is_enabled();
    const Tensor& g = grads[0];
    TensorList out(5);  // x, weight1, bias1, weight2, bias2
    Tensor x, w1, pre, h = w2_grad_ && !(create_graph && through_gelu()) ? h_.unpack(kName) : Tensor();
    if (through_gelu()) {
      x = x_.unpack(kName);
      w1 = operand(w1_, weight1_, create_graph);
      if (create_graph) {
        const Tensor b1 = operand(b1_, bias1_, create_graph);
        pre = linear_of(x, w1, b1, w1, b1);
        h = gelu(pre, "tanh");
      } else {
        pre = pre_.unpack(kName).contiguous();
      }
    }
    std::tie(out[3], out[4]) =
        weight_and_bias_grads(g, h, w2_grad_, b2_grad_, weight2_dtype_, bias2_dtype_, create_graph);
    if (!through_gelu()) return out;

    const Tensor w2 = operand(w2_, weight2_, create_graph);
    // db1 from d_pre's GEMM only in d_pre's own dtype (Note [MLP backward]).
    const bool bias1_in_epilogue = b1_grad_ && bias1_dtype_ == compute_dtype_;
    Tensor d_pre, db1;
    if (!create_graph) std::tie(d_pre, db1) = fused_gelu_grad(g, w2, pre, bias1_in_epilogue);
    if (!d_pre.defined()) d_pre = gelu_backward(matmul(g, w2), pre, "tanh");
    if (x_grad_) out[0] = matmul(d_pre, w1);
    std::tie(out[1], out[2]) = weight_and_bias_grads(d_pre, x, w1_grad_, b1_grad_ && !db1.defined(), weight1_dtype_,
                                                     bias1_dtype_, create_graph);
    if (db1.defined()) out[2] = db1;
    return out;
  }

 private:
  bool through_gelu() const { return x_grad_ || w1_grad_ || b1_grad_; }

  // A product operand saved as `cast`; under create_graph the cast is redone
  // from the parameter (`original`, saved when autocast cast it) so that
  // gradients reach it.
  Tensor operand(const SavedTensor& cast, const SavedTensor& original, bool create_graph) const {
    if (create_graph && original.defined()) return original.unpack(kName).to(compute_dtype_);
    return cast.defined() ? cast.unpack(kName) : Tensor();
  }

  bool x_grad_, w1_grad_, b1_grad_, w2_grad_, b2_grad_;
  DType compute_dtype_, weight1_dtype_, bias1_dtype_, weight2_dtype_, bias2_dtype_;
  SavedTensor x_, w1_, b1_, w2_, pre_, h_, weight1_, bias1_, weight2_;
};

// linear_gelu_linear's op and its record. x is the product's operand (cast
// under autocast); the layers' operands are cast already.
Tensor linear_gelu_linear_of(const Tensor& x, const Layer& first, const Layer& second, std::string_view approximate) {
  check_linear(x, first.w, first.b);
  if (gelu_epilogue_applies(x, first.b, approximate)) {
    Tensor pre;
    const Tensor h = fused_linear(x.detach(), first.w.detach(), first.b.detach(), &pre);
    if (h.defined()) {
      check_linear(h, second.w, second.b);
      Tensor y = linear_forward(h, second.w.detach(), second.b.defined() ? second.b.detach() : Tensor());
      if (needs_grad({&x, &first.weight, &first.bias, &second.weight, &second.bias})) {
        record(MlpBackward::kName, {&y}, {x, first.weight, first.bias, second.weight, second.bias},
               MlpBackward(x, first, second, pre, h));
      }
      return y;
    }
  }
  const Tensor h = gelu(linear_of(x, first.w, first.b, first.weight, first.bias), approximate);
  const auto [ch, w2, b2] = product_operands(h, second.weight, second.bias);
  return linear_of(ch, w2, b2, second.weight, second.bias);
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

Tensor linear_gelu_linear(const Tensor& x, const Tensor& weight1, const Tensor& bias1, const Tensor& weight2,
                          const Tensor& bias2, std::string_view approximate) {
  EMBER_CHECK(approximate == "none" || approximate == "tanh",
              "linear_gelu_linear: approximate must be 'none' or 'tanh' (as gelu's), got '" << approximate << "'");
  const auto [cx, cw1, cb1] = product_operands(x, weight1, bias1);
  const Layer first{weight1, bias1, cw1, cb1};
  const Layer second{weight2, bias2, product_parameter(weight2), product_parameter(bias2)};
  return linear_gelu_linear_of(cx, first, second, approximate);
}

}  // namespace ember
