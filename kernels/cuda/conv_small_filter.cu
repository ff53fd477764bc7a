// CUDA kernels of the small-filter weight gradient (see
// kernels/cuda/conv_small_filter.h).
//
// First launch: a block of 8 warps covers 32 output channels (channels-last:
// a lane each, the warps 8 position slots, so a warp reads one position's 32
// consecutive gradients and its lanes share the window's input addresses)
// or 8 (NCHW: a warp each, the lanes 32 position slots, so a warp reads
// consecutive positions of one channel's plane); blockIdx.y picks the
// channels, blockIdx.x the positions slot, slot + slots, ... Each thread
// sums gy * x for each tap of its channel's filter and gy alone (the bias),
// the block adds its threads' sums per channel and writes them to
// partials[(o * (taps + 1) + entry) * blocks + block]. Second launch: a warp
// per entry adds its blocks' partials, a lane per stretch of blocks and then
// the warp's fixed shuffle tree, and rounds once into grad_weight (in the
// weight's layout) or grad_bias.
#include <algorithm>

#include "core/cuda/device.h"
#include "core/error.h"
#include "core/ops.h"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/conv_small_filter.h"
#include "kernels/cuda/elementwise_launch.cuh"
#include "kernels/cuda/grid_math.h"

namespace ember::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

int64_t taps_of(const ConvArgs& a) { return a.c_in / a.groups * a.kernel_h * a.kernel_w; }

// Output channels a block covers, and its position slots.
int channels_per_block(bool channels_last) { return channels_last ? 32 : kWarps; }
int slots_per_block(bool channels_last) { return channels_last ? kWarps : 32; }

