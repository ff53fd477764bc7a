// CUDA pooling kernels (contract in core/ops/pool_kernels.h).
//
// Forward: one thread per output element walks its window. Backward: one
// thread per input element visits the outputs whose windows can hold it and
// sums their gradients in acc_t, in the same (row-major output) order as
// the CPU kernel: no atomics, a deterministic result, one rounding. For max
// pooling an output contributes only if its saved argmax is this element.
// Grid-stride loops with 64-bit indices.
#include <algorithm>

#include "core/ops/pool_kernels.h"
#include "kernels/cuda/elementwise_launch.cuh"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 20)); }

// The first tap of a dilated window starting at `start` that is >= 0.
__device__ __forceinline__ int64_t first_tap(int64_t start, int64_t dilation) {
  return start >= 0 ? start : start + (-start + dilation - 1) / dilation * dilation;
}

struct Window {
  int64_t y0, y1, x0, x1, divisor;
};

__device__ __forceinline__ Window avg_window(const PoolArgs& a, int64_t oy, int64_t ox) {
  int64_t y0 = oy * a.stride_h - a.padding_h, x0 = ox * a.stride_w - a.padding_w;
  int64_t y1 = min(y0 + a.kernel_h, a.h + a.padding_h), x1 = min(x0 + a.kernel_w, a.w + a.padding_w);
  int64_t padded_area = (y1 - y0) * (x1 - x0);
  y0 = max(y0, int64_t(0));
  x0 = max(x0, int64_t(0));
  y1 = min(y1, a.h);
  x1 = min(x1, a.w);
  int64_t area = y1 > y0 && x1 > x0 ? (y1 - y0) * (x1 - x0) : 0;
  return {y0, y1, x0, x1, a.count_include_pad ? padded_area : area};
}

__device__ __forceinline__ Window adaptive_window(const PoolArgs& a, int64_t oy, int64_t ox) {
  int64_t y0 = oy * a.h / a.out_h, y1 = ((oy + 1) * a.h + a.out_h - 1) / a.out_h;
  int64_t x0 = ox * a.w / a.out_w, x1 = ((ox + 1) * a.w + a.out_w - 1) / a.out_w;
  return {y0, y1, x0, x1, (y1 - y0) * (x1 - x0)};
}

template <typename T>
__global__ void max_forward_kernel(PoolArgs a) {
  using A = acc_t<T>;
  const int64_t total = a.planes * a.out_h * a.out_w;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = o % a.out_w, oy = o / a.out_w % a.out_h, pl = o / (a.out_w * a.out_h);
    const T* plane = static_cast<const T*>(a.input) + pl * a.h * a.w;
    const int64_t ys = oy * a.stride_h - a.padding_h, xs = ox * a.stride_w - a.padding_w;
    const int64_t y0 = first_tap(ys, a.dilation_h), y1 = min(ys + (a.kernel_h - 1) * a.dilation_h + 1, a.h);
    const int64_t x0 = first_tap(xs, a.dilation_w), x1 = min(xs + (a.kernel_w - 1) * a.dilation_w + 1, a.w);
    A best = A(-INFINITY);
    int64_t best_at = y0 < y1 && x0 < x1 ? y0 * a.w + x0 : -1;
    for (int64_t y = y0; y < y1; y += a.dilation_h) {
      for (int64_t x = x0; x < x1; x += a.dilation_w) {
        A v = to_acc(plane[y * a.w + x]);
        if (v > best || v != v) {
          best = v;
          best_at = y * a.w + x;
        }
      }
    }
    static_cast<T*>(a.output)[o] = from_acc<T>(best);
    a.indices[o] = best_at;
  }
}

template <typename T, bool Adaptive>
__global__ void avg_forward_kernel(PoolArgs a) {
  using A = acc_t<T>;
  const int64_t total = a.planes * a.out_h * a.out_w;
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    const int64_t ox = o % a.out_w, oy = o / a.out_w % a.out_h, pl = o / (a.out_w * a.out_h);
    const T* plane = static_cast<const T*>(a.input) + pl * a.h * a.w;
    const Window win = Adaptive ? adaptive_window(a, oy, ox) : avg_window(a, oy, ox);
    A total_in = 0;
    for (int64_t y = win.y0; y < win.y1; ++y) {
      for (int64_t x = win.x0; x < win.x1; ++x) total_in += to_acc(plane[y * a.w + x]);
    }
    static_cast<T*>(a.output)[o] = from_acc<T>(win.divisor > 0 ? total_in / A(win.divisor) : A(0));
  }
}

