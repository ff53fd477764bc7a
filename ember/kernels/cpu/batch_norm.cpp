// CPU batch-norm kernels (contract in ember/core/ops/batch_norm_kernels.h): per
// channel, the statistics in two passes (the mean, then the mean squared
// deviation from it) or the running ones, then the affine normalization;
// backward takes the two per-channel sums, then grad_input.
// P is the type of the per-channel parameters and running statistics: the
// input's, or float beside 16-bit input. Channels are independent, so they
// split over threads (ember/core/parallel_for.h) with results equal to one
// thread's.
//
// A channel's sums run in kLanes interleaved partial sums, added in lane
// order at the end: independent chains that the compiler vectorizes. The
// channel's j-th value in (n, inner) order goes to lane j % kLanes, an order
// fixed by the logical shape alone, so results repeat bit for bit at any
// thread count and are the same for an NCHW input (inner = H * W) and its
// channels-last twin (n = N * H * W, inner = 1).
#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include "ember/core/ops/batch_norm_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"

namespace ember::cpu {
namespace {

constexpr int64_t kLanes = 16;

template <typename T, typename S>
S load(const void* p, int64_t i) {
  return S(acc_t<T>(static_cast<const T*>(p)[i]));
}

template <typename T, typename S>
void store(void* p, int64_t i, S v) {
  static_cast<T*>(p)[i] = T(acc_t<T>(v));
}

// The K sums of terms(at) (an array of K terms) over channel c's n rows of
// `inner` elements, at being the element's index in the (n, c, inner)
// array; each sum in kLanes partial sums.
template <typename S, size_t K, typename Terms>
std::array<S, K> channel_sums(const BatchNormArgs& a, int64_t c, Terms&& terms) {
  std::array<std::array<S, size_t(kLanes)>, K> lanes{};
  auto add = [&](int64_t at, int64_t lane) {
    const std::array<S, K> t = terms(at);
    for (size_t k = 0; k < K; ++k) lanes[k][size_t(lane)] += t[k];
  };
  for (int64_t b = 0; b < a.n; ++b) {
    const int64_t base = (b * a.c + c) * a.inner;
    // Up to the row's first value of lane 0, whole rounds of the lanes, the rest.
    const int64_t first_lane = b * a.inner % kLanes;
    const int64_t head = std::min(a.inner, (kLanes - first_lane) % kLanes);
    const int64_t rounds_end = head + (a.inner - head) / kLanes * kLanes;
    for (int64_t i = 0; i < head; ++i) add(base + i, first_lane + i);
    for (int64_t i = head; i < rounds_end; i += kLanes) {
      for (int64_t l = 0; l < kLanes; ++l) add(base + i + l, l);
    }
    for (int64_t i = rounds_end; i < a.inner; ++i) add(base + i, i - rounds_end);
  }
  std::array<S, K> total{};
  for (size_t k = 0; k < K; ++k) {
    for (S lane : lanes[k]) total[k] += lane;
  }
  return total;
}

// The sum of term(at) over channel c.
template <typename S, typename Term>
S channel_sum(const BatchNormArgs& a, int64_t c, Term&& term) {
  return channel_sums<S, 1>(a, c, [&](int64_t at) { return std::array<S, 1>{term(at)}; })[0];
}

template <typename T, typename P, typename S>
void forward(const BatchNormArgs& a) {
  S* save_mean = static_cast<S*>(a.save_mean);
  S* save_invstd = static_cast<S*>(a.save_invstd);
  const int64_t m = a.n * a.inner;
  if (a.num_batches_tracked) ++*a.num_batches_tracked;
  parallel_for(0, a.c, kCpuGrain / std::max<int64_t>(m, 1) + 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      if (a.training) {
        const S mean = channel_sum<S>(a, c, [&](int64_t at) { return load<T, S>(a.input, at); }) / S(m);
        const S m2 = channel_sum<S>(a, c, [&](int64_t at) {
          const S d = load<T, S>(a.input, at) - mean;
          return d * d;
        });
        save_mean[c] = mean;
        save_invstd[c] = S(1) / std::sqrt(m2 / S(m) + S(a.eps));
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
      const T* x = static_cast<const T*>(a.input);
      T* y = static_cast<T*>(a.output);
      for (int64_t b = 0; b < a.n; ++b) {
        const int64_t base = (b * a.c + c) * a.inner;
        for (int64_t i = base; i < base + a.inner; ++i) y[i] = T(acc_t<T>(S(acc_t<T>(x[i])) * scale + shift));
      }
    }
  });
}

template <typename T, typename P, typename S>
void backward(const BatchNormArgs& a) {
  const S* save_mean = static_cast<const S*>(a.save_mean);
  const S* save_invstd = static_cast<const S*>(a.save_invstd);
  const S m = S(a.n * a.inner);
  const T* x = static_cast<const T*>(a.input);
  const T* dy = static_cast<const T*>(a.grad_output);
  parallel_for(0, a.c, kCpuGrain / std::max<int64_t>(a.n * a.inner, 1) + 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const S mean = save_mean[c], invstd = save_invstd[c];
      const std::array<S, 2> sums = channel_sums<S, 2>(a, c, [&](int64_t at) {
        const S d = S(acc_t<T>(dy[at]));
        return std::array<S, 2>{d, d * (S(acc_t<T>(x[at])) - mean)};
      });
      const S sum_dy = sums[0], sum_dy_xhat = sums[1] * invstd;
      if (a.grad_weight) store<P, S>(a.grad_weight, c, sum_dy_xhat);
      if (a.grad_bias) store<P, S>(a.grad_bias, c, sum_dy);
      if (!a.grad_input) continue;
      const S scale = invstd * (a.weight ? load<P, S>(a.weight, c) : S(1));
      // Training: dx = scale * (dy - mean_dy - (x - mean) * k), with
      // k = invstd * sum(dy * xhat) / m; eval: dx = scale * dy.
      const S mean_dy = sum_dy / m, k = invstd * (sum_dy_xhat / m);
      T* dx = static_cast<T*>(a.grad_input);
      for (int64_t b = 0; b < a.n; ++b) {
        const int64_t base = (b * a.c + c) * a.inner;
        if (!a.training) {
          for (int64_t i = base; i < base + a.inner; ++i) dx[i] = T(acc_t<T>(S(acc_t<T>(dy[i])) * scale));
          continue;
        }
        for (int64_t i = base; i < base + a.inner; ++i) {
          const S xmu = S(acc_t<T>(x[i])) - mean;
          dx[i] = T(acc_t<T>((S(acc_t<T>(dy[i])) - mean_dy - xmu * k) * scale));
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
