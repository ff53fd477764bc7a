// The scalar math of every elementwise op, shared by the CPU and CUDA
// kernels so that both compute the same formula.
//
// Contract: T is the compute type (float for half types, see acc_t); each
// function is the op applied to one element. Integer division and pow on
// integers follow PyTorch (div is only reached for floating types: the
// front-end promotes ints to float32 for true division).
#pragma once

#include <cmath>
#include <type_traits>

#include "ember/core/half.h"
#include "ember/core/ops/elementwise_kernels.h"

namespace ember::math {

#if defined(__CUDA_ARCH__)
#define EMBER_MATH_FN(name) ::name
#else
#define EMBER_MATH_FN(name) std::name
#endif

template <typename T>
EMBER_HOST_DEVICE inline T gelu(T x) {
  return T(0.5) * x * (T(1) + EMBER_MATH_FN(erf)(x * T(0.70710678118654752440)));
}

template <typename T>
EMBER_HOST_DEVICE inline T gelu_grad(T x) {
  T cdf = T(0.5) * (T(1) + EMBER_MATH_FN(erf)(x * T(0.70710678118654752440)));
  T pdf = EMBER_MATH_FN(exp)(T(-0.5) * x * x) * T(0.39894228040143267794);
  return cdf + x * pdf;
}

// PyTorch's approximate='tanh' form and its exact derivative:
//   y  = 0.5 x (1 + t),  t = tanh(k (x + c x^3)),  k = sqrt(2 / pi), c = 0.044715
//   y' = 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
template <typename T>
EMBER_HOST_DEVICE inline T gelu_tanh(T x) {
  T t = EMBER_MATH_FN(tanh)(T(0.79788456080286535588) * (x + T(0.044715) * x * x * x));
  return T(0.5) * x * (T(1) + t);
}

template <typename T>
EMBER_HOST_DEVICE inline T gelu_tanh_grad(T x) {
  T x2 = x * x;
  T t = EMBER_MATH_FN(tanh)(T(0.79788456080286535588) * (x + T(0.044715) * x2 * x));
  T dinner = T(0.79788456080286535588) * (T(1) + T(3 * 0.044715) * x2);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner;
}

template <UnaryOp Op, typename T>
EMBER_HOST_DEVICE inline T unary(T x) {
  if constexpr (Op == UnaryOp::Neg) return -x;
  else if constexpr (Op == UnaryOp::Abs) return x < T(0) ? -x : x;
  else if constexpr (Op == UnaryOp::Sign) return T((T(0) < x) - (x < T(0)));
  else if constexpr (Op == UnaryOp::Relu) return x < T(0) ? T(0) : x;  // NaN propagates, as in PyTorch
  else if constexpr (Op == UnaryOp::Square) return x * x;
  else if constexpr (Op == UnaryOp::LogicalNot) return !x;
  else if constexpr (Op == UnaryOp::Exp) return EMBER_MATH_FN(exp)(x);
  else if constexpr (Op == UnaryOp::Log) return EMBER_MATH_FN(log)(x);
  else if constexpr (Op == UnaryOp::Sqrt) return EMBER_MATH_FN(sqrt)(x);
  else if constexpr (Op == UnaryOp::Rsqrt) return T(1) / EMBER_MATH_FN(sqrt)(x);
  else if constexpr (Op == UnaryOp::Tanh) return EMBER_MATH_FN(tanh)(x);
  else if constexpr (Op == UnaryOp::Sigmoid) return T(1) / (T(1) + EMBER_MATH_FN(exp)(-x));
  else if constexpr (Op == UnaryOp::Gelu) return gelu(x);
  else if constexpr (Op == UnaryOp::GeluTanh) return gelu_tanh(x);
  else if constexpr (Op == UnaryOp::Sin) return EMBER_MATH_FN(sin)(x);
  else if constexpr (Op == UnaryOp::Cos) return EMBER_MATH_FN(cos)(x);
  else if constexpr (Op == UnaryOp::Reciprocal) return T(1) / x;
  else if constexpr (Op == UnaryOp::Erf) return EMBER_MATH_FN(erf)(x);
  else static_assert(Op == UnaryOp::Neg, "unhandled unary op");
}

template <typename T>
constexpr bool is_float_type = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;

// Whether a kernel exists for Op on element type T (the front-end promotes
// or rejects the other combinations before dispatch): bool has only logical
// not; integers have the ops that stay integral.
template <UnaryOp Op, typename T>
constexpr bool unary_supported() {
  if constexpr (std::is_same_v<T, bool>) return Op == UnaryOp::LogicalNot;
  else if constexpr (is_float_type<T>) return Op != UnaryOp::LogicalNot;
  else
    return Op == UnaryOp::Neg || Op == UnaryOp::Abs || Op == UnaryOp::Sign || Op == UnaryOp::Relu ||
           Op == UnaryOp::Square;
}

template <BinaryOp Op, typename T>
EMBER_HOST_DEVICE inline T binary(T a, T b) {
  if constexpr (std::is_same_v<T, bool> && Op == BinaryOp::Add) return a || b;  // as PyTorch: logical or
  else if constexpr (std::is_same_v<T, bool> && Op == BinaryOp::Mul) return a && b;
  else if constexpr (Op == BinaryOp::Add) return a + b;
  else if constexpr (Op == BinaryOp::Sub) return a - b;
  else if constexpr (Op == BinaryOp::Mul) return a * b;
  else if constexpr (Op == BinaryOp::Div) return a / b;
  else if constexpr (Op == BinaryOp::Maximum) {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;  // NaN propagates, as in PyTorch
      if (b != b) return b;
    }
    return a > b ? a : b;
  } else if constexpr (Op == BinaryOp::Minimum) {
    if constexpr (std::is_floating_point_v<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    return a < b ? a : b;
  } else if constexpr (Op == BinaryOp::Pow) {
    if constexpr (std::is_integral_v<T>) {
      // Integer power by squaring; negative exponents give 0 except for |a| == 1.
      // Overflow wraps (two's complement, as in PyTorch): the products are
      // taken in the unsigned type, where wrapping is defined.
      if constexpr (std::is_same_v<T, bool>) {
        return a || !b;
      } else {
        if (b < 0) return a == 1 ? T(1) : a == -1 ? ((b & 1) ? T(-1) : T(1)) : T(0);
        using U = std::make_unsigned_t<T>;
        U r = 1, base = U(a);
        for (U e = U(b); e; e >>= 1) {
          if (e & 1) r *= base;
          if (e > 1) base *= base;
        }
        return T(r);
      }
    } else {
      return EMBER_MATH_FN(pow)(a, b);
    }
  } else if constexpr (Op == BinaryOp::LogicalAnd) return T(a && b);
  else if constexpr (Op == BinaryOp::LogicalOr) return T(a || b);
  else if constexpr (Op == BinaryOp::ReluBackward) return b > T(0) ? a : T(0);
  else if constexpr (Op == BinaryOp::GeluBackward) return a * gelu_grad(b);
  else if constexpr (Op == BinaryOp::GeluTanhBackward) return a * gelu_tanh_grad(b);
  else if constexpr (Op == BinaryOp::TanhBackward) return a * (T(1) - b * b);
  else if constexpr (Op == BinaryOp::SigmoidBackward) return a * b * (T(1) - b);
  else static_assert(Op == BinaryOp::Add, "unhandled binary op");
}

constexpr bool binary_is_backward(BinaryOp op) {
  return op == BinaryOp::ReluBackward || op == BinaryOp::GeluBackward || op == BinaryOp::GeluTanhBackward ||
         op == BinaryOp::TanhBackward || op == BinaryOp::SigmoidBackward;
}

// Whether a kernel exists for Op on element type T: logical ops on bool
// only, true division and the fused backward formulas on floating types only,
// no subtraction or power of bools.
template <BinaryOp Op, typename T>
constexpr bool binary_supported() {
  if constexpr (Op == BinaryOp::LogicalAnd || Op == BinaryOp::LogicalOr) return std::is_same_v<T, bool>;
  else if constexpr (binary_is_backward(Op) || Op == BinaryOp::Div) return is_float_type<T>;
  else if constexpr (std::is_same_v<T, bool>)
    return Op == BinaryOp::Add || Op == BinaryOp::Mul || Op == BinaryOp::Maximum || Op == BinaryOp::Minimum;
  else return true;
}

template <CompareOp Op, typename T>
EMBER_HOST_DEVICE inline bool compare(T a, T b) {
  if constexpr (Op == CompareOp::Eq) return a == b;
  else if constexpr (Op == CompareOp::Ne) return a != b;
  else if constexpr (Op == CompareOp::Lt) return a < b;
  else if constexpr (Op == CompareOp::Le) return a <= b;
  else if constexpr (Op == CompareOp::Gt) return a > b;
  else return a >= b;
}

}  // namespace ember::math

