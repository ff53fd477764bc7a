// CPU cumsum over a dense [outer, dim, inner] block (contract in
// ember/core/ops/scan_kernels.h). Each outer block is walked row k by row k with
// one running sum per inner position, so memory is read in order for any
// inner size; with `reverse` the rows are walked from the last.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "ember/core/ops/scan_kernels.h"

namespace ember::cpu {
namespace {

// float for the half types and float32, double for float64, int64 for the
// integral types and bool.
template <typename T>
using scan_acc_t = std::conditional_t<
    std::is_same_v<T, double>, double,
    std::conditional_t<std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>, float,
                       int64_t>>;

template <typename T>
void cumsum_block(const ScanArgs& a) {
  using A = scan_acc_t<T>;
  std::vector<A> s(size_t(a.inner));
  for (int64_t o = 0; o < a.outer; ++o) {
    const T* x = static_cast<const T*>(a.in) + o * a.dim * a.inner;
    T* y = static_cast<T*>(a.out) + o * a.dim * a.inner;
    std::fill(s.begin(), s.end(), A(0));
    for (int64_t step = 0; step < a.dim; ++step) {
      const int64_t k = a.reverse ? a.dim - 1 - step : step;
      for (int64_t i = 0; i < a.inner; ++i) {
        s[size_t(i)] += A(x[k * a.inner + i]);
        y[k * a.inner + i] = T(s[size_t(i)]);
      }
    }
  }
}

void cumsum_cpu(const ScanArgs& a) {
  if (a.outer == 0 || a.dim == 0 || a.inner == 0) return;
  EMBER_DISPATCH_DTYPE(a.dtype, "cumsum", [&]<typename T>() { cumsum_block<T>(a); });
}

}  // namespace

EMBER_REGISTER_KERNEL(cumsum_stub, DeviceType::CPU, cumsum_cpu);

}  // namespace ember::cpu
