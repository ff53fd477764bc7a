// CPU kernels of the indexing family: gather and scatter-add over IndexArgs
// (see ember/core/ops/index_kernels.h for the contract). Each first checks every
// index value, then walks the iteration with one odometer over the outer
// dims and a strided inner loop. Scatter-add runs serially, so repeated
// indices accumulate in a fixed order.
#include <type_traits>

#include "ember/core/ops/index_kernels.h"
#include "ember/kernels/cpu/loops.h"

namespace ember::cpu {
namespace {

template <typename I>
void check_range(const IndexArgs& a) {
  const I* index = static_cast<const I*>(a.index);
  for (int64_t i = 0; i < a.index_numel; ++i) {
    int64_t v = int64_t(index[i]);
    if (v < 0 || v >= a.dim_size) [[unlikely]]
      index_out_of_range(a, v);
  }
}

// f(T* p0, T* p1, I index) for every element of a.iter, with pointers to
// operands 0 and 1 and the value of operand 2.
template <typename T, typename I, typename F>
void walk(const ElementwiseArgs& a, F&& f) {
  if (a.numel == 0) return;
  const int nd = a.ndim;
  const int64_t inner = a.sizes[nd - 1];
  const int64_t s0 = a.strides[0][nd - 1], s1 = a.strides[1][nd - 1], s2 = a.strides[2][nd - 1];
  int64_t idx[kMaxElementwiseDims] = {};
  for (int64_t o = 0; o < a.numel / inner; ++o) {
    int64_t off[3] = {0, 0, 0};
    for (int d = 0; d < nd - 1; ++d) {
      for (int k = 0; k < 3; ++k) off[k] += idx[d] * a.strides[k][d];
    }
    T* p0 = reinterpret_cast<T*>(a.data[0]) + off[0];
    T* p1 = reinterpret_cast<T*>(a.data[1]) + off[1];
    const I* p2 = reinterpret_cast<const I*>(a.data[2]) + off[2];
    for (int64_t i = 0; i < inner; ++i) f(p0 + i * s0, p1 + i * s1, int64_t(p2[i * s2]));
    for (int d = nd - 2; d >= 0; --d) {
      if (++idx[d] < a.sizes[d]) break;
      idx[d] = 0;
    }
  }
}

void gather_kernel(const IndexArgs& a) {
  dispatch_index(a.index_dtype, a.op, [&]<typename I>() {
    check_range<I>(a);
    EMBER_DISPATCH_DTYPE(a.dtype, a.op, [&]<typename T>() {
      const int64_t stride = a.dim_stride;
      walk<T, I>(a.iter, [stride](T* out, T* base, int64_t i) { *out = base[i * stride]; });
    });
  });
}

void scatter_add_kernel(const IndexArgs& a) {
  dispatch_index(a.index_dtype, a.op, [&]<typename I>() {
    check_range<I>(a);
    EMBER_DISPATCH_DTYPE(a.dtype, a.op, [&]<typename T>() {
      using A = acc_t<T>;
      const int64_t stride = a.dim_stride;
      walk<T, I>(a.iter, [stride](T* base, T* src, int64_t i) {
        T* dst = base + i * stride;
        if constexpr (std::is_same_v<T, bool>) {
          *dst = *dst || *src;
        } else {
          *dst = T(A(*dst) + A(*src));
        }
      });
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(gather_stub, DeviceType::CPU, gather_kernel);
EMBER_REGISTER_KERNEL(scatter_add_stub, DeviceType::CPU, scatter_add_kernel);

}  // namespace ember::cpu