// EMBER_SWITCH_UNARY_OP(op, OP, body): runs body with constexpr UnaryOp OP = op.
#define EMBER_OP_CASE_(Enum, Name, OP, ...) \
  case Enum::Name: {                        \
    constexpr Enum OP = Enum::Name;         \
    __VA_ARGS__;                            \
    break;                                  \
  }

#define EMBER_SWITCH_UNARY_OP(op, OP, ...)                        \
  switch (op) {                                                   \
    EMBER_OP_CASE_(::ember::UnaryOp, Neg, OP, __VA_ARGS__)        \
    EMBER_OP_CASE_(::ember::UnaryOp, Exp, OP, __VA_ARGS__)        \
    EMBER_OP_CASE_(::ember::UnaryOp, Log, OP, __VA_ARGS__)        \
    EMBER_OP_CASE_(::ember::UnaryOp, Sqrt, OP, __VA_ARGS__)       \
    EMBER_OP_CASE_(::ember::UnaryOp, Rsqrt, OP, __VA_ARGS__)      \
    EMBER_OP_CASE_(::ember::UnaryOp, Tanh, OP, __VA_ARGS__)       \
    EMBER_OP_CASE_(::ember::UnaryOp, Sigmoid, OP, __VA_ARGS__)    \
    EMBER_OP_CASE_(::ember::UnaryOp, Relu, OP, __VA_ARGS__)       \
    EMBER_OP_CASE_(::ember::UnaryOp, Gelu, OP, __VA_ARGS__)       \
    EMBER_OP_CASE_(::ember::UnaryOp, GeluTanh, OP, __VA_ARGS__)   \
    EMBER_OP_CASE_(::ember::UnaryOp, Abs, OP, __VA_ARGS__)        \
    EMBER_OP_CASE_(::ember::UnaryOp, Sign, OP, __VA_ARGS__)       \
    EMBER_OP_CASE_(::ember::UnaryOp, Sin, OP, __VA_ARGS__)        \
    EMBER_OP_CASE_(::ember::UnaryOp, Cos, OP, __VA_ARGS__)        \
    EMBER_OP_CASE_(::ember::UnaryOp, Reciprocal, OP, __VA_ARGS__) \
    EMBER_OP_CASE_(::ember::UnaryOp, Square, OP, __VA_ARGS__)     \
    EMBER_OP_CASE_(::ember::UnaryOp, LogicalNot, OP, __VA_ARGS__) \
    EMBER_OP_CASE_(::ember::UnaryOp, Erf, OP, __VA_ARGS__)        \
  }

