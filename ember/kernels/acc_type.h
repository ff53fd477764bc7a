// acc_t<T>: the type arithmetic on elements of type T is done in, on CPU and
// GPU alike: float for the 16-bit float types, T itself otherwise.
#pragma once

#include "ember/core/half.h"

namespace ember {

template <typename T>
struct acc {
  using type = T;
};
template <>
struct acc<Half> {
  using type = float;
};
template <>
struct acc<BFloat16> {
  using type = float;
};
template <typename T>
using acc_t = typename acc<T>::type;

}  // namespace ember
