// CUDA kernels of the small-filter weight gradient (see
// ember/kernels/cuda/conv_small_filter.h).
//
// First launch: blockIdx.y picks a chunk of up to 4 output channels of one
// group (2 for filters of more than 9 taps), blockIdx.x and the thread a
// position, then every gridDim.x * 256th after it. A thread loads its
// position's input window once (the taps, shared by the chunk's channels),
// then for each channel of the chunk reads the output gradient and adds
// gy * window to the channel's tap sums and gy to its bias sum, all in
// registers. Consecutive threads take consecutive positions: NCHW planes
// are read in runs, channels-last gradients a chunk's channels at a time.
// The warps add their lanes' sums by shuffles, the block its warps' in
// shared memory, and the block writes one partial sum per entry to
// partials[(o * (taps + 1) + entry) * blocks + block]. Second launch: a
// warp per entry adds its blocks' partials, a lane per stretch of blocks
// and then the warp's fixed shuffle tree, and rounds once into grad_weight
// (in the weight's layout) or grad_bias.
#include <algorithm>
#include <climits>
#include <initializer_list>

#include "ember/core/cuda/device.h"
#include "ember/core/error.h"
#include "ember/core/ops.h"
#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/grid_math.h"
#include "ember/kernels/cuda/common/workspace.h"
#include "ember/kernels/cuda/conv_small_filter.h"

namespace ember::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

int64_t taps_of(const ConvArgs& a) { return a.c_in / a.groups * a.kernel_h * a.kernel_w; }

// Whether the product of these positive factors is at most limit, without
// overflowing on the way.
bool product_within(std::initializer_list<int64_t> factors, int64_t limit) {
  int64_t product = 1;
  for (int64_t f : factors) {
    if (f > limit / product) return false;
    product *= f;
  }
  return true;
}

// The output channels a thread sums for: up to 4 (2 for filters of more
// than 9 taps), all of one group, so that they share the input window.
template <int MaxTaps>
constexpr int kChunk = MaxTaps <= 9 ? 4 : 2;

struct Chunks {
  int64_t size;       // channels a chunk (the last of a group may have fewer)
  int64_t per_group;  // chunks a group
};

Chunks chunks_of(const ConvArgs& a, int chunk) {
  const int64_t per_group_channels = a.c_out / a.groups, size = std::min<int64_t>(chunk, per_group_channels);
  return {size, ceil_div(per_group_channels, size)};
}

template <typename T, int MaxTaps>
__global__ void __launch_bounds__(kThreads)
    partial_sums_kernel(const ConvArgs a, int taps, Chunks chunks, acc_t<T>* partials) {
  using A = acc_t<T>;
  constexpr int C = kChunk<MaxTaps>;
  // Each tap's offsets from the window's corner: rows, columns, and
  // elements of the input (its channel within the group included). Every
  // index, offset and corner fits in 32 bits: applies() bounds the padded
  // input and the output.
  __shared__ int tap_row[MaxTaps], tap_col[MaxTaps], tap_offset[MaxTaps];
  const int h = int(a.h), w = int(a.w), c_in = int(a.c_in);
  if (int(threadIdx.x) < taps) {
    const int t = int(threadIdx.x), area = int(a.kernel_h * a.kernel_w), i = t / area, k = t % area;
    tap_row[t] = k / int(a.kernel_w) * int(a.dilation_h);
    tap_col[t] = k % int(a.kernel_w) * int(a.dilation_w);
    tap_offset[t] = a.channels_last ? (tap_row[t] * w + tap_col[t]) * c_in + i : (i * h + tap_row[t]) * w + tap_col[t];
  }
  __syncthreads();
  const int per_group_channels = int(a.c_out / a.groups), group = int(blockIdx.y / chunks.per_group);
  const int first = group * per_group_channels + int(blockIdx.y % chunks.per_group) * int(chunks.size);
  const int left = (group + 1) * per_group_channels - first;
  const int count = left < int(chunks.size) ? left : int(chunks.size);
  const int first_input = group * int(a.c_in / a.groups), c_out = int(a.c_out);
  const int out_w = int(a.out_w), plane = int(a.out_h) * out_w, m = int(a.n) * plane;
  const T* __restrict__ x = static_cast<const T*>(a.input);
  const T* __restrict__ gy = static_cast<const T*>(a.grad_output);
  // acc[j][t]: channel first + j, tap t < taps; acc[j][MaxTaps] its bias sum.
  A acc[C][MaxTaps + 1];
#pragma unroll
  for (int j = 0; j < C; ++j) {
#pragma unroll
    for (int t = 0; t <= MaxTaps; ++t) acc[j][t] = A(0);
  }
  for (int pos = int(blockIdx.x * kThreads + threadIdx.x); pos < m; pos += int(gridDim.x) * kThreads) {
    const int b = pos / plane, r = pos - b * plane, oy = r / out_w, ox = r - oy * out_w;
    const int iy0 = oy * int(a.stride_h) - int(a.padding_h), ix0 = ox * int(a.stride_w) - int(a.padding_w);
    // The window's corner, which may lie in the padding.
    const int corner = a.channels_last ? ((b * h + iy0) * w + ix0) * c_in + first_input
                                       : ((b * c_in + first_input) * h + iy0) * w + ix0;
    A window[MaxTaps];
#pragma unroll
    for (int t = 0; t < MaxTaps; ++t) {
      bool inside = false;
      if (t < taps) {
        const int iy = iy0 + tap_row[t], ix = ix0 + tap_col[t];
        inside = unsigned(iy) < unsigned(h) && unsigned(ix) < unsigned(w);
      }
      window[t] = inside ? to_acc(x[corner + tap_offset[t]]) : A(0);
    }
#pragma unroll
    for (int j = 0; j < C; ++j) {
      const A g = j < count
                      ? to_acc(gy[a.channels_last ? pos * c_out + first + j : (b * c_out + first + j) * plane + r])
                      : A(0);
      acc[j][MaxTaps] += g;
#pragma unroll
      for (int t = 0; t < MaxTaps; ++t) acc[j][t] += g * window[t];
    }
  }
  // Entry e < taps of a channel is its tap e, entry taps its bias; each
  // warp adds its lanes', then the block its warps'.
  __shared__ A share[kWarps][C * (MaxTaps + 1)];
  const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
#pragma unroll
  for (int j = 0; j < C; ++j) {
#pragma unroll
    for (int t = 0; t <= MaxTaps; ++t) {
      const A v = warp_sum(acc[j][t]);
      if (lane == 0) share[warp][j * (MaxTaps + 1) + t] = v;
    }
  }
  __syncthreads();
  const int64_t entries = taps + 1;
  for (int i = int(threadIdx.x); i < count * int(entries); i += kThreads) {
    const int j = i / int(entries), e = i % int(entries);
    const int slot = j * (MaxTaps + 1) + (e == taps ? MaxTaps : e);
    A total = share[0][slot];
    for (int k = 1; k < kWarps; ++k) total += share[k][slot];
    partials[((int64_t(first) + j) * entries + e) * gridDim.x + blockIdx.x] = total;
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads)
    finish_kernel(const ConvArgs a, int taps, int blocks, const acc_t<T>* partials) {
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

// The blocks of partial_sums_kernel<T, MaxTaps> a multiprocessor runs at
// once (its registers decide: 2 for 9 taps, 1 for 27 on sm_90), asked of
// the runtime once per kernel.
template <typename T, int MaxTaps>
int64_t resident_blocks() {
  static const int64_t blocks = [] {
    int b = 0;
    EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, partial_sums_kernel<T, MaxTaps>, kThreads, 0));
    return int64_t(std::max(b, 1));
  }();
  return blocks;
}

