// Front-ends of the elementwise ops: device and dtype checks, promotion,
// broadcasting, output allocation, dispatch, and the backward formulas.
#include <cmath>

#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/elementwise_kernels.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

using detail::describe;

namespace {

// A 0-dim CPU tensor may join a CUDA op (as in PyTorch); anything else must
// share one device.
Device common_device(const char* op, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    EMBER_CHECK(t->defined(), op << ": got an undefined tensor");
    if (t->dim() == 0 && t->device().is_cpu()) continue;
    if (first == nullptr) first = t;
    EMBER_CHECK(t->device() == first->device(), op << ": expected all tensors to be on the same device, but found "
                                                   << describe(*first) << " and " << describe(*t)
                                                   << "; move one with .to(device)");
  }
  return first ? first->device() : (*ts.begin())->device();
}

// x converted to dtype on device, without recording history (the caller
// records the op against the original inputs).
Tensor convert(const Tensor& x, DType dtype, Device device) {
  if (x.dtype() == dtype && x.device() == device) return x;
  NoGradGuard no_grad;
  return x.to(device, dtype);
}

Tensor unary_kernel_call(UnaryOp op, const char* name, const Tensor& x, DType compute) {
  Tensor in = convert(x, compute, x.device());
  Tensor out = empty_elementwise_output(x.shape(), compute, x.device(), {&in});
  unary_stub(x.device().type)(op, make_elementwise_args(name, out, {&in}), compute);
  return out;
}

// Floating-only ops promote integral inputs to float32.
DType float_compute(const Tensor& x) { return is_floating(x.dtype()) ? x.dtype() : kDefaultFloat; }

Tensor binary_kernel_call(BinaryOp op, const char* name, const Tensor& a, const Tensor& b, DType compute) {
  Device dev = common_device(name, {&a, &b});
  Tensor ca = convert(a, compute, dev), cb = convert(b, compute, dev);
  Tensor out = empty_elementwise_output(broadcast_shapes(name, a.shape(), b.shape()), compute, dev, {&ca, &cb});
  binary_stub(dev.type)(op, make_elementwise_args(name, out, {&ca, &cb}), compute, {});
  return out;
}

Tensor scalar_kernel_call(BinaryOp op, const char* name, const Tensor& a, const Scalar& s, ScalarOperand::Side side,
                          DType compute) {
  Tensor ca = convert(a, compute, a.device());
  Tensor out = empty_elementwise_output(a.shape(), compute, a.device(), {&ca});
  binary_stub(a.device().type)(op, make_elementwise_args(name, out, {&ca}), compute, {side, s});
  return out;
}

// The fused backward kernels record no graph. Under create_graph (grad mode
// on while a node runs), the same formula is composed from recorded ops so
// that higher-order gradients are right; s is the saved x or y (reattached
// to the graph by SavedTensor when it is an output).
Tensor backward_formula(BinaryOp op, const char* name, const Tensor& g, const Tensor& s) {
  if (!GradMode::is_enabled()) return binary_kernel_call(op, name, g, s, s.dtype());
  switch (op) {
    case BinaryOp::TanhBackward: return g * rsub(s * s, 1);
    case BinaryOp::SigmoidBackward: return g * s * rsub(s, 1);
    case BinaryOp::ReluBackward: return g * gt(s, 0);
    case BinaryOp::GeluBackward: {
      Tensor cdf = (erf(s * 0.70710678118654752440) + 1.0) * 0.5;
      Tensor pdf = exp(square(s) * -0.5) * 0.39894228040143267794;
      return g * (cdf + s * pdf);
    }
    case BinaryOp::GeluTanhBackward: {
      const double k = 0.79788456080286535588, c = 0.044715;
      Tensor t = tanh((s + s * square(s) * c) * k);
      Tensor dinner = (square(s) * (3 * c) + 1.0) * k;
      return g * ((t + 1.0) * 0.5 + s * rsub(square(t), 1) * dinner * 0.5);
    }
    default: EMBER_INTERNAL_ASSERT(false, name << ": no composed backward formula");
  }
}

void check_not_bool(const char* op, DType t) {
  EMBER_CHECK(t != DType::Bool, op << ": not defined for bool tensors; use logical ops, or convert with .to()");
}

}  // namespace

