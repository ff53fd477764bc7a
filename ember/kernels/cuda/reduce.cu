// CUDA reduction kernels (contract in ember/core/ops/reduce_kernels.h): one
// reducer per op family, run by the skeleton of ember/kernels/cuda/common/reduce_launch.cuh
// (which picks the warp-per-row, block-per-row or column kernel).
//
// Results agree with ember/kernels/cpu/reduce.cpp:
// - Sum/Mean accumulate in float for the half types and float32, double for
//   float64, int64 for integers and bool; Mean divides in double.
// - Max/Min/ArgMax/ArgMin carry (value, index) pairs. A merge keeps the NaN,
//   else the extreme, and among equals the smaller index, so any merge tree
//   picks the CPU's element: the first NaN, else the first extreme.
// - Var/Std keep Welford statistics; a thread folds a group of 16-byte
//   vectors into the group's mean and M2 and merges groups (Chan et al.).
// - LogSumExp runs online in one read: the state is the NaN-propagating max m
//   and s = sum(exp(x - ref(m))), ref(m) = m, or 0 when m is infinite (the
//   CPU's rule), rescaled when the max grows; partials whose max is -inf add
//   nothing.
#include <cmath>
#include <type_traits>

#include "ember/core/ops/reduce_kernels.h"
#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/common/reduce_launch.cuh"

