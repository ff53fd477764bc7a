// CPU reduction kernels over a dense [outer, reduce, inner] block (see
// ember/core/ops/reduce_kernels.h for the contract).
//
// Every kernel walks one outer block at a time row by row (r outer, i
// inner), so memory is read in order whatever the inner size; it keeps one
// accumulator per inner position. Each output still sees its elements in
// the order r = 0, 1, ..., so results do not depend on the inner size.
//
// Threads (ember/core/parallel_for.h): with enough outputs to share out, each
// thread takes a range of outputs and reduces each exactly as one thread
// would, so the values do not depend on the thread count. With few outputs
// and long reductions (a whole-tensor sum), the reduce dim is cut into
// parallel_reduce's static chunks, each with its own accumulators, merged in
// chunk order (Max/Min exactly, Sum by adding the partial sums, Var by
// Chan's merge of Welford states): bit-identical run to run at a given
// thread count, rounded differently at another one.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/core/ops/reduce_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"

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

// Runs step(acc[j], x, r) over every element of each output j's reduction
// in the order r = 0, 1, ..., then finish(acc[j], j), j = o * inner + i.
// combine(into, from) merges the state of a later range of r into that of
// an earlier one (used when the reduce dim is split over threads).
template <typename T, typename Acc, typename Step, typename Combine, typename Finish>
void reduce_blocks(const ReduceArgs& a, const Acc& init, Step&& step, Combine&& combine, Finish&& finish) {
  const T* in = static_cast<const T*>(a.in);
  const int64_t outputs = a.outer * a.inner;
  if (outputs == 0) return;
  // Reduces outputs [j0, j1), walking each outer block's rows in memory order.
  auto reduce_outputs = [&](int64_t j0, int64_t j1) {
    std::vector<Acc> acc;
    for (int64_t o = j0 / a.inner; o * a.inner < j1; ++o) {
      const int64_t i0 = std::max<int64_t>(j0 - o * a.inner, 0), i1 = std::min(j1 - o * a.inner, a.inner);
      acc.assign(size_t(i1 - i0), init);
      const T* block = in + o * a.reduce * a.inner;
      for (int64_t r = 0; r < a.reduce; ++r) {
        const T* row = block + r * a.inner;
        for (int64_t i = i0; i < i1; ++i) step(acc[size_t(i - i0)], row[i], r);
      }
      for (int64_t i = i0; i < i1; ++i) finish(acc[size_t(i - i0)], o * a.inner + i);
    }
  };
  const int threads = get_num_threads();
  const bool split_reduce = threads > 1 && outputs < 4 * int64_t(threads) && outputs * a.reduce > kCpuGrain;
  if (!split_reduce) {
    parallel_for(0, outputs, kCpuGrain / std::max<int64_t>(a.reduce, 1) + 1, reduce_outputs);
    return;
  }
  // Few outputs: each chunk of rows [r0, r1) gets its own accumulators.
  std::vector<Acc> acc = parallel_reduce(
      int64_t(0), a.reduce, kCpuGrain / outputs + 1, std::vector<Acc>(size_t(outputs), init),
      [&](int64_t r0, int64_t r1, std::vector<Acc> part) {
        for (int64_t o = 0; o < a.outer; ++o) {
          Acc* block_acc = part.data() + o * a.inner;
          for (int64_t r = r0; r < r1; ++r) {
            const T* row = in + (o * a.reduce + r) * a.inner;
            for (int64_t i = 0; i < a.inner; ++i) step(block_acc[i], row[i], r);
          }
        }
        return part;
      },
      [&](std::vector<Acc> into, std::vector<Acc> from) {
        for (size_t j = 0; j < into.size(); ++j) combine(into[j], from[j]);
        return into;
      });
  for (int64_t j = 0; j < outputs; ++j) finish(acc[size_t(j)], j);
}

template <typename T, typename O>
void sum_kernel(const ReduceArgs& a, bool mean) {
  using Acc = sum_t<T>;
  O* out = static_cast<O*>(a.out);
  const double n = double(a.reduce);
  reduce_blocks<T>(
      a, Acc(0), [](Acc& s, T v, int64_t) { s += Acc(acc_t<T>(v)); }, [](Acc& s, const Acc& t) { s += t; },
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
      [](Best& b, const Best& later) {
        if (later.index < 0) return;
        if (b.index >= 0) {
          if (is_nan(b.value)) return;
          if (!is_nan(later.value) && !(kMax ? later.value > b.value : later.value < b.value)) return;
        }
        b = later;
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
      [](Welford& w, const Welford& later) {
        if (later.n == 0) return;
        if (w.n == 0) {
          w = later;
          return;
        }
        const int64_t n = w.n + later.n;
        const A delta = later.mean - w.mean;
        w.mean += delta * A(later.n) / A(n);
        w.m2 += later.m2 + delta * delta * A(w.n) * A(later.n) / A(n);
        w.n = n;
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
  const int64_t block_size = std::max<int64_t>(a.reduce * a.inner, 1);
  parallel_for(0, a.outer, kCpuGrain / block_size + 1, [&](int64_t o_begin, int64_t o_end) {
    std::vector<A> m(inner), s(inner);
    for (int64_t o = o_begin; o < o_end; ++o) {
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
  });
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
