// Scalar: a number given to an op beside tensors (a * 2.0f, fill_(3)).
//
// It remembers whether it was written as a floating, integral or boolean
// value, because PyTorch's promotion depends on that: int_tensor * 2.5 is
// float32, int_tensor * 2 stays integral, half_tensor * 2.5 stays half.
#pragma once

#include <cstdint>
#include <limits>
#include <type_traits>

#include "ember/core/dtype.h"

namespace ember {

class Scalar {
 public:
  enum class Kind : uint8_t { Floating, Integral, Boolean };

  Scalar() : Scalar(0.0) {}
  Scalar(bool v) : d_(v), i_(v), kind_(Kind::Boolean) {}
  template <typename T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Scalar(T v) : d_(double(v)), i_(int64_t(v)), kind_(Kind::Integral) {}
  // The integral view of a floating value is only used for integral dtypes;
  // it is clamped so that inf, NaN and huge values convert without undefined
  // behaviour.
  template <typename T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Scalar(T v) : d_(double(v)), i_(saturate(double(v))), kind_(Kind::Floating) {}
  Scalar(Half v) : Scalar(float(v)) {}
  Scalar(BFloat16 v) : Scalar(float(v)) {}

  Kind kind() const { return kind_; }
  bool is_floating() const { return kind_ == Kind::Floating; }
  double to_double() const { return d_; }
  int64_t to_int() const { return i_; }

  // The value in element type T, exact for integers beyond 2^53.
  template <typename T>
  T to() const {
    if constexpr (std::is_same_v<T, bool>) {
      return kind_ == Kind::Floating ? d_ != 0.0 : i_ != 0;
    } else if constexpr (std::is_integral_v<T>) {
      return kind_ == Kind::Floating ? T(saturate(d_)) : T(i_);
    } else {
      return T(kind_ == Kind::Floating ? d_ : double(i_));
    }
  }

  // The dtype a tensor of this scalar alone would have (float32, int64, bool).
  DType natural_dtype() const {
    return kind_ == Kind::Floating ? kDefaultFloat : kind_ == Kind::Integral ? DType::Int64 : DType::Bool;
  }

 private:
  static int64_t saturate(double v) {
    if (!(v == v)) return 0;
    if (v >= 9223372036854775807.0) return INT64_MAX;
    if (v <= -9223372036854775808.0) return INT64_MIN;
    return int64_t(v);
  }

  double d_;
  int64_t i_;
  Kind kind_;
};

// The result dtype of tensor (of dtype t) op scalar s, as PyTorch computes it:
// the scalar only moves the result up a category (bool -> int -> float).
inline DType promote_with_scalar(DType t, const Scalar& s) {
  if (s.kind() == Scalar::Kind::Floating && !is_floating(t)) return kDefaultFloat;
  if (s.kind() == Scalar::Kind::Integral && t == DType::Bool) return DType::Int64;
  return t;
}

}  // namespace ember