template <typename T>
__global__ void max_backward_kernel(PoolArgs a) {
  using A = acc_t<T>;
  const int64_t total = a.planes * a.h * a.w;
  const int64_t span_h = (a.kernel_h - 1) * a.dilation_h + 1, span_w = (a.kernel_w - 1) * a.dilation_w + 1;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = i % a.w, y = i / a.w % a.h, pl = i / (a.w * a.h);
    // Outputs whose window spans row y: oy * stride - pad <= y < oy * stride - pad + span.
    const int64_t oy0 = y + a.padding_h < span_h ? 0 : (y + a.padding_h - span_h) / a.stride_h + 1;
    const int64_t oy1 = min((y + a.padding_h) / a.stride_h + 1, a.out_h);
    const int64_t ox0 = x + a.padding_w < span_w ? 0 : (x + a.padding_w - span_w) / a.stride_w + 1;
    const int64_t ox1 = min((x + a.padding_w) / a.stride_w + 1, a.out_w);
    const int64_t here = y * a.w + x, base = pl * a.out_h * a.out_w;
    const T* gy = static_cast<const T*>(a.grad_output);
    A acc = 0;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      for (int64_t ox = ox0; ox < ox1; ++ox) {
        const int64_t o = base + oy * a.out_w + ox;
        if (a.indices[o] == here) acc += to_acc(gy[o]);
      }
    }
    static_cast<T*>(a.grad_input)[i] = from_acc<T>(acc);
  }
}

template <typename T, bool Adaptive>
__global__ void avg_backward_kernel(PoolArgs a) {
  using A = acc_t<T>;
  const int64_t total = a.planes * a.h * a.w;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t x = i % a.w, y = i / a.w % a.h, pl = i / (a.w * a.h);
    int64_t oy0, oy1, ox0, ox1;
    if (Adaptive) {
      // Output bin o holds y exactly when floor(y * out / h) <= o < ceil((y + 1) * out / h).
      oy0 = y * a.out_h / a.h;
      oy1 = ((y + 1) * a.out_h + a.h - 1) / a.h;
      ox0 = x * a.out_w / a.w;
      ox1 = ((x + 1) * a.out_w + a.w - 1) / a.w;
    } else {
      oy0 = y + a.padding_h < a.kernel_h ? 0 : (y + a.padding_h - a.kernel_h) / a.stride_h + 1;
      oy1 = min((y + a.padding_h) / a.stride_h + 1, a.out_h);
      ox0 = x + a.padding_w < a.kernel_w ? 0 : (x + a.padding_w - a.kernel_w) / a.stride_w + 1;
      ox1 = min((x + a.padding_w) / a.stride_w + 1, a.out_w);
    }
    const int64_t base = pl * a.out_h * a.out_w;
    const T* gy = static_cast<const T*>(a.grad_output);
    A acc = 0;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      for (int64_t ox = ox0; ox < ox1; ++ox) {
        const Window win = Adaptive ? adaptive_window(a, oy, ox) : avg_window(a, oy, ox);
        acc += to_acc(gy[base + oy * a.out_w + ox]) / A(win.divisor);
      }
    }
    static_cast<T*>(a.grad_input)[i] = from_acc<T>(acc);
  }
}

void forward(PoolOp op, const PoolArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  const unsigned blocks = blocks_for(a.planes * a.out_h * a.out_w);
  EMBER_DISPATCH_FLOAT(a.dtype, "pool2d", [&]<typename T>() {
    switch (op) {
      case PoolOp::Max: max_forward_kernel<T><<<blocks, kThreads, 0, stream>>>(a); break;
      case PoolOp::Avg: avg_forward_kernel<T, false><<<blocks, kThreads, 0, stream>>>(a); break;
      case PoolOp::AdaptiveAvg: avg_forward_kernel<T, true><<<blocks, kThreads, 0, stream>>>(a); break;
    }
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

void backward(PoolOp op, const PoolArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  const unsigned blocks = blocks_for(a.planes * a.h * a.w);
  EMBER_DISPATCH_FLOAT(a.dtype, "pool2d_backward", [&]<typename T>() {
    switch (op) {
      case PoolOp::Max: max_backward_kernel<T><<<blocks, kThreads, 0, stream>>>(a); break;
      case PoolOp::Avg: avg_backward_kernel<T, false><<<blocks, kThreads, 0, stream>>>(a); break;
      case PoolOp::AdaptiveAvg: avg_backward_kernel<T, true><<<blocks, kThreads, 0, stream>>>(a); break;
    }
    EMBER_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(pool2d_forward_stub, DeviceType::CUDA, forward);
EMBER_REGISTER_KERNEL(pool2d_backward_stub, DeviceType::CUDA, backward);

}  // namespace ember::cuda
