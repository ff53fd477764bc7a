// Element types, their sizes and names, and PyTorch's type promotion.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string>
#include <type_traits>

#include "ember/core/error.h"
#include "ember/core/half.h"

namespace ember {

enum class DType : uint8_t { Float32, Float64, Float16, BFloat16, Int32, Int64, Bool };

inline constexpr int kNumDTypes = 7;

size_t dtype_size(DType t);
const char* dtype_name(DType t);  // "float32", "int64", ...
std::ostream& operator<<(std::ostream& os, DType t);

inline bool is_floating(DType t) {
  return t == DType::Float32 || t == DType::Float64 || t == DType::Float16 || t == DType::BFloat16;
}
inline bool is_integral(DType t) { return t == DType::Int32 || t == DType::Int64; }

// torch.promote_types: the smallest type both a and b convert to without
// losing their category (bool < integral < floating). float16 with bfloat16
// gives float32, as in PyTorch.
DType promote_types(DType a, DType b);

// The dtype that floating factories and int -> float promotion use.
inline constexpr DType kDefaultFloat = DType::Float32;

// C++ element type <-> DType.
template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::Float32;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::Float64;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::Float16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::BFloat16;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::Int32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::Int64;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::Bool;
};

}  // namespace ember

// EMBER_DISPATCH_DTYPE(dtype, "op", [&]<typename T>() { ... }) calls the
// lambda with T bound to the C++ type of dtype. The _FLOAT variant accepts
// only floating types and names the op in its error otherwise.
#define EMBER_DISPATCH_CASE_(D, T) \
  case ::ember::DType::D:          \
    return ember_dispatch_fn_.template operator()<T>();

#define EMBER_DISPATCH_DTYPE(dtype, op, ...)                              \
  [&]() {                                                                 \
    auto&& ember_dispatch_fn_ = __VA_ARGS__;                              \
    switch (dtype) {                                                      \
      EMBER_DISPATCH_CASE_(Float32, float)                                \
      EMBER_DISPATCH_CASE_(Float64, double)                               \
      EMBER_DISPATCH_CASE_(Float16, ::ember::Half)                        \
      EMBER_DISPATCH_CASE_(BFloat16, ::ember::BFloat16)                   \
      EMBER_DISPATCH_CASE_(Int32, int32_t)                                \
      EMBER_DISPATCH_CASE_(Int64, int64_t)                                \
      EMBER_DISPATCH_CASE_(Bool, bool)                                    \
    }                                                                     \
    EMBER_INTERNAL_ASSERT(false, op << ": unknown dtype " << int(dtype)); \
  }()

#define EMBER_DISPATCH_FLOAT(dtype, op, ...)                                    \
  [&]() {                                                                       \
    auto&& ember_dispatch_fn_ = __VA_ARGS__;                                    \
    switch (dtype) {                                                            \
      EMBER_DISPATCH_CASE_(Float32, float)                                      \
      EMBER_DISPATCH_CASE_(Float64, double)                                     \
      EMBER_DISPATCH_CASE_(Float16, ::ember::Half)                              \
      EMBER_DISPATCH_CASE_(BFloat16, ::ember::BFloat16)                         \
      default: break;                                                           \
    }                                                                           \
    EMBER_FAIL(op << ": expected a floating dtype (float32, float64, float16, " \
                  << "bfloat16) but got " << ::ember::dtype_name(dtype));       \
  }()

namespace ember {

// For kernels that take 16-bit float data with float32 companions (a loss
// of half logits under autocast, batch norm's float32 parameters beside
// half activations): calls f.template operator()<C>() with C = T when
// `companion` is `data` (the dtype of T), or C = float when T is float16 or
// bfloat16 and `companion` is float32; any other pairing is an
// ember::Error naming op.
template <typename T, typename F>
void dispatch_same_or_float32(DType data, DType companion, const char* op, F&& f) {
  if (companion == data) return f.template operator()<T>();
  EMBER_CHECK(companion == DType::Float32 && (data == DType::Float16 || data == DType::BFloat16),
              op << ": " << dtype_name(companion) << " beside " << dtype_name(data)
                 << " data; it takes the data's dtype, or float32 beside float16 and bfloat16");
  if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) f.template operator()<float>();
}

}  // namespace ember