namespace ember::cuda {
namespace {

// Sum's accumulator: int64 for integers and bool, double for double, else float.
template <typename T>
using sum_t =
    std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<std::is_integral_v<T>, int64_t, float>>;
// Sum's output element: the input's type for floats, int64 otherwise.
template <typename T>
using sum_out_t = std::conditional_t<std::is_integral_v<T>, int64_t, T>;

template <typename T>
struct SumReducer {
  using State = sum_t<T>;
  using O = sum_out_t<T>;
  O* out;
  int64_t count;  // elements per output, for Mean
  bool mean;
  __device__ State identity() const { return State(0); }
  __device__ State push(State s, T x, int64_t) const { return s + State(to_acc(x)); }
  __device__ State merge(State a, State b) const { return a + b; }
  __device__ void write(State s, int64_t j) const {
    if (mean) out[j] = from_acc<O>(acc_t<O>(double(s) / double(count)));
    else out[j] = from_acc<O>(acc_t<O>(s));
  }
};

template <typename A>
struct Extreme {
  A value;
  int64_t index;  // -1: no element yet
};

template <typename T, bool kMax>
struct ExtremeReducer {
  using A = acc_t<T>;
  using State = Extreme<A>;
  T* out;            // null for ArgMax/ArgMin
  int64_t* indices;  // null for plain Max/Min values
  __device__ State identity() const { return {A(0), -1}; }
  __device__ static bool beats(A a, A b) { return kMax ? a > b : a < b; }
  // r is larger than every index already in s: the CPU's sequential step.
  __device__ static State push_acc(State s, A v, int64_t r) {
    if (s.index >= 0 && (is_nan(s.value) || (!is_nan(v) && !beats(v, s.value)))) return s;
    return {v, r};
  }
  __device__ State push(State s, T x, int64_t r) const { return push_acc(s, to_acc(x), r); }
  __device__ State merge(State a, State b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool an = is_nan(a.value), bn = is_nan(b.value);
    if (an != bn) return an ? a : b;
    if (an || a.value == b.value) return a.index < b.index ? a : b;
    return beats(a.value, b.value) ? a : b;
  }
  __device__ void write(State s, int64_t j) const {
    if (out) out[j] = from_acc<T>(s.value);
    if (indices) indices[j] = s.index;
  }
};

// The extreme of a and b ignoring NaN (NaNs are tracked separately).
template <bool kMax, typename A>
__device__ __forceinline__ A extreme_of(A a, A b) {
  if constexpr (std::is_floating_point_v<A>) return kMax ? ::fmax(a, b) : ::fmin(a, b);
  else return (kMax ? b > a : b < a) ? b : a;
}

// A group at once: its extreme and whether it holds a NaN (cheap, no
// indices); only when the group beats s is its winner's index found: the
// first NaN, else the first element equal to the extreme. The winner is the
// one pushing every element in order would keep.
template <typename T, bool kMax, int V, int U>
__device__ __forceinline__ Extreme<acc_t<T>> push_vecs(const ExtremeReducer<T, kMax>&, Extreme<acc_t<T>> s,
                                                       const Vec<T, V> (&x)[U], int64_t c, int64_t step) {
  using A = acc_t<T>;
  constexpr int K = U * V;
  A v[K];
#pragma unroll
  for (int k = 0; k < K; ++k) v[k] = to_acc(x[k / V].v[k % V]);
  A group = v[0];
  bool any_nan = is_nan(v[0]);
#pragma unroll
  for (int k = 1; k < K; ++k) {
    group = extreme_of<kMax>(group, v[k]);
    any_nan = any_nan || is_nan(v[k]);
  }
  if (s.index >= 0 && (is_nan(s.value) || (!any_nan && !ExtremeReducer<T, kMax>::beats(group, s.value)))) return s;
  int best = 0;
  A best_value = v[0];
#pragma unroll
  for (int k = K - 1; k >= 0; --k) {
    if (any_nan ? is_nan(v[k]) : v[k] == group) {
      best = k;
      best_value = v[k];
    }
  }
  return {best_value, c + (best / V) * step + best % V};
}

template <typename T>
using stat_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
struct VarReducer {
  using S = stat_t<T>;
  using State = Welford<S>;
  T* out;
  int64_t count;  // elements per output
  double correction;
  bool take_sqrt;
  __device__ State identity() const { return State{}; }
  __device__ State push(State s, T x, int64_t) const {
    s.push(S(to_acc(x)));
    return s;
  }
  __device__ State merge(State a, State b) const {
    a.merge(b);
    return a;
  }
  __device__ void write(State s, int64_t j) const {
    const S divisor = S(::fmax(double(count) - correction, 0.0));
    const S var = s.m2 / divisor;
    out[j] = from_acc<T>(acc_t<T>(take_sqrt ? ::sqrt(var) : var));
  }
};

// A group's own mean and M2, merged into s (Chan et al.) with one division.
template <typename T, int V, int U>
__device__ __forceinline__ Welford<stat_t<T>> push_vecs(const VarReducer<T>&, Welford<stat_t<T>> s,
                                                        const Vec<T, V> (&x)[U], int64_t, int64_t) {
  using S = stat_t<T>;
  constexpr int K = U * V;  // a power of two: the mean's scaling is exact
  S v[K], sum = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    v[k] = S(to_acc(x[k / V].v[k % V]));
    sum += v[k];
  }
  const S mean = sum * (S(1) / S(K));
  S m2 = 0;
#pragma unroll
  for (int k = 0; k < K; ++k) m2 += (v[k] - mean) * (v[k] - mean);
  const S n = s.count + S(K), f = S(K) / n, delta = mean - s.mean;
  s.mean += delta * f;
  s.m2 += m2 + delta * delta * s.count * f;
  s.count = n;
  return s;
}

template <typename A>
struct LogSumExpState {
  A m;  // NaN-propagating max so far (-inf: none, or all -inf)
  A s;  // sum of exp(x - ref(m))
};

template <typename T>
struct LogSumExpReducer {
  using A = acc_t<T>;
  using State = LogSumExpState<A>;
  T* out;
  __device__ static A ref(A m) { return ::isinf(m) ? A(0) : m; }
  // s rescaled to a new reference max M (not NaN, M >= m).
  __device__ static A rescaled(const State& st, A M) {
    return st.m == -INFINITY ? A(0) : st.s * ::exp(ref(st.m) - ref(M));
  }
  __device__ State identity() const { return {A(-INFINITY), A(0)}; }
  __device__ State push(State st, T x, int64_t) const {
    const A v = to_acc(x);
    if (is_nan(st.m)) return st;
    if (is_nan(v)) return {v, v};
    if (v > st.m) return {v, rescaled(st, v) + ::exp(v - ref(v))};
    st.s += ::exp(v - ref(st.m));
    return st;
  }
  __device__ State merge(State a, State b) const {
    if (is_nan(a.m)) return a;
    if (is_nan(b.m)) return b;
    const A M = a.m > b.m ? a.m : b.m;
    return {M, rescaled(a, M) + rescaled(b, M)};
  }
  __device__ void write(State st, int64_t j) const { out[j] = from_acc<T>(A(::log(st.s) + ref(st.m))); }
};

// A group folded at once: its max first (one rescale at most), then one
// exp per element.
template <typename T, int V, int U>
__device__ __forceinline__ LogSumExpState<acc_t<T>> push_vecs(const LogSumExpReducer<T>&, LogSumExpState<acc_t<T>> st,
                                                              const Vec<T, V> (&x)[U], int64_t, int64_t) {
  using A = acc_t<T>;
  using R = LogSumExpReducer<T>;
  constexpr int K = U * V;
  A v[K], group_max = A(-INFINITY);
  bool any_nan = false;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    v[k] = to_acc(x[k / V].v[k % V]);
    group_max = ::fmax(group_max, v[k]);
    any_nan = any_nan || is_nan(v[k]);
  }
  if (is_nan(st.m)) return st;
  if (any_nan) return {A(NAN), A(NAN)};
  if (group_max > st.m) st = {group_max, R::rescaled(st, group_max)};
  const A r = R::ref(st.m);
#pragma unroll
  for (int k = 0; k < K; ++k) st.s += ::exp(v[k] - r);
  return st;
}