template <typename T, int MaxTaps, bool ChannelsLast>
__global__ void __launch_bounds__(kThreads) partial_sums_kernel(const ConvArgs a, int taps, acc_t<T>* partials) {
  using A = acc_t<T>;
  // Each tap's input channel within the group and its offsets from the
  // window's corner.
  __shared__ int tap_channel[MaxTaps], tap_row[MaxTaps], tap_col[MaxTaps];
  const int area = int(a.kernel_h * a.kernel_w);
  if (int(threadIdx.x) < taps) {
    const int t = int(threadIdx.x), r = t % area;
    tap_channel[t] = t / area;
    tap_row[t] = int(r / a.kernel_w * a.dilation_h);
    tap_col[t] = int(r % a.kernel_w * a.dilation_w);
  }
  __syncthreads();
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
  const int64_t o = ChannelsLast ? int64_t(blockIdx.y) * 32 + lane : int64_t(blockIdx.y) * kWarps + warp;
  const int slots = ChannelsLast ? kWarps : 32, slot = ChannelsLast ? warp : lane;
  const int64_t plane = a.out_h * a.out_w, m = a.n * plane, step = int64_t(gridDim.x) * slots;
  // acc[t] for tap t < taps; acc[MaxTaps] the bias's sum.
  A acc[MaxTaps + 1];
#pragma unroll
  for (int t = 0; t <= MaxTaps; ++t) acc[t] = A(0);
  if (o < a.c_out) {
    const T* x = static_cast<const T*>(a.input);
    const T* gy = static_cast<const T*>(a.grad_output);
    const int64_t first_channel = o / (a.c_out / a.groups) * (a.c_in / a.groups);
    for (int64_t pos = int64_t(blockIdx.x) * slots + slot; pos < m; pos += step) {
      const int64_t b = pos / plane, r = pos - b * plane, oy = r / a.out_w, ox = r - oy * a.out_w;
      const A g = to_acc(gy[ChannelsLast ? pos * a.c_out + o : (b * a.c_out + o) * plane + r]);
      acc[MaxTaps] += g;
      const int64_t iy0 = oy * a.stride_h - a.padding_h, ix0 = ox * a.stride_w - a.padding_w;
#pragma unroll
      for (int t = 0; t < MaxTaps; ++t) {
        if (t >= taps) break;
        const int64_t iy = iy0 + tap_row[t], ix = ix0 + tap_col[t];
        if (iy < 0 || iy >= a.h || ix < 0 || ix >= a.w) continue;
        const int64_t c = first_channel + tap_channel[t];
        acc[t] += g * to_acc(x[ChannelsLast ? ((b * a.h + iy) * a.w + ix) * a.c_in + c
                                            : ((b * a.c_in + c) * a.h + iy) * a.w + ix]);
      }
    }
  }
  // Entry e < taps is tap e, entry taps the bias; the block's threads of one
  // channel add theirs.
  __shared__ A share[kWarps][33];
  const int64_t entries = taps + 1;
#pragma unroll
  for (int e = 0; e <= MaxTaps; ++e) {
    if (e > taps) break;
    const A v = e == taps ? acc[MaxTaps] : acc[e];
    if constexpr (ChannelsLast) {
      share[warp][lane] = v;
      __syncthreads();
      if (warp == 0 && o < a.c_out) {
        A s = share[0][lane];
        for (int w = 1; w < kWarps; ++w) s += share[w][lane];
        partials[(o * entries + e) * gridDim.x + blockIdx.x] = s;
      }
      __syncthreads();
    } else {
      const A s = warp_sum(v);
      if (lane == 0 && o < a.c_out) partials[(o * entries + e) * gridDim.x + blockIdx.x] = s;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) finish_kernel(const ConvArgs a, int taps, int blocks,
                                                          const acc_t<T>* partials) {
  using A = acc_t<T>;
  const int64_t entry = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32, entries = taps + 1;
  const int lane = int(threadIdx.x) & 31;
  if (entry >= a.c_out * entries) return;  // whole warps: entries are a warp's
  A s = A(0);
  for (int j = lane; j < blocks; j += 32) s += partials[entry * blocks + j];
  s = warp_sum(s);
  if (lane != 0) return;
  const int64_t o = entry / entries, e = entry - o * entries;
  if (e == taps) {
    if (a.grad_bias != nullptr) static_cast<T*>(a.grad_bias)[o] = from_acc<T>(s);
    return;
  }
  // Tap e is (input channel i, window offset r) of the filter; the weight is
  // (c_out, c_in / groups, kh, kw), or (c_out, kh, kw, c_in / groups) in
  // memory when channels-last.
  const int64_t area = a.kernel_h * a.kernel_w, i = e / area, r = e - i * area;
  const int64_t index = a.channels_last ? o * taps + r * (a.c_in / a.groups) + i : o * taps + e;
  static_cast<T*>(a.grad_weight)[index] = from_acc<T>(s);
}

template <typename T, int MaxTaps, bool ChannelsLast>
void launch(const ConvArgs& a, cudaStream_t stream) {
  using A = acc_t<T>;
  const int taps = int(taps_of(a));
  const int64_t m = a.n * a.out_h * a.out_w;
  const int64_t channel_blocks = ceil_div(a.c_out, channels_per_block(ChannelsLast));
  // Two blocks per multiprocessor in all, each slot given at least 4 positions.
  const int64_t sms = properties(a.device).multiprocessor_count;
  const int blocks = int(std::clamp<int64_t>(ceil_div(2 * sms, channel_blocks), 1,
                                             ceil_div(m, 4 * slots_per_block(ChannelsLast))));
  const int64_t entries = a.c_out * (taps + 1);
  Tensor partials = empty({entries * blocks * int64_t(sizeof(A))}, DType::Bool, cuda_device(a.device));
  A* p = static_cast<A*>(partials.data_ptr());
  partial_sums_kernel<T, MaxTaps, ChannelsLast>
      <<<dim3(unsigned(blocks), unsigned(channel_blocks)), kThreads, 0, stream>>>(a, taps, p);
  EMBER_CUDA_CHECK_LAUNCH();
  finish_kernel<T><<<grid_size(ceil_div(entries, kWarps)), kThreads, 0, stream>>>(a, taps, blocks, p);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool small_filter_weight_grad_applies(const ConvArgs& a) {
  return a.grad_weight != nullptr && taps_of(a) <= kSmallFilterMaxTaps &&
         ceil_div(a.c_out, channels_per_block(a.channels_last)) <= 65535;
}

void small_filter_weight_grad(const ConvArgs& a) {
  EMBER_CHECK(small_filter_weight_grad_applies(a),
              "conv2d_backward: the small-filter weight gradient takes at most "
                  << kSmallFilterMaxTaps << " taps and a weight gradient, got " << taps_of(a) << " taps");
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "conv2d_backward", [&]<typename T>() {
    const bool few = taps_of(a) <= 9;
    if (a.channels_last) {
      if (few) launch<T, 9, true>(a, stream);
      else launch<T, kSmallFilterMaxTaps, true>(a, stream);
    } else {
      if (few) launch<T, 9, false>(a, stream);
      else launch<T, kSmallFilterMaxTaps, false>(a, stream);
    }
  });
}

}  // namespace ember::cuda
