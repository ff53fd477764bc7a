// CPU batch-norm kernels (contract in ember/core/ops/batch_norm_kernels.h): per
// channel, Welford statistics (or the running ones), then the affine
// normalization; backward takes the two per-channel sums, then grad_input.
// P is the type of the per-channel parameters and running statistics: the
// input's, or float beside 16-bit input. Channels are independent, so they
// split over threads (ember/core/parallel_for.h) with results equal to one
// thread's.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "ember/core/ops/batch_norm_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"

namespace ember::cpu {
namespace {

template <typename T, typename S>
S load(const void* p, int64_t i) {
  return S(acc_t<T>(static_cast<const T*>(p)[i]));
}

template <typename T, typename S>
void store(void* p, int64_t i, S v) {
  static_cast<T*>(p)[i] = T(acc_t<T>(v));
}

template <typename T, typename P, typename S>
void forward(const BatchNormArgs& a) {
  const T* x = static_cast<const T*>(a.input);
  S* save_mean = static_cast<S*>(a.save_mean);
  S* save_invstd = static_cast<S*>(a.save_invstd);
  const int64_t m = a.n * a.inner;
  if (a.num_batches_tracked) ++*a.num_batches_tracked;
  parallel_for(0, a.c, kCpuGrain / std::max<int64_t>(m, 1) + 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      if (a.training) {
        S mean = 0, m2 = 0, count = 0;
        for (int64_t b = 0; b < a.n; ++b) {
          const T* row = x + (b * a.c + c) * a.inner;
          for (int64_t i = 0; i < a.inner; ++i) {
            S v = S(acc_t<T>(row[i]));
            count += 1;
            S delta = v - mean;
            mean += delta / count;
            m2 += delta * (v - mean);
          }
        }
        S var = m2 / S(m);
        save_mean[c] = mean;
        save_invstd[c] = S(1) / std::sqrt(var + S(a.eps));
        const S mom = S(a.momentum);
        if (a.running_mean) store<P, S>(a.running_mean, c, (1 - mom) * load<P, S>(a.running_mean, c) + mom * mean);
        if (a.running_var) {
          S unbiased = m2 / S(m - 1);
          store<P, S>(a.running_var, c, (1 - mom) * load<P, S>(a.running_var, c) + mom * unbiased);
        }
      } else {
        save_mean[c] = load<P, S>(a.running_mean, c);
        save_invstd[c] = S(1) / std::sqrt(load<P, S>(a.running_var, c) + S(a.eps));
      }
      const S scale = save_invstd[c] * (a.weight ? load<P, S>(a.weight, c) : S(1));
      const S shift = (a.bias ? load<P, S>(a.bias, c) : S(0)) - save_mean[c] * scale;
      for (int64_t b = 0; b < a.n; ++b) {
        const int64_t base = (b * a.c + c) * a.inner;
        for (int64_t i = 0; i < a.inner; ++i) {
          store<T, S>(a.output, base + i, load<T, S>(x, base + i) * scale + shift);
        }
      }
    }
  });
}

template <typename T, typename P, typename S>
void backward(const BatchNormArgs& a) {
  const S* save_mean = static_cast<const S*>(a.save_mean);
  const S* save_invstd = static_cast<const S*>(a.save_invstd);
  const S m = S(a.n * a.inner);
  parallel_for(0, a.c, kCpuGrain / std::max<int64_t>(a.n * a.inner, 1) + 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const S mean = save_mean[c], invstd = save_invstd[c];
      S sum_dy = 0, sum_dy_xhat = 0;
      for (int64_t b = 0; b < a.n; ++b) {
        const int64_t base = (b * a.c + c) * a.inner;
        for (int64_t i = 0; i < a.inner; ++i) {
          S dy = load<T, S>(a.grad_output, base + i);
          sum_dy += dy;
          sum_dy_xhat += dy * (load<T, S>(a.input, base + i) - mean) * invstd;
        }
      }
      if (a.grad_weight) store<P, S>(a.grad_weight, c, sum_dy_xhat);
      if (a.grad_bias) store<P, S>(a.grad_bias, c, sum_dy);
      if (!a.grad_input) continue;
      const S scale = invstd * (a.weight ? load<P, S>(a.weight, c) : S(1));
      for (int64_t b = 0; b < a.n; ++b) {
        const int64_t base = (b * a.c + c) * a.inner;
        for (int64_t i = 0; i < a.inner; ++i) {
          S dy = load<T, S>(a.grad_output, base + i);
          S dx = dy;
          if (a.training) {
            S xhat = (load<T, S>(a.input, base + i) - mean) * invstd;
            dx = dy - sum_dy / m - xhat * sum_dy_xhat / m;
          }
          store<T, S>(a.grad_input, base + i, dx * scale);
        }
      }
    }
  });
}

template <bool Forward>
void batch_norm_kernel(const BatchNormArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "batch_norm", [&]<typename T>() {
    dispatch_same_or_float32<T>(a.dtype, a.param_dtype, "batch_norm", [&]<typename P>() {
      if constexpr (Forward) forward<T, P, acc_t<T>>(a);
      else backward<T, P, acc_t<T>>(a);
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(batch_norm_forward_stub, DeviceType::CPU, batch_norm_kernel<true>);
EMBER_REGISTER_KERNEL(batch_norm_backward_stub, DeviceType::CPU, batch_norm_kernel<false>);

}  // namespace ember::cpu