void reduce_cuda(ReduceOp op, const ReduceArgs& a) {
  if (a.outer == 0 || a.inner == 0) return;
  DeviceGuard guard(a.device);
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean:
      EMBER_DISPATCH_DTYPE(a.in_dtype, "sum", [&]<typename T>() {
        using O = sum_out_t<T>;
        EMBER_CHECK(a.out_dtype == dtype_of<O>::value,
                    "sum: the CUDA kernel writes " << dtype_name(dtype_of<O>::value) << " for "
                                                   << dtype_name(a.in_dtype) << " input but was given a "
                                                   << dtype_name(a.out_dtype)
                                                   << " output (core/ops/reduce_kernels.h fixes the output dtype)");
        launch_reduce<T>(a, SumReducer<T>{static_cast<O*>(a.out), a.reduce, op == ReduceOp::Mean});
      });
      return;
    case ReduceOp::Max:
    case ReduceOp::ArgMax:
      EMBER_DISPATCH_DTYPE(a.in_dtype, "max", [&]<typename T>() {
        launch_reduce<T>(a, ExtremeReducer<T, true>{static_cast<T*>(a.out), a.indices});
      });
      return;
    case ReduceOp::Min:
    case ReduceOp::ArgMin:
      EMBER_DISPATCH_DTYPE(a.in_dtype, "min", [&]<typename T>() {
        launch_reduce<T>(a, ExtremeReducer<T, false>{static_cast<T*>(a.out), a.indices});
      });
      return;
    case ReduceOp::Var:
    case ReduceOp::Std:
      EMBER_DISPATCH_FLOAT(a.in_dtype, "var", [&]<typename T>() {
        launch_reduce<T>(a, VarReducer<T>{static_cast<T*>(a.out), a.reduce, a.correction, op == ReduceOp::Std});
      });
      return;
    case ReduceOp::LogSumExp:
      EMBER_DISPATCH_FLOAT(a.in_dtype, "logsumexp",
                           [&]<typename T>() { launch_reduce<T>(a, LogSumExpReducer<T>{static_cast<T*>(a.out)}); });
      return;
  }
  EMBER_FAIL("reduce: unknown reduction op " << int(op));
}

}  // namespace

EMBER_REGISTER_KERNEL(reduce_stub, DeviceType::CUDA, reduce_cuda);

}  // namespace ember::cuda
