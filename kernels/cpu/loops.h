// CPU loops over ElementwiseArgs.
//
// Contract: cpu_map<Out, In...>(args, f) sets out = f(in...) for every
// element. A contiguous op runs one flat loop the compiler can vectorize;
// otherwise the innermost (coalesced) dim is the inner loop and an odometer
// walks the outer dims, so a strided op costs one multiply-free pointer bump
// per element.
#pragma once

#include <cstdint>
#include <utility>

#include "core/ops/elementwise_args.h"
#include "kernels/acc_type.h"

namespace ember::cpu {

template <typename Out, typename... In, typename F, size_t... I>
void cpu_map_impl(const ElementwiseArgs& a, F&& f, std::index_sequence<I...>) {
  constexpr int N = sizeof...(In) + 1;
  if (a.contiguous) {
    Out* out = reinterpret_cast<Out*>(a.data[0]);
    [[maybe_unused]] auto ins = std::make_tuple(reinterpret_cast<const In*>(a.data[I + 1])...);
    for (int64_t i = 0; i < a.numel; ++i) out[i] = f(std::get<I>(ins)[i]...);
    return;
  }
  const int nd = a.ndim;
  const int64_t inner = a.sizes[nd - 1];
  if (inner == 0 || a.numel == 0) return;
  const int64_t outer = a.numel / inner;
  int64_t stride_bytes[N];
  stride_bytes[0] = a.strides[0][nd - 1] * int64_t(sizeof(Out));
  ((stride_bytes[I + 1] = a.strides[I + 1][nd - 1] * int64_t(sizeof(In))), ...);
  int64_t elem_size[N] = {int64_t(sizeof(Out)), int64_t(sizeof(In))...};
  int64_t idx[kMaxElementwiseDims] = {};
  for (int64_t o = 0; o < outer; ++o) {
    char* p[N];
    for (int k = 0; k < N; ++k) {
      int64_t off = 0;
      for (int d = 0; d < nd - 1; ++d) off += idx[d] * a.strides[k][d];
      p[k] = a.data[k] + off * elem_size[k];
    }
    for (int64_t i = 0; i < inner; ++i) {
      *reinterpret_cast<Out*>(p[0] + i * stride_bytes[0]) =
          f(*reinterpret_cast<const In*>(p[I + 1] + i * stride_bytes[I + 1])...);
    }
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < a.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

template <typename Out, typename... In, typename F>
void cpu_map(const ElementwiseArgs& a, F&& f) {
  cpu_map_impl<Out, In...>(a, std::forward<F>(f), std::index_sequence_for<In...>{});
}

// Calls f(i, out) for element i (row-major index) of operand 0 alone; used
// by fills whose value depends on the position (random numbers).
template <typename Out, typename F>
void cpu_generate(const ElementwiseArgs& a, F&& f) {
  const int nd = a.ndim;
  const int64_t inner = a.sizes[nd - 1];
  if (a.numel == 0) return;
  int64_t idx[kMaxElementwiseDims] = {};
  int64_t linear = 0;
  for (int64_t o = 0; o < a.numel / inner; ++o) {
    int64_t off = 0;
    for (int d = 0; d < nd - 1; ++d) off += idx[d] * a.strides[0][d];
    Out* p = reinterpret_cast<Out*>(a.data[0]) + off;
    for (int64_t i = 0; i < inner; ++i) p[i * a.strides[0][nd - 1]] = f(linear++);
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < a.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

}  // namespace ember::cpu
