// CPU kernels of the fused cross-entropy loss (contract in
// ember/core/ops/cross_entropy_kernels.h): every target checked before anything is
// written, then one pass per row for its max and a second for the sums, in
// row order (so the reduction is deterministic), the rows' losses summed in
// double.
#include <cmath>
#include <limits>
#include <string>

#include "ember/core/ops.h"
#include "ember/core/ops/cross_entropy_kernels.h"
#include "ember/core/ops/index_kernels.h"
#include "ember/kernels/acc_type.h"

namespace ember::cpu {
namespace {

template <typename I>
void check_targets(const CrossEntropyArgs& a) {
  const I* t = static_cast<const I*>(a.target);
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t v = int64_t(t[i]);
    if (v == a.ignore_index || (v >= 0 && v < a.c)) continue;
    const std::string* context = IndexErrorContext::current();
    EMBER_FAIL(index_error_text("cross_entropy", 1, a.c, v, context != nullptr ? *context : std::string()));
  }
}

template <typename T, typename I, typename O>
void forward(const CrossEntropyArgs& a) {
  using S = acc_t<T>;  // the statistics dtype: float, or double for float64
  check_targets<I>(a);
  const T* x = static_cast<const T*>(a.logits);
  const I* t = static_cast<const I*>(a.target);
  S* lse = static_cast<S*>(a.lse);
  const S e = S(a.smoothing), c = S(a.c);
  // The row sums in double and the count in int64: float would stop
  // counting at 2^24 rows and round small losses away from a large total.
  double total = 0;
  int64_t kept = 0;
  for (int64_t i = 0; i < a.n; ++i) {
    const T* row = x + i * a.c;
    S m = -std::numeric_limits<S>::infinity();
    for (int64_t j = 0; j < a.c; ++j) {
      const S v = S(row[j]);
      if (m == m && (v > m || v != v)) m = v;  // a NaN, once the max, stays
    }
    S sum_exp = 0, sum_shifted = 0;
    for (int64_t j = 0; j < a.c; ++j) {
      const S shifted = S(row[j]) - m;
      sum_exp += std::exp(shifted);
      sum_shifted += shifted;
    }
    const S log_sum = std::log(sum_exp);
    lse[i] = m + log_sum;
    const int64_t target = int64_t(t[i]);
    S loss = 0;
    if (target != a.ignore_index) {
      // lse - x_t = log_sum - (x_t - m); sum_j (lse - x_j) = c * log_sum - sum_j (x_j - m).
      // The smoothing term only when e > 0: a -inf logit makes it 0 * inf.
      loss = (S(1) - e) * (log_sum - (S(row[target]) - m));
      if (e > S(0)) loss += e / c * (c * log_sum - sum_shifted);
      kept += 1;
    }
    if (a.reduction == int(Reduction::None)) {
      static_cast<O*>(a.out)[i] = O(loss);
    } else {
      total += loss;
    }
  }
  *static_cast<S*>(a.count) = S(kept);
  if (a.reduction == int(Reduction::Sum)) *static_cast<O*>(a.out) = O(S(total));
  if (a.reduction == int(Reduction::Mean)) *static_cast<O*>(a.out) = O(S(total / double(kept)));
}

template <typename T, typename I, typename O>
void backward(const CrossEntropyArgs& a) {
  using S = acc_t<T>;  // the statistics dtype: float, or double for float64
  const T* x = static_cast<const T*>(a.logits);
  const I* t = static_cast<const I*>(a.target);
  const S* lse = static_cast<const S*>(a.lse);
  const O* grad = static_cast<const O*>(a.grad);
  T* dx = static_cast<T*>(a.grad_logits);
  const S e = S(a.smoothing), uniform = e / S(a.c);
  const S scale = a.reduction == int(Reduction::Mean) ? S(1) / *static_cast<const S*>(a.count) : S(1);
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t target = int64_t(t[i]);
    T* out = dx + i * a.c;
    const bool kept = target != a.ignore_index && target >= 0 && target < a.c;
    const S w = kept ? S(grad[a.reduction == int(Reduction::None) ? i : 0]) * scale : S(0);
    const T* row = x + i * a.c;
    for (int64_t j = 0; j < a.c; ++j) {
      const S p = std::exp(S(row[j]) - lse[i]);
      out[j] = kept ? T(w * (p - (j == target ? S(1) - e : S(0)) - uniform)) : T(0);
    }
  }
}

void forward_kernel(const CrossEntropyArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "cross_entropy", [&]<typename T>() {
    dispatch_index(a.target_dtype, "cross_entropy", [&]<typename I>() {
      dispatch_same_or_float32<T>(a.dtype, a.out_dtype, "cross_entropy", [&]<typename O>() { forward<T, I, O>(a); });
    });
  });
}

void backward_kernel(const CrossEntropyArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "cross_entropy_backward", [&]<typename T>() {
    dispatch_index(a.target_dtype, "cross_entropy_backward", [&]<typename I>() {
      dispatch_same_or_float32<T>(a.dtype, a.out_dtype, "cross_entropy", [&]<typename O>() { backward<T, I, O>(a); });
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(cross_entropy_forward_stub, DeviceType::CPU, forward_kernel);
EMBER_REGISTER_KERNEL(cross_entropy_backward_stub, DeviceType::CPU, backward_kernel);

}  // namespace ember::cpu
