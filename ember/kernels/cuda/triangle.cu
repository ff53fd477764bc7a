// CUDA kernel of triu and tril (contract in ember/core/ops/triangle_kernels.h):
// one thread per output element in a grid-stride loop, the output written
// in order (coalesced), the input read only where kept. Index math is
// 32-bit when every index and offset fits.
#include <algorithm>
#include <cstdint>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/ops/triangle_kernels.h"
#include "ember/kernels/cuda/common/grid_math.h"

namespace ember::cuda {
namespace {

constexpr int kBlock = 256;

template <typename T, typename I>
__global__ void triangle_cuda_kernel(TriangleArgs a, I n) {
  const T* in = static_cast<const T*>(a.in);
  T* out = static_cast<T*>(a.out);
  const I rows = I(a.rows), cols = I(a.cols);
  const I sb = I(a.in_strides[0]), sr = I(a.in_strides[1]), sc = I(a.in_strides[2]);
  const int64_t diagonal = a.diagonal;
  for (I k = I(blockIdx.x) * kBlock + threadIdx.x; k < n; k += I(gridDim.x) * kBlock) {
    const I j = k % cols, row = k / cols;
    const I i = row % rows, b = row / rows;
    const int64_t offset = int64_t(j) - int64_t(i);
    const bool keep = a.upper ? offset >= diagonal : offset <= diagonal;
    out[k] = keep ? in[b * sb + i * sr + j * sc] : T{};
  }
}

// Whether every output index and input offset fits in 32 bits.
bool fits_32bit(const TriangleArgs& a) {
  const int64_t n = a.batch * a.rows * a.cols;
  int64_t last = 0;
  const int64_t sizes[3] = {a.batch, a.rows, a.cols};
  for (int d = 0; d < 3; ++d) last += (sizes[d] - 1) * (a.in_strides[d] < 0 ? -a.in_strides[d] : a.in_strides[d]);
  return n < INT32_MAX && last < INT32_MAX;
}

void triangle_kernel(const TriangleArgs& a) {
  DeviceGuard guard(a.device);
  const int64_t n = a.batch * a.rows * a.cols;
  const unsigned grid = grid_size(std::min<int64_t>(ceil_div(n, kBlock), 65536));
  cudaStream_t stream = current_stream(a.device).handle();
  const char* op = a.upper ? "triu" : "tril";
  EMBER_DISPATCH_DTYPE(a.dtype, op, [&]<typename T>() {
    if (fits_32bit(a)) {
      triangle_cuda_kernel<T, uint32_t><<<grid, kBlock, 0, stream>>>(a, uint32_t(n));
    } else {
      triangle_cuda_kernel<T, int64_t><<<grid, kBlock, 0, stream>>>(a, n);
    }
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(triangle_stub, DeviceType::CUDA, triangle_kernel);

}  // namespace ember::cuda
