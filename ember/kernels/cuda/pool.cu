// CUDA pooling kernels (contract in ember/core/ops/pool_kernels.h).
//
// Forward: one thread per output element walks its window. Max backward
// over windows that tile the plane: one thread per output element writes
// its window (each input element is in one window at most). Other backward:
// one thread per input element visits the outputs whose windows can hold it and
// sums their gradients in acc_t, in the same (row-major output) order as
// the CPU kernel: no atomics, a deterministic result, one rounding. For max
// pooling an output contributes only if its saved argmax is this element.
// Grid-stride loops over memory order (so channels-last arrays are read and
// written coalesced, channels innermost); planes are addressed through
// ember/kernels/pool_layout.h. The index math (a handful of divisions per element)
// is 32-bit when every size and offset fits in int32, 64-bit otherwise.
#include <algorithm>

#include "ember/core/ops/pool_kernels.h"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/pool_layout.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned(std::min<int64_t>((n + kThreads - 1) / kThreads, int64_t(1) << 20)); }

// The first tap of a dilated window starting at `start` that is >= 0.
template <typename I>
__device__ __forceinline__ I first_tap(I start, I dilation) {
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

// PoolArgs' sizes in the index type I of a kernel.
template <typename I>
struct Dims {
  I planes, h, w, out_h, out_w, kernel_h, kernel_w, stride_h, stride_w, padding_h, padding_w, dilation_h, dilation_w;
  PlaneLayout<I> layout, gy_layout;  // of every array but grad_output, and of grad_output
  __device__ explicit Dims(const PoolArgs& a)
      : planes(I(a.planes)),
        h(I(a.h)),
        w(I(a.w)),
        out_h(I(a.out_h)),
        out_w(I(a.out_w)),
        kernel_h(I(a.kernel_h)),
        kernel_w(I(a.kernel_w)),
        stride_h(I(a.stride_h)),
        stride_w(I(a.stride_w)),
        padding_h(I(a.padding_h)),
        padding_w(I(a.padding_w)),
        dilation_h(I(a.dilation_h)),
        dilation_w(I(a.dilation_w)),
        layout{I(a.channels), a.channels_last},
        gy_layout{I(a.channels), a.grad_output_channels_last} {}
};

template <typename T, typename I>
__global__ void max_forward_kernel(PoolArgs a) {
  using A = acc_t<T>;
  const Dims<I> d(a);
  const I total = d.planes * d.out_h * d.out_w;
  for (I o = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); o < total; o += I(gridDim.x) * I(blockDim.x)) {
    I pl, pos;
    d.layout.locate(o, d.out_h * d.out_w, pl, pos);
    const I ox = pos % d.out_w, oy = pos / d.out_w, step = d.layout.step();
    const T* plane = static_cast<const T*>(a.input) + d.layout.base(pl, d.h * d.w);
    const I ys = oy * d.stride_h - d.padding_h, xs = ox * d.stride_w - d.padding_w;
    const I y0 = first_tap(ys, d.dilation_h), y1 = min(ys + (d.kernel_h - 1) * d.dilation_h + 1, d.h);
    const I x0 = first_tap(xs, d.dilation_w), x1 = min(xs + (d.kernel_w - 1) * d.dilation_w + 1, d.w);
    A best = A(-INFINITY);
    I best_at = y0 < y1 && x0 < x1 ? y0 * d.w + x0 : I(-1);
    for (I y = y0; y < y1; y += d.dilation_h) {
      for (I x = x0; x < x1; x += d.dilation_w) {
        A v = to_acc(plane[(y * d.w + x) * step]);
        if (v > best || v != v) {
          best = v;
          best_at = y * d.w + x;
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
  const PlaneLayout<int64_t> layout{a.channels, a.channels_last};
  const int64_t step = layout.step();
  for (int64_t o = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; o < total; o += int64_t(gridDim.x) * blockDim.x) {
    int64_t pl, pos;
    layout.locate(o, a.out_h * a.out_w, pl, pos);
    const int64_t ox = pos % a.out_w, oy = pos / a.out_w;
    const T* plane = static_cast<const T*>(a.input) + layout.base(pl, a.h * a.w);
    const Window win = Adaptive ? adaptive_window(a, oy, ox) : avg_window(a, oy, ox);
    A total_in = 0;
    for (int64_t y = win.y0; y < win.y1; ++y) {
      for (int64_t x = win.x0; x < win.x1; ++x) total_in += to_acc(plane[(y * a.w + x) * step]);
    }
    static_cast<T*>(a.output)[o] = from_acc<T>(win.divisor > 0 ? total_in / A(win.divisor) : A(0));
  }
}

template <typename T, typename I>
__global__ void max_backward_kernel(PoolArgs a) {
  using A = acc_t<T>;
  const Dims<I> d(a);
  const I total = d.planes * d.h * d.w;
  const I span_h = (d.kernel_h - 1) * d.dilation_h + 1, span_w = (d.kernel_w - 1) * d.dilation_w + 1;
  for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < total; i += I(gridDim.x) * I(blockDim.x)) {
    I pl, pos;
    d.layout.locate(i, d.h * d.w, pl, pos);
    const I x = pos % d.w, y = pos / d.w, step = d.layout.step();
    // Outputs whose window spans row y: oy * stride - pad <= y < oy * stride - pad + span.
    const I oy0 = y + d.padding_h < span_h ? 0 : (y + d.padding_h - span_h) / d.stride_h + 1;
    const I oy1 = min((y + d.padding_h) / d.stride_h + 1, d.out_h);
    const I ox0 = x + d.padding_w < span_w ? 0 : (x + d.padding_w - span_w) / d.stride_w + 1;
    const I ox1 = min((x + d.padding_w) / d.stride_w + 1, d.out_w);
    const I here = pos, base = d.layout.base(pl, d.out_h * d.out_w);
    const I gy_base = d.gy_layout.base(pl, d.out_h * d.out_w), gy_step = d.gy_layout.step();
    const T* gy = static_cast<const T*>(a.grad_output);
    A acc = 0;
    for (I oy = oy0; oy < oy1; ++oy) {
      for (I ox = ox0; ox < ox1; ++ox) {
        const I at = oy * d.out_w + ox;
        if (a.indices[base + at * step] == int64_t(here)) acc += to_acc(gy[gy_base + at * gy_step]);
      }
    }
    static_cast<T*>(a.grad_input)[i] = from_acc<T>(acc);
  }
}

// Max backward where the windows tile the plane (stride == kernel, no
// padding, no dilation): each element is in one window at most, so the
// thread of output o writes its window's elements, the gradient at the
// argmax and 0 elsewhere, and the last row and column of windows also zero
// the rows and columns no window holds. Each element written once.
template <typename T, typename I>
__global__ void max_backward_tiled_kernel(PoolArgs a) {
  const Dims<I> d(a);
  const I total = d.planes * d.out_h * d.out_w;
  for (I o = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); o < total; o += I(gridDim.x) * I(blockDim.x)) {
    I pl, pos;
    d.layout.locate(o, d.out_h * d.out_w, pl, pos);
    const I ox = pos % d.out_w, oy = pos / d.out_w, step = d.layout.step();
    const I here = I(a.indices[o]);
    const T g =
        static_cast<const T*>(a.grad_output)[d.gy_layout.base(pl, d.out_h * d.out_w) + pos * d.gy_layout.step()];
    T* plane = static_cast<T*>(a.grad_input) + d.layout.base(pl, d.h * d.w);
    const I y0 = oy * d.kernel_h, x0 = ox * d.kernel_w;
    const I y1 = oy == d.out_h - 1 ? d.h : min(y0 + d.kernel_h, d.h);
    const I x1 = ox == d.out_w - 1 ? d.w : min(x0 + d.kernel_w, d.w);
    for (I y = y0; y < y1; ++y) {
      for (I x = x0; x < x1; ++x) plane[(y * d.w + x) * step] = y * d.w + x == here ? g : from_acc<T>(acc_t<T>(0));
    }
  }
}

bool tiles_the_plane(const PoolArgs& a) {
  return a.stride_h == a.kernel_h && a.stride_w == a.kernel_w && a.padding_h == 0 && a.padding_w == 0 &&
         a.dilation_h == 1 && a.dilation_w == 1;
}

template <typename T, bool Adaptive>
__global__ void avg_backward_kernel(PoolArgs a) {
  using A = acc_t<T>;
  const int64_t total = a.planes * a.h * a.w;
  const PlaneLayout<int64_t> layout{a.channels, a.channels_last}, gy_layout{a.channels, a.grad_output_channels_last};
  const int64_t gy_step = gy_layout.step();
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t pl, pos;
    layout.locate(i, a.h * a.w, pl, pos);
    const int64_t x = pos % a.w, y = pos / a.w;
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
    const int64_t base = gy_layout.base(pl, a.out_h * a.out_w);
    const T* gy = static_cast<const T*>(a.grad_output);
    A acc = 0;
    for (int64_t oy = oy0; oy < oy1; ++oy) {
      for (int64_t ox = ox0; ox < ox1; ++ox) {
        const Window win = Adaptive ? adaptive_window(a, oy, ox) : avg_window(a, oy, ox);
        acc += to_acc(gy[base + (oy * a.out_w + ox) * gy_step]) / A(win.divisor);
      }
    }
    static_cast<T*>(a.grad_input)[i] = from_acc<T>(acc);
  }
}

// Whether every size, element count and window offset of the problem fits
// in int32 (the windows reach at most a dilated kernel beyond the padding).
bool fits_int32(const PoolArgs& a) {
  const int64_t span = std::max((a.kernel_h - 1) * a.dilation_h, (a.kernel_w - 1) * a.dilation_w) + 1;
  const int64_t reach = std::max(a.h, a.w) + std::max(a.padding_h, a.padding_w) + span +
                        std::max(a.out_h * a.stride_h, a.out_w * a.stride_w);
  // The grid-stride loops step past the last index by up to 2^28 (blocks_for caps the grid).
  const int64_t largest_param =
      std::max({a.kernel_h, a.kernel_w, a.stride_h, a.stride_w, a.padding_h, a.padding_w, a.dilation_h, a.dilation_w});
  return std::max(a.planes * a.h * a.w, a.planes * a.out_h * a.out_w) < INT32_MAX - (int64_t(1) << 28) &&
         reach < INT32_MAX / 2 && largest_param < INT32_MAX / 2;
}

// f.template operator()<I>() with I = int32_t where fits_int32(a), else int64_t.
template <typename F>
void with_index_type(const PoolArgs& a, F&& f) {
  if (fits_int32(a)) {
    f.template operator()<int32_t>();
  } else {
    f.template operator()<int64_t>();
  }
}

void forward(PoolOp op, const PoolArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  const unsigned blocks = blocks_for(a.planes * a.out_h * a.out_w);
  EMBER_DISPATCH_FLOAT(a.dtype, "pool2d", [&]<typename T>() {
    switch (op) {
      case PoolOp::Max:
        with_index_type(a, [&]<typename I>() { max_forward_kernel<T, I><<<blocks, kThreads, 0, stream>>>(a); });
        break;
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
      case PoolOp::Max:
        with_index_type(a, [&]<typename I>() {
          if (tiles_the_plane(a)) {
            max_backward_tiled_kernel<T, I><<<blocks_for(a.planes * a.out_h * a.out_w), kThreads, 0, stream>>>(a);
          } else {
            max_backward_kernel<T, I><<<blocks, kThreads, 0, stream>>>(a);
          }
        });
        break;
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