DType result_type(const Tensor& a, const Tensor& b) {
  bool za = a.dim() == 0, zb = b.dim() == 0;
  if (za == zb) return promote_types(a.dtype(), b.dtype());
  DType dimmed = za ? b.dtype() : a.dtype(), zero = za ? a.dtype() : b.dtype();
  auto category = [](DType t) { return is_floating(t) ? 2 : t == DType::Bool ? 0 : 1; };
  return category(zero) > category(dimmed) ? promote_types(dimmed, zero) : dimmed;
}

// ---------------- unary ----------------

#define EMBER_FLOAT_UNARY(fn, OP, NAME, SAVE, GRAD)                      \
  Tensor fn(const Tensor& x) {                                           \
    Tensor y = unary_kernel_call(UnaryOp::OP, #fn, x, float_compute(x)); \
    if (needs_grad(x)) {                                                 \
      SavedTensor saved = SAVE;                                          \
      record(NAME, {&y}, {x}, [saved](const TensorList& g) {             \
        Tensor s = saved.unpack(NAME);                                   \
        return TensorList{GRAD};                                         \
      });                                                                \
    }                                                                    \
    return y;                                                            \
  }

EMBER_FLOAT_UNARY(exp, Exp, "ExpBackward", SavedTensor::output(y), g[0] * s)
EMBER_FLOAT_UNARY(log, Log, "LogBackward", SavedTensor(x), g[0] / s)
EMBER_FLOAT_UNARY(sqrt, Sqrt, "SqrtBackward", SavedTensor::output(y), g[0] / (s * 2.0))
EMBER_FLOAT_UNARY(rsqrt, Rsqrt, "RsqrtBackward", SavedTensor::output(y), g[0] * (s * s * s) * -0.5)
EMBER_FLOAT_UNARY(tanh, Tanh, "TanhBackward", SavedTensor::output(y),
                  backward_formula(BinaryOp::TanhBackward, "tanh_backward", g[0], s))
EMBER_FLOAT_UNARY(sigmoid, Sigmoid, "SigmoidBackward", SavedTensor::output(y),
                  backward_formula(BinaryOp::SigmoidBackward, "sigmoid_backward", g[0], s))
EMBER_FLOAT_UNARY(gelu, Gelu, "GeluBackward", SavedTensor(x),
                  backward_formula(BinaryOp::GeluBackward, "gelu_backward", g[0], s))
Tensor gelu(const Tensor& x, std::string_view approximate) {
  if (approximate == "none") return gelu(x);
  EMBER_CHECK(approximate == "tanh", "gelu: approximate must be 'none' or 'tanh', got '" << approximate << "'");
  Tensor y = unary_kernel_call(UnaryOp::GeluTanh, "gelu", x, float_compute(x));
  if (needs_grad(x)) {
    SavedTensor saved(x);
    record("GeluBackward", {&y}, {x}, [saved](const TensorList& g) {
      Tensor s = saved.unpack("GeluBackward");
      return TensorList{backward_formula(BinaryOp::GeluTanhBackward, "gelu_backward", g[0], s)};
    });
  }
  return y;
}

Tensor gelu_backward(const Tensor& grad, const Tensor& x, std::string_view approximate) {
  EMBER_CHECK(approximate == "none" || approximate == "tanh",
              "gelu_backward: approximate must be 'none' or 'tanh', got '" << approximate << "'");
  EMBER_CHECK(grad.shape() == x.shape() && grad.dtype() == x.dtype() && grad.device() == x.device(),
              "gelu_backward: grad and input must match, but got grad " << detail::describe(grad) << " and input "
                                                                        << detail::describe(x));
  const BinaryOp op = approximate == "tanh" ? BinaryOp::GeluTanhBackward : BinaryOp::GeluBackward;
  return backward_formula(op, "gelu_backward", grad, x);
}

EMBER_FLOAT_UNARY(erf, Erf, "ErfBackward", SavedTensor(x), g[0] * exp(-square(s)) * 1.12837916709551257390)
EMBER_FLOAT_UNARY(sin, Sin, "SinBackward", SavedTensor(x), g[0] * cos(s))
EMBER_FLOAT_UNARY(cos, Cos, "CosBackward", SavedTensor(x), -(g[0] * sin(s)))
EMBER_FLOAT_UNARY(reciprocal, Reciprocal, "ReciprocalBackward", SavedTensor::output(y), -(g[0] * s * s))
#undef EMBER_FLOAT_UNARY

Tensor neg(const Tensor& x) {
  check_not_bool("neg", x.dtype());
  Tensor y = unary_kernel_call(UnaryOp::Neg, "neg", x, x.dtype());
  if (needs_grad(x)) record("NegBackward", {&y}, {x}, [](const TensorList& g) { return TensorList{-g[0]}; });
  return y;
}

Tensor relu(const Tensor& x) {
  check_not_bool("relu", x.dtype());
  Tensor y = unary_kernel_call(UnaryOp::Relu, "relu", x, x.dtype());
  if (needs_grad(x)) {
    SavedTensor saved = SavedTensor::output(y);
    record("ReluBackward", {&y}, {x}, [saved](const TensorList& g) {
      Tensor s = saved.unpack("ReluBackward");
      return TensorList{backward_formula(BinaryOp::ReluBackward, "relu_backward", g[0], s)};
    });
  }
  return y;
}

Tensor abs(const Tensor& x) {
  check_not_bool("abs", x.dtype());
  Tensor y = unary_kernel_call(UnaryOp::Abs, "abs", x, x.dtype());
  if (needs_grad(x)) {
    SavedTensor saved(x);
    record("AbsBackward", {&y}, {x},
           [saved](const TensorList& g) { return TensorList{g[0] * sign(saved.unpack("AbsBackward"))}; });
  }
  return y;
}

Tensor sign(const Tensor& x) {
  check_not_bool("sign", x.dtype());
  Tensor y = unary_kernel_call(UnaryOp::Sign, "sign", x, x.dtype());
  if (needs_grad(x))
    record("SignBackward", {&y}, {x}, [](const TensorList& g) { return TensorList{zeros_like(g[0])}; });
  return y;
}

Tensor square(const Tensor& x) {
  check_not_bool("square", x.dtype());
  Tensor y = unary_kernel_call(UnaryOp::Square, "square", x, x.dtype());
  if (needs_grad(x)) {
    SavedTensor saved(x);
    record("SquareBackward", {&y}, {x},
           [saved](const TensorList& g) { return TensorList{g[0] * saved.unpack("SquareBackward") * 2.0}; });
  }
  return y;
}

Tensor logical_not(const Tensor& x) {
  Tensor b = convert(x, DType::Bool, x.device());
  return unary_kernel_call(UnaryOp::LogicalNot, "logical_not", b, DType::Bool);
}

Tensor pow(const Tensor& x, const Scalar& e) {
  DType compute = promote_with_scalar(x.dtype(), e);
  check_not_bool("pow", compute);
  EMBER_CHECK(is_floating(compute) || e.is_floating() || e.to_int() >= 0,
              "pow: integers to negative integer powers are not allowed (tensor of "
                  << detail::describe(x) << ", exponent " << e.to_int() << "); convert to a floating dtype first");
  Tensor y = scalar_kernel_call(BinaryOp::Pow, "pow", x, e, ScalarOperand::Side::Rhs, compute);
  if (needs_grad(x)) {
    SavedTensor saved(x);
    double ev = e.to_double();
    record("PowBackward", {&y}, {x}, [saved, ev](const TensorList& g) {
      if (ev == 0.0) return TensorList{zeros_like(g[0])};
      return TensorList{g[0] * pow(saved.unpack("PowBackward"), ev - 1.0) * ev};
    });
  }
  return y;
}

Tensor pow(const Tensor& x, const Tensor& e) {
  DType compute = result_type(x, e);
  check_not_bool("pow", compute);
  Tensor y = binary_kernel_call(BinaryOp::Pow, "pow", x, e, compute);
  if (needs_grad(x, e)) {
    SavedTensor sx(x), se(e), sy = SavedTensor::output(y);
    Shape xs = x.shape(), es = e.shape();
    bool gx = x.requires_grad(), ge_ = e.requires_grad();
    record("PowBackward", {&y}, {x, e}, [=](const TensorList& g) {
      Tensor xv = sx.unpack("PowBackward"), ev = se.unpack("PowBackward");
      Tensor dx, de;
      // An exponent of 0 has derivative 0 in x, also at x == 0 (not 0 * inf).
      if (gx) dx = sum_to(where(eq(ev, 0), zeros_like(g[0]), g[0] * ev * pow(xv, ev - 1.0)), xs);
      if (ge_) {
        // d/de x^e = x^e log x, taken as 0 where x == 0 and e >= 0 (PyTorch's convention).
        Tensor t = g[0] * sy.unpack("PowBackward") * log(xv);
        de = sum_to(where(logical_and(eq(xv, 0), ge(ev, 0)), zeros_like(t), t), es);
      }
      return TensorList{dx, de};
    });
  }
  return y;
}

Tensor clamp(const Tensor& x, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  EMBER_CHECK(lo || hi, "clamp: at least one of min and max must be given");
  Tensor y = x;
  {
    NoGradGuard no_grad;
    if (lo)
      y = scalar_kernel_call(BinaryOp::Maximum, "clamp", y, *lo, ScalarOperand::Side::Rhs,
                             promote_with_scalar(y.dtype(), *lo));
    if (hi)
      y = scalar_kernel_call(BinaryOp::Minimum, "clamp", y, *hi, ScalarOperand::Side::Rhs,
                             promote_with_scalar(y.dtype(), *hi));
  }
  if (needs_grad(x)) {
    SavedTensor saved(x);
    record("ClampBackward", {&y}, {x}, [saved, lo, hi](const TensorList& g) {
      Tensor xv = saved.unpack("ClampBackward");
      Tensor keep = ones_like(xv).to(DType::Bool);
      if (lo) keep = logical_and(keep, ge(xv, *lo));
      if (hi) keep = logical_and(keep, le(xv, *hi));
      return TensorList{where(keep, g[0], zeros_like(g[0]))};
    });
  }
  return y;
}

// ---------------- binary ----------------

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (alpha.to_double() != 1.0) return add(a, mul(b, alpha));
  Tensor y = binary_kernel_call(BinaryOp::Add, "add", a, b, result_type(a, b));
  if (needs_grad(a, b)) {
    Shape as = a.shape(), bs = b.shape();
    record("AddBackward", {&y}, {a, b}, [as, bs](const TensorList& g) {
      return TensorList{sum_to(g[0], as), sum_to(g[0], bs)};
    });
  }
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (alpha.to_double() != 1.0) return sub(a, mul(b, alpha));
  DType compute = result_type(a, b);
  check_not_bool("sub", compute);
  Tensor y = binary_kernel_call(BinaryOp::Sub, "sub", a, b, compute);
  if (needs_grad(a, b)) {
    Shape as = a.shape(), bs = b.shape();
    record("SubBackward", {&y}, {a, b}, [as, bs](const TensorList& g) {
      return TensorList{sum_to(g[0], as), sum_to(-g[0], bs)};
    });
  }
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = binary_kernel_call(BinaryOp::Mul, "mul", a, b, result_type(a, b));
  if (needs_grad(a, b)) {
    SavedTensor sa = b.requires_grad() ? SavedTensor(a) : SavedTensor();
    SavedTensor sb = a.requires_grad() ? SavedTensor(b) : SavedTensor();
    Shape as = a.shape(), bs = b.shape();
    record("MulBackward", {&y}, {a, b}, [sa, sb, as, bs](const TensorList& g) {
      Tensor da = sb.defined() ? sum_to(g[0] * sb.unpack("MulBackward"), as) : Tensor();
      Tensor db = sa.defined() ? sum_to(g[0] * sa.unpack("MulBackward"), bs) : Tensor();
      return TensorList{da, db};
    });
  }
  return y;
}