template <typename T, int MaxTaps>
void launch(const ConvArgs& a, cudaStream_t stream) {
  using A = acc_t<T>;
  const int taps = int(taps_of(a));
  const int64_t m = a.n * a.out_h * a.out_w;
  const Chunks chunks = chunks_of(a, kChunk<MaxTaps>);
  const int64_t chunk_blocks = a.groups * chunks.per_group;
  // One wave of the blocks the device holds at once, all chunks together,
  // but no more than gives each thread 2 positions.
  const int64_t wave = resident_blocks<T, MaxTaps>() * properties(a.device).multiprocessor_count;
  const int blocks = int(std::clamp<int64_t>(ceil_div(wave, chunk_blocks), 1, ceil_div(m, 2 * kThreads)));
  const int64_t entries = a.c_out * (taps + 1);
  const Workspace partials = workspace_for<A>(entries * blocks, a.device);
  A* p = partials.as<A>();
  partial_sums_kernel<T, MaxTaps>
      <<<dim3(unsigned(blocks), unsigned(chunk_blocks)), kThreads, 0, stream>>>(a, taps, chunks, p);
  EMBER_CUDA_CHECK_LAUNCH();
  finish_kernel<T><<<grid_size(ceil_div(entries, kWarps)), kThreads, 0, stream>>>(a, taps, blocks, p);
  EMBER_CUDA_CHECK_LAUNCH();
}

}  // namespace

bool small_filter_weight_grad_applies(const ConvArgs& a) {
  if (a.grad_weight == nullptr || taps_of(a) > kSmallFilterMaxTaps) return false;
  // 32-bit indices over the padded input (window corners lie in the
  // padding) and the output, with room for a grid's stride past the last
  // position; the chunks within grid.y's limit.
  // (The front-end keeps each window inside the padded input.)
  const int64_t limit = INT_MAX / 2;
  const int chunk = taps_of(a) <= 9 ? kChunk<9> : kChunk<kSmallFilterMaxTaps>;
  return product_within({a.n, a.c_in, a.h + 2 * a.padding_h, a.w + 2 * a.padding_w}, limit) &&
         product_within({a.n, a.c_out, a.out_h, a.out_w}, limit) && a.stride_h <= limit && a.stride_w <= limit &&
         a.groups * chunks_of(a, chunk).per_group <= 65535;
}

void small_filter_weight_grad(const ConvArgs& a) {
  EMBER_CHECK(small_filter_weight_grad_applies(a),
              "conv2d_backward: the small-filter weight gradient takes a weight gradient, at most "
                  << kSmallFilterMaxTaps << " taps, 32-bit indices and at most 65535 chunks of channels; got "
                  << taps_of(a) << " taps, input [" << a.n << ", " << a.c_in << ", " << a.h << ", " << a.w
                  << "], output [" << a.n << ", " << a.c_out << ", " << a.out_h << ", " << a.out_w << "], groups "
                  << a.groups);
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "conv2d_backward", [&]<typename T>() {
    if (taps_of(a) <= 9) launch<T, 9>(a, stream);
    else launch<T, kSmallFilterMaxTaps>(a, stream);
  });
}

}  // namespace ember::cuda
