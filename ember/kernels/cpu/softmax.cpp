// CPU softmax and log_softmax kernels, forward and backward, over a dense
// [outer, dim, inner] block (see ember/core/ops/softmax_kernels.h for the
// contract).
//
// Each outer block is walked row by row (k outer, i inner) so memory is read
// in order for any inner size; one accumulator per inner position holds the
// running max and sum of its row. The outer blocks split over threads
// (ember/core/parallel_for.h); each row's result equals one thread's.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/core/ops/softmax_kernels.h"
#include "ember/core/parallel_for.h"

namespace ember::cpu {
namespace {

// float for the half types and float32, double for float64.
template <typename T>
using softmax_acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void softmax_forward(const SoftmaxArgs& a, bool log) {
  using A = softmax_acc_t<T>;
  const size_t inner = size_t(a.inner);
  const int64_t block = std::max<int64_t>(a.dim * a.inner, 1);
  parallel_for(0, a.outer, kCpuGrain / block + 1, [&](int64_t o0, int64_t o1) {
    std::vector<A> m(inner), s(inner);
    for (int64_t o = o0; o < o1; ++o) {
      const T* x = static_cast<const T*>(a.in) + o * a.dim * a.inner;
      T* y = static_cast<T*>(a.out) + o * a.dim * a.inner;
      std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
      for (int64_t k = 0; k < a.dim; ++k) {
        const T* row = x + k * a.inner;
        for (size_t i = 0; i < inner; ++i) {
          A v = A(row[i]);
          // Once a NaN is the max it stays, so the row comes out NaN.
          if (m[i] == m[i] && (v > m[i] || v != v)) m[i] = v;
        }
      }
      std::fill(s.begin(), s.end(), A(0));
      for (int64_t k = 0; k < a.dim; ++k) {
        const T* row = x + k * a.inner;
        for (size_t i = 0; i < inner; ++i) s[i] += std::exp(A(row[i]) - m[i]);
      }
      if (log) {
        // (x - m) - log(s), not x - (m + log(s)): m + log(s) would lose the
        // low bits of log(s) when |m| is large.
        for (size_t i = 0; i < inner; ++i) s[i] = std::log(s[i]);
        for (int64_t k = 0; k < a.dim; ++k) {
          for (size_t i = 0; i < inner; ++i) {
            int64_t j = k * a.inner + int64_t(i);
            y[j] = T((A(x[j]) - m[i]) - s[i]);
          }
        }
      } else {
        for (size_t i = 0; i < inner; ++i) s[i] = A(1) / s[i];
        for (int64_t k = 0; k < a.dim; ++k) {
          for (size_t i = 0; i < inner; ++i) {
            int64_t j = k * a.inner + int64_t(i);
            y[j] = T(std::exp(A(x[j]) - m[i]) * s[i]);
          }
        }
      }
    }
  });
}

template <typename T>
void softmax_backward(const SoftmaxArgs& a, bool log) {
  using A = softmax_acc_t<T>;
  const size_t inner = size_t(a.inner);
  const int64_t block = std::max<int64_t>(a.dim * a.inner, 1);
  parallel_for(0, a.outer, kCpuGrain / block + 1, [&](int64_t o0, int64_t o1) {
    std::vector<A> s(inner);
    for (int64_t o = o0; o < o1; ++o) {
      const int64_t base = o * a.dim * a.inner;
      const T* y = static_cast<const T*>(a.in) + base;
      const T* g = static_cast<const T*>(a.grad) + base;
      T* dx = static_cast<T*>(a.out) + base;
      // s = sum(g * y) for softmax, sum(g) for log_softmax.
      std::fill(s.begin(), s.end(), A(0));
      for (int64_t k = 0; k < a.dim; ++k) {
        for (size_t i = 0; i < inner; ++i) {
          int64_t j = k * a.inner + int64_t(i);
          s[i] += log ? A(g[j]) : A(g[j]) * A(y[j]);
        }
      }
      for (int64_t k = 0; k < a.dim; ++k) {
        for (size_t i = 0; i < inner; ++i) {
          int64_t j = k * a.inner + int64_t(i);
          A yv = A(y[j]), gv = A(g[j]);
          dx[j] = T(log ? gv - std::exp(yv) * s[i] : yv * (gv - s[i]));
        }
      }
    }
  });
}

void softmax_kernel(SoftmaxKind kind, const SoftmaxArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "softmax", [&]<typename T>() {
    switch (kind) {
      case SoftmaxKind::Softmax: return softmax_forward<T>(a, false);
      case SoftmaxKind::LogSoftmax: return softmax_forward<T>(a, true);
      case SoftmaxKind::SoftmaxBackward: return softmax_backward<T>(a, false);
      case SoftmaxKind::LogSoftmaxBackward: return softmax_backward<T>(a, true);
    }
    EMBER_FAIL("softmax: unknown kernel kind " << int(kind));
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(softmax_stub, DeviceType::CPU, softmax_kernel);

}  // namespace ember::cpu
