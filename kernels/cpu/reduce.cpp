// CPU reduction kernels over a dense [outer, reduce, inner] block (see
// core/ops/reduce_kernels.h for the contract).
//
// Every kernel walks one outer block at a time row by row (r outer, i
// inner), so memory is read in order whatever the inner size; it keeps one
// accumulator per inner position. Each output still sees its elements in
// the order r = 0, 1, ..., so results do not depend on the inner size.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/ops/reduce_kernels.h"
#include "kernels/acc_type.h"

namespace ember::cpu {
namespace {

template <typename A>
bool is_nan(A v) {
  if constexpr (std::is_floating_point_v<A>) return v != v;
  else return false;
}

// Sum's accumulator: int64 for integers and bool, double for double, else float.
template <typename T>
using sum_t =
    std::conditional_t<std::is_same_v<T, double>, double, std::conditional_t<std::is_integral_v<T>, int64_t, float>>;

// Runs step(acc[i], x, r) over every element of each outer block in memory
// order, then finish(acc[i], j) with j = o * inner + i, the output index.
template <typename T, typename Acc, typename Step, typename Finish>
void reduce_blocks(const ReduceArgs& a, const Acc& init, Step&& step, Finish&& finish) {
  const T* in = static_cast<const T*>(a.in);
  std::vector<Acc> acc(size_t(a.inner));
  for (int64_t o = 0; o < a.outer; ++o) {
    std::fill(acc.begin(), acc.end(), init);
    const T* block = in + o * a.reduce * a.inner;
    for (int64_t r = 0; r < a.reduce; ++r) {
      const T* row = block + r * a.inner;
      for (int64_t i = 0; i < a.inner; ++i) step(acc[size_t(i)], row[i], r);
    }
    for (int64_t i = 0; i < a.inner; ++i) finish(acc[size_t(i)], o * a.inner + i);
  }
}

template <typename T, typename O>
void sum_kernel(const ReduceArgs& a, bool mean) {
  using Acc = sum_t<T>;
  O* out = static_cast<O*>(a.out);
  const double n = double(a.reduce);
  reduce_blocks<T>(
      a, Acc(0), [](Acc& s, T v, int64_t) { s += Acc(acc_t<T>(v)); },
      [&](Acc& s, int64_t j) {
        if (mean) out[j] = O(double(s) / n);
        else out[j] = O(s);
      });
}

// Max/Min (and their Arg forms): the first NaN wins, then the first extreme.
template <typename T, bool kMax>
void extreme_kernel(const ReduceArgs& a) {
  using A = acc_t<T>;
  struct Best {
    A value;
    int64_t index;  // -1 until the first element
  };
  T* out = static_cast<T*>(a.out);
  int64_t* indices = a.indices;
  reduce_blocks<T>(
      a, Best{A(0), -1},
      [](Best& b, T x, int64_t r) {
        A v = A(x);
        if (b.index >= 0) {
          if (is_nan(b.value)) return;
          if (!is_nan(v) && !(kMax ? v > b.value : v < b.value)) return;
        }
        b.value = v;
        b.index = r;
      },
      [&](Best& b, int64_t j) {
        if (out) out[j] = T(b.value);
        if (indices) indices[j] = b.index;
      });
}

// Welford's running mean and sum of squared deviations.
template <typename T>
void var_kernel(const ReduceArgs& a, bool take_sqrt) {
  using A = std::conditional_t<std::is_same_v<T, double>, double, float>;
  struct Welford {
    A mean;
    A m2;
    int64_t n;
  };
  T* out = static_cast<T*>(a.out);
  const double correction = a.correction;
  reduce_blocks<T>(
      a, Welford{A(0), A(0), 0},
      [](Welford& w, T x, int64_t) {
        A v = A(x);
        ++w.n;
        A delta = v - w.mean;
        w.mean += delta / A(w.n);
        w.m2 += delta * (v - w.mean);
      },
      [&](Welford& w, int64_t j) {
        A divisor = A(std::max(double(w.n) - correction, 0.0));
        A var = w.m2 / divisor;
        out[j] = T(take_sqrt ? std::sqrt(var) : var);
      });
}

// Two passes per outer block: the max of each column, then the sum of
// exp(x - max).
template <typename T>
void logsumexp_kernel(const ReduceArgs& a) {
  using A = acc_t<T>;
  const T* in = static_cast<const T*>(a.in);
  T* out = static_cast<T*>(a.out);
  const size_t inner = size_t(a.inner);
  std::vector<A> m(inner), s(inner);
  for (int64_t o = 0; o < a.outer; ++o) {
    const T* block = in + o * a.reduce * a.inner;
    std::fill(m.begin(), m.end(), -std::numeric_limits<A>::infinity());
    for (int64_t r = 0; r < a.reduce; ++r) {
      for (size_t i = 0; i < inner; ++i) {
        A v = A(block[r * a.inner + int64_t(i)]);
        if (!is_nan(m[i]) && (v > m[i] || is_nan(v))) m[i] = v;
      }
    }
    for (size_t i = 0; i < inner; ++i) {
      if (std::isinf(m[i])) m[i] = A(0);
    }
    std::fill(s.begin(), s.end(), A(0));
    for (int64_t r = 0; r < a.reduce; ++r) {
      for (size_t i = 0; i < inner; ++i) s[i] += std::exp(A(block[r * a.inner + int64_t(i)]) - m[i]);
    }
    for (size_t i = 0; i < inner; ++i) out[o * a.inner + int64_t(i)] = T(std::log(s[i]) + m[i]);
  }
}

void reduce_kernel(ReduceOp op, const ReduceArgs& a) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Mean:
      EMBER_DISPATCH_DTYPE(a.in_dtype, "sum", [&]<typename T>() {
        EMBER_DISPATCH_DTYPE(a.out_dtype, "sum", [&]<typename O>() { sum_kernel<T, O>(a, op == ReduceOp::Mean); });
      });
      return;
    case ReduceOp::Max:
    case ReduceOp::ArgMax:
      EMBER_DISPATCH_DTYPE(a.in_dtype, "max", [&]<typename T>() { extreme_kernel<T, true>(a); });
      return;
    case ReduceOp::Min:
    case ReduceOp::ArgMin:
      EMBER_DISPATCH_DTYPE(a.in_dtype, "min", [&]<typename T>() { extreme_kernel<T, false>(a); });
      return;
    case ReduceOp::Var:
    case ReduceOp::Std:
      EMBER_DISPATCH_FLOAT(a.in_dtype, "var", [&]<typename T>() { var_kernel<T>(a, op == ReduceOp::Std); });
      return;
    case ReduceOp::LogSumExp:
      EMBER_DISPATCH_FLOAT(a.in_dtype, "logsumexp", [&]<typename T>() { logsumexp_kernel<T>(a); });
      return;
  }
  EMBER_FAIL("reduce: unknown reduction op " << int(op));
}

}  // namespace

EMBER_REGISTER_KERNEL(reduce_stub, DeviceType::CPU, reduce_kernel);

}  // namespace ember::cpu
