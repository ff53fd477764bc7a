// CPU kernel of triu and tril (contract in ember/core/ops/triangle_kernels.h): per
// row, the kept run of columns is copied and the rest zero-filled.
#include <algorithm>

#include "ember/core/ops/triangle_kernels.h"

namespace ember::cpu {
namespace {

void triangle_kernel(const TriangleArgs& a) {
  const char* op = a.upper ? "triu" : "tril";
  EMBER_DISPATCH_DTYPE(a.dtype, op, [&]<typename T>() {
    const T* in = static_cast<const T*>(a.in);
    T* out = static_cast<T*>(a.out);
    const int64_t sb = a.in_strides[0], sr = a.in_strides[1], sc = a.in_strides[2];
    for (int64_t b = 0; b < a.batch; ++b) {
      for (int64_t i = 0; i < a.rows; ++i) {
        const T* src = in + b * sb + i * sr;
        T* dst = out + (b * a.rows + i) * a.cols;
        // Columns [keep_begin, keep_end) are kept.
        const int64_t edge = std::clamp<int64_t>(i + a.diagonal + (a.upper ? 0 : 1), 0, a.cols);
        const int64_t keep_begin = a.upper ? edge : 0, keep_end = a.upper ? a.cols : edge;
        std::fill(dst, dst + keep_begin, T{});
        for (int64_t j = keep_begin; j < keep_end; ++j) dst[j] = src[j * sc];
        std::fill(dst + keep_end, dst + a.cols, T{});
      }
    }
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(triangle_stub, DeviceType::CPU, triangle_kernel);

}  // namespace ember::cpu
