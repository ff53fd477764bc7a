// CPU reduction kernels over a dense [outer, reduce, inner] block (see
// core/ops/reduce_kernels.h for the contract).
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/ops/reduce_kernels.h"
#include "kernels/cpu/loops.h"

namespace ember::cpu {
namespace {

template <typename T>
using sum_t = std::conditional_t<std::is_same_v<T, double>, double,
                                 std::conditional_t<std::is_integral_v<T>, int64_t, float>>;

template <typename T, typename O>
void sum_kernel(const ReduceArgs& a, bool mean) {
  using Acc = sum_t<T>;
  const T* in = static_cast<const T*>(a.in);
  O* out = static_cast<O*>(a.out);
  for (int64_t o = 0; o < a.outer; ++o) {
    for (int64_t i = 0; i < a.inner; ++i) {
      const T* p = in + o * a.reduce * a.inner + i;
      Acc acc = 0;
      for (int64_t r = 0; r < a.reduce; ++r) acc += Acc(acc_t<T>(p[r * a.inner]));
      if (mean) out[o * a.inner + i] = O(double(acc) / double(a.reduce));
      else out[o * a.inner + i] = O(acc);
    }
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
    default:
      EMBER_FAIL("reduce: op " << int(op) << " has no CPU kernel");
  }
}

}  // namespace

EMBER_REGISTER_KERNEL(reduce_stub, DeviceType::CPU, reduce_kernel);

}  // namespace ember::cpu