#define EMBER_SWITCH_BINARY_OP(op, OP, ...)                              \
  switch (op) {                                                          \
    EMBER_OP_CASE_(::ember::BinaryOp, Add, OP, __VA_ARGS__)              \
    EMBER_OP_CASE_(::ember::BinaryOp, Sub, OP, __VA_ARGS__)              \
    EMBER_OP_CASE_(::ember::BinaryOp, Mul, OP, __VA_ARGS__)              \
    EMBER_OP_CASE_(::ember::BinaryOp, Div, OP, __VA_ARGS__)              \
    EMBER_OP_CASE_(::ember::BinaryOp, Maximum, OP, __VA_ARGS__)          \
    EMBER_OP_CASE_(::ember::BinaryOp, Minimum, OP, __VA_ARGS__)          \
    EMBER_OP_CASE_(::ember::BinaryOp, Pow, OP, __VA_ARGS__)              \
    EMBER_OP_CASE_(::ember::BinaryOp, LogicalAnd, OP, __VA_ARGS__)       \
    EMBER_OP_CASE_(::ember::BinaryOp, LogicalOr, OP, __VA_ARGS__)        \
    EMBER_OP_CASE_(::ember::BinaryOp, ReluBackward, OP, __VA_ARGS__)     \
    EMBER_OP_CASE_(::ember::BinaryOp, GeluBackward, OP, __VA_ARGS__)     \
    EMBER_OP_CASE_(::ember::BinaryOp, GeluTanhBackward, OP, __VA_ARGS__) \
    EMBER_OP_CASE_(::ember::BinaryOp, TanhBackward, OP, __VA_ARGS__)     \
    EMBER_OP_CASE_(::ember::BinaryOp, SigmoidBackward, OP, __VA_ARGS__)  \
  }

#define EMBER_SWITCH_COMPARE_OP(op, OP, ...)                \
  switch (op) {                                             \
    EMBER_OP_CASE_(::ember::CompareOp, Eq, OP, __VA_ARGS__) \
    EMBER_OP_CASE_(::ember::CompareOp, Ne, OP, __VA_ARGS__) \
    EMBER_OP_CASE_(::ember::CompareOp, Lt, OP, __VA_ARGS__) \
    EMBER_OP_CASE_(::ember::CompareOp, Le, OP, __VA_ARGS__) \
    EMBER_OP_CASE_(::ember::CompareOp, Gt, OP, __VA_ARGS__) \
    EMBER_OP_CASE_(::ember::CompareOp, Ge, OP, __VA_ARGS__) \
  }