Tensor div(const Tensor& a, const Tensor& b) {
  DType compute = result_type(a, b);
  if (!is_floating(compute)) compute = kDefaultFloat;  // true division
  Tensor y = binary_kernel_call(BinaryOp::Div, "div", a, b, compute);
  if (needs_grad(a, b)) {
    SavedTensor sb(b), sy = SavedTensor::output(y);
    Shape as = a.shape(), bs = b.shape();
    bool ga = a.requires_grad(), gb = b.requires_grad();
    record("DivBackward", {&y}, {a, b}, [=](const TensorList& g) {
      Tensor bv = sb.unpack("DivBackward");
      Tensor q = g[0] / bv;
      return TensorList{ga ? sum_to(q, as) : Tensor(), gb ? sum_to(-(q * sy.unpack("DivBackward")), bs) : Tensor()};
    });
  }
  return y;
}

namespace {
Tensor min_max(BinaryOp op, const char* name, const char* node, const Tensor& a, const Tensor& b) {
  Tensor y = binary_kernel_call(op, name, a, b, result_type(a, b));
  if (needs_grad(a, b)) {
    SavedTensor sa(a), sb(b);
    Shape as = a.shape(), bs = b.shape();
    bool is_max = op == BinaryOp::Maximum;
    record(node, {&y}, {a, b}, [=](const TensorList& g) {
      Tensor av = sa.unpack(node), bv = sb.unpack(node);
      // Ties split the gradient evenly, as in PyTorch.
      Tensor half = g[0] * 0.5, zero = zeros_like(g[0]);
      Tensor a_wins = is_max ? gt(av, bv) : lt(av, bv);
      Tensor tie = eq(av, bv);
      Tensor da = where(a_wins, g[0], where(tie, half, zero));
      Tensor db = where(a_wins, zero, where(tie, half, g[0]));
      return TensorList{sum_to(da, as), sum_to(db, bs)};
    });
  }
  return y;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) {
  return min_max(BinaryOp::Maximum, "maximum", "MaximumBackward", a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return min_max(BinaryOp::Minimum, "minimum", "MinimumBackward", a, b);
}

Tensor add(const Tensor& a, const Scalar& s) {
  Tensor y =
      scalar_kernel_call(BinaryOp::Add, "add", a, s, ScalarOperand::Side::Rhs, promote_with_scalar(a.dtype(), s));
  if (needs_grad(a)) record("AddBackward", {&y}, {a}, [](const TensorList& g) { return TensorList{g[0]}; });
  return y;
}

Tensor sub(const Tensor& a, const Scalar& s) {
  DType compute = promote_with_scalar(a.dtype(), s);
  check_not_bool("sub", compute);
  Tensor y = scalar_kernel_call(BinaryOp::Sub, "sub", a, s, ScalarOperand::Side::Rhs, compute);
  if (needs_grad(a)) record("SubBackward", {&y}, {a}, [](const TensorList& g) { return TensorList{g[0]}; });
  return y;
}

Tensor rsub(const Tensor& a, const Scalar& s) {
  DType compute = promote_with_scalar(a.dtype(), s);
  check_not_bool("rsub", compute);
  Tensor y = scalar_kernel_call(BinaryOp::Sub, "rsub", a, s, ScalarOperand::Side::Lhs, compute);
  if (needs_grad(a)) record("RsubBackward", {&y}, {a}, [](const TensorList& g) { return TensorList{-g[0]}; });
  return y;
}

Tensor mul(const Tensor& a, const Scalar& s) {
  Tensor y =
      scalar_kernel_call(BinaryOp::Mul, "mul", a, s, ScalarOperand::Side::Rhs, promote_with_scalar(a.dtype(), s));
  if (needs_grad(a)) record("MulBackward", {&y}, {a}, [s](const TensorList& g) { return TensorList{g[0] * s}; });
  return y;
}

Tensor div(const Tensor& a, const Scalar& s) {
  DType compute = promote_with_scalar(a.dtype(), s);
  if (!is_floating(compute)) compute = kDefaultFloat;
  Tensor y = scalar_kernel_call(BinaryOp::Div, "div", a, s, ScalarOperand::Side::Rhs, compute);
  if (needs_grad(a)) record("DivBackward", {&y}, {a}, [s](const TensorList& g) { return TensorList{g[0] / s}; });
  return y;
}

Tensor rdiv(const Tensor& a, const Scalar& s) {
  DType compute = promote_with_scalar(a.dtype(), s);
  if (!is_floating(compute)) compute = kDefaultFloat;
  Tensor y = scalar_kernel_call(BinaryOp::Div, "rdiv", a, s, ScalarOperand::Side::Lhs, compute);
  if (needs_grad(a)) {
    SavedTensor sa(a), sy = SavedTensor::output(y);
    record("RdivBackward", {&y}, {a}, [sa, sy](const TensorList& g) {
      return TensorList{-(g[0] * sy.unpack("RdivBackward") / sa.unpack("RdivBackward"))};
    });
  }
  return y;
}

Tensor logical_and(const Tensor& a, const Tensor& b) {
  Device dev = common_device("logical_and", {&a, &b});
  return binary_kernel_call(BinaryOp::LogicalAnd, "logical_and", convert(a, DType::Bool, dev),
                            convert(b, DType::Bool, dev), DType::Bool);
}

Tensor logical_or(const Tensor& a, const Tensor& b) {
  Device dev = common_device("logical_or", {&a, &b});
  return binary_kernel_call(BinaryOp::LogicalOr, "logical_or", convert(a, DType::Bool, dev),
                            convert(b, DType::Bool, dev), DType::Bool);
}

// ---------------- comparisons ----------------

namespace {
Tensor compare_call(CompareOp op, const char* name, const Tensor& a, const Tensor& b) {
  Device dev = common_device(name, {&a, &b});
  DType compute = result_type(a, b);
  Tensor ca = convert(a, compute, dev), cb = convert(b, compute, dev);
  Tensor out = empty_elementwise_output(broadcast_shapes(name, a.shape(), b.shape()), DType::Bool, dev, {&ca, &cb});
  compare_stub(dev.type)(op, make_elementwise_args(name, out, {&ca, &cb}), compute, {});
  return out;
}
Tensor compare_call(CompareOp op, const char* name, const Tensor& a, const Scalar& s) {
  DType compute = promote_with_scalar(a.dtype(), s);
  Tensor ca = convert(a, compute, a.device());
  Tensor out = empty_elementwise_output(a.shape(), DType::Bool, a.device(), {&ca});
  compare_stub(a.device().type)(op, make_elementwise_args(name, out, {&ca}), compute, {ScalarOperand::Side::Rhs, s});
  return out;
}
}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare_call(CompareOp::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_call(CompareOp::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_call(CompareOp::Lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_call(CompareOp::Le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_call(CompareOp::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_call(CompareOp::Ge, "ge", a, b); }
Tensor eq(const Tensor& a, const Scalar& b) { return compare_call(CompareOp::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Scalar& b) { return compare_call(CompareOp::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Scalar& b) { return compare_call(CompareOp::Lt, "lt", a, b); }
Tensor le(const Tensor& a, const Scalar& b) { return compare_call(CompareOp::Le, "le", a, b); }
Tensor gt(const Tensor& a, const Scalar& b) { return compare_call(CompareOp::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Scalar& b) { return compare_call(CompareOp::Ge, "ge", a, b); }

// ---------------- where ----------------

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  EMBER_CHECK(cond.dtype() == DType::Bool, "where: the condition must be a bool tensor, got " << describe(cond));
  Device dev = common_device("where", {&cond, &a, &b});
  DType compute = result_type(a, b);
  Shape shape = broadcast_shapes("where", cond.shape(), broadcast_shapes("where", a.shape(), b.shape()));
  Tensor cc = convert(cond, DType::Bool, dev), ca = convert(a, compute, dev), cb = convert(b, compute, dev);
  Tensor out = empty_elementwise_output(shape, compute, dev, {&ca, &cb, &cc});
  where_stub(dev.type)(make_elementwise_args("where", out, {&cc, &ca, &cb}), compute);
  if (needs_grad(a, b)) {
    Tensor c = cond.detach();
    Shape as = a.shape(), bs = b.shape();
    bool ga = a.requires_grad(), gb = b.requires_grad();
    record("WhereBackward", {&out}, {a, b}, [c, as, bs, ga, gb](const TensorList& g) {
      Tensor zero = zeros_like(g[0]);
      return TensorList{ga ? sum_to(where(c, g[0], zero), as) : Tensor(),
                        gb ? sum_to(where(c, zero, g[0]), bs) : Tensor()};
    });
  }
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) {
  return where(cond, a, full({}, b, promote_with_scalar(a.dtype(), b), a.device()));
}

Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b) {
  return where(cond, full({}, a, promote_with_scalar(b.dtype(), a), b.device()), b);
}

// ---------------- Tensor method forwards ----------------

Tensor Tensor::neg() const { return ember::neg(*this); }
Tensor Tensor::exp() const { return ember::exp(*this); }
Tensor Tensor::log() const { return ember::log(*this); }
Tensor Tensor::sqrt() const { return ember::sqrt(*this); }
Tensor Tensor::rsqrt() const { return ember::rsqrt(*this); }
Tensor Tensor::tanh() const { return ember::tanh(*this); }
Tensor Tensor::sigmoid() const { return ember::sigmoid(*this); }
Tensor Tensor::relu() const { return ember::relu(*this); }
Tensor Tensor::gelu() const { return ember::gelu(*this); }
Tensor Tensor::gelu(std::string_view approximate) const { return ember::gelu(*this, approximate); }
Tensor Tensor::abs() const { return ember::abs(*this); }
Tensor Tensor::pow(const Scalar& e) const { return ember::pow(*this, e); }
Tensor Tensor::pow(const Tensor& e) const { return ember::pow(*this, e); }

}  // namespace ember
