// CPU loops over ElementwiseArgs.
//
// Contract: cpu_map<Out, In...>(args, f) sets out = f(in...) for every
// element. A contiguous op runs one flat loop the compiler can vectorize;
// otherwise the innermost (coalesced) dim is the inner loop and an odometer
// walks the outer dims, so a strided op costs one multiply-free pointer bump
// per element. Above kCpuGrain elements the work splits over
// get_num_threads() threads (ember/core/parallel_for.h): a contiguous op by flat
// index ranges, a strided one by ranges of outer rows. Each element's value
// is computed as on one thread, so the result never depends on the count.
#pragma once

#include <cstdint>
#include <utility>

#include "ember/core/ops/elementwise_args.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"

namespace ember::cpu {

// Outer rows [o_begin, o_end) of a strided cpu_map: the odometer starts at
// row o_begin's index.
template <typename Out, typename... In, typename F, size_t... I>
void cpu_map_rows_impl(const ElementwiseArgs& a, F& f, int64_t o_begin, int64_t o_end, const int64_t* stride_bytes,
                       const int64_t* elem_size, std::index_sequence<I...>) {
  constexpr int N = sizeof...(In) + 1;
  const int nd = a.ndim;
  int64_t idx[kMaxElementwiseDims] = {};
  for (int64_t d = nd - 2, rest = o_begin; d >= 0; --d) {
    idx[d] = rest % a.sizes[d];
    rest /= a.sizes[d];
  }
  const int64_t inner = a.sizes[nd - 1];
  for (int64_t o = o_begin; o < o_end; ++o) {
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
void cpu_map_rows(const ElementwiseArgs& a, F& f, int64_t o_begin, int64_t o_end, const int64_t* stride_bytes,
                  const int64_t* elem_size) {
  cpu_map_rows_impl<Out, In...>(a, f, o_begin, o_end, stride_bytes, elem_size, std::index_sequence_for<In...>{});
}

template <typename Out, typename... In, typename F, size_t... I>
void cpu_map_impl(const ElementwiseArgs& a, F&& f, std::index_sequence<I...>) {
  constexpr int N = sizeof...(In) + 1;
  if (a.contiguous) {
    Out* out = reinterpret_cast<Out*>(a.data[0]);
    [[maybe_unused]] auto ins = std::make_tuple(reinterpret_cast<const In*>(a.data[I + 1])...);
    parallel_for(0, a.numel, kCpuGrain, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) out[i] = f(std::get<I>(ins)[i]...);
    });
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
  parallel_for(0, outer, (kCpuGrain + inner - 1) / inner, [&](int64_t o_begin, int64_t o_end) {
    cpu_map_rows<Out, In...>(a, f, o_begin, o_end, stride_bytes, elem_size);
  });
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
  parallel_for(0, a.numel / inner, (kCpuGrain + inner - 1) / inner, [&](int64_t o_begin, int64_t o_end) {
    int64_t idx[kMaxElementwiseDims] = {};
    for (int64_t d = nd - 2, rest = o_begin; d >= 0; --d) {
      idx[d] = rest % a.sizes[d];
      rest /= a.sizes[d];
    }
    int64_t linear = o_begin * inner;
    for (int64_t o = o_begin; o < o_end; ++o) {
      int64_t off = 0;
      for (int d = 0; d < nd - 1; ++d) off += idx[d] * a.strides[0][d];
      Out* p = reinterpret_cast<Out*>(a.data[0]) + off;
      for (int64_t i = 0; i < inner; ++i) p[i * a.strides[0][nd - 1]] = f(linear++);
      for (int d = nd - 2; d >= 0; --d) {
        if (++idx[d] < a.sizes[d]) break;
        idx[d] = 0;
      }
    }
  });
}

}  // namespace ember::cpu
