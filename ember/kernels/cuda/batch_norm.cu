// CUDA batch-norm kernels (contract in ember/core/ops/batch_norm_kernels.h).
//
// The input is (n, c, inner). Per-channel reductions split each channel's
// batch rows among several blocks, enough blocks over all channels to fill
// the device (about 8 per multiprocessor): block (c, s) reduces rows
// [s * rows, (s + 1) * rows) of channel c into one partial result, and a
// second kernel merges a channel's partials with one block (in a fixed
// order: the result does not depend on scheduling). With a single split
// the block finishes the channel itself. A block walks each of its rows' inner
// values with consecutive threads (coalesced); where inner is small it
// walks the flattened (row, inner) values instead, with 32-bit index math.
// Where inner is 1 and the channels are many (a channels-last input as
// (N*H*W, C, 1), or an (N, C) one), a channel's values lie C apart, so a
// block takes a tile of 32 channels instead: each warp reads 32 adjacent
// channels of one row (coalesced), 8 warps take every 8th row, and the 8
// partial results of a channel are merged in order.
//
// Forward: partial Welford statistics (count, mean, M2), merged (Chan et
// al.) into save_mean and save_invstd, and the running statistics updated
// in place, all on the device; in eval mode one thread per channel turns
// the running statistics into save_mean / save_invstd instead. Then
// y = x * scale + shift per element (scale, shift from the channel's
// statistics, weight and bias), one block per (row, channel) plane where
// planes are wide, the reductions' tiles where they walk tiles (a thread's
// channel fixed, its coefficients read once), a flat grid-stride loop
// otherwise.
// Backward: partial sums of grad_output and grad_output * xhat, merged into
// grad_bias / grad_weight and a scratch buffer; then grad_input per element
// as the forward's normalization is laid out.
#include <algorithm>

#include "ember/core/cuda/device.h"
#include "ember/core/ops.h"
#include "ember/core/ops/batch_norm_kernels.h"
#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/workspace.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kWidePlane = 64;  // inner values at or above which a block walks planes
constexpr int kTileChannels = 32;   // the channels of a tile: a warp's lanes
constexpr int kTileRows = kThreads / kTileChannels;
constexpr int64_t kFewestTiledChannels = 16;  // fewer lie close enough for the per-channel walk

// Whether the reductions walk tiles of channels (see the file comment).
__host__ __device__ inline bool tiles_channels(const BatchNormArgs& a) {
  return a.inner == 1 && a.c >= kFewestTiledChannels;
}

// Calls f(offset) for this thread's values of the block's tile in rows
// [b0, b1): channel blockIdx.x * 32 + lane of rows b0 + warp, b0 + warp + 8, ...
// Returns the channel, which may be past the last one (then f is not called).
template <typename F>
__device__ __forceinline__ int64_t for_tile_values(const BatchNormArgs& a, int64_t b0, int64_t b1, F&& f) {
  const int64_t c = int64_t(blockIdx.x) * kTileChannels + threadIdx.x % kTileChannels;
  if (c >= a.c) return c;
#pragma unroll 4
  for (int64_t b = b0 + threadIdx.x / kTileChannels; b < b1; b += kTileRows) f(b * a.c + c);
  return c;
}

// Merges each channel's kTileRows partial results (shared[row][lane], one
// per warp) in row order into the first warp's lanes; true in the lanes
// that then hold a channel's result.
template <typename R, typename Merge>
__device__ __forceinline__ bool merge_tile_rows(R& r, R (*shared)[kTileChannels], int64_t c, int64_t channels,
                                                Merge&& merge) {
  const int lane = threadIdx.x % kTileChannels, row = threadIdx.x / kTileChannels;
  shared[row][lane] = r;
  __syncthreads();
  if (row != 0 || c >= channels) return false;
  for (int k = 1; k < kTileRows; ++k) merge(r, shared[k][lane]);
  return true;
}

template <typename T, typename S>
__device__ __forceinline__ S load(const void* p, int64_t i) {
  return S(to_acc(static_cast<const T*>(p)[i]));
}

template <typename T, typename S>
__device__ __forceinline__ void store(void* p, int64_t i, S v) {
  static_cast<T*>(p)[i] = from_acc<T>(acc_t<T>(v));
}

// Calls f(offset) for every value of channel c in rows [b0, b1), each
// thread of the block taking its share.
template <typename F>
__device__ __forceinline__ void for_channel_values(const BatchNormArgs& a, int64_t c, int64_t b0, int64_t b1, F&& f) {
  // Unrolled so that each thread has several loads in flight.
  if (a.inner >= kWidePlane) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t base = (b * a.c + c) * a.inner;
#pragma unroll 4
      for (int64_t k = threadIdx.x; k < a.inner; k += blockDim.x) f(base + k);
    }
    return;
  }
  const uint32_t inner = uint32_t(a.inner);
  const uint32_t count = uint32_t((b1 - b0) * a.inner);  // the launcher keeps a split's values under 2^32
#pragma unroll 4
  for (uint32_t i = threadIdx.x; i < count; i += blockDim.x) {
    const uint32_t row = i / inner;
    f(((b0 + row) * a.c + c) * a.inner + (i - row * inner));
  }
}

// The statistics of channel c from its merged Welford result (P: the type
// of the per-channel parameters and running statistics).
template <typename P, typename S>
__device__ __forceinline__ void write_stats(const BatchNormArgs& a, int64_t c, const Welford<S>& w) {
  const S m = S(a.n * a.inner), mean = w.mean, mom = S(a.momentum);
  static_cast<S*>(a.save_mean)[c] = mean;
  static_cast<S*>(a.save_invstd)[c] = S(1) / ::sqrt(w.m2 / m + S(a.eps));
  if (a.running_mean) store<P, S>(a.running_mean, c, (S(1) - mom) * load<P, S>(a.running_mean, c) + mom * mean);
  if (a.running_var) {
    store<P, S>(a.running_var, c, (S(1) - mom) * load<P, S>(a.running_var, c) + mom * (w.m2 / (m - S(1))));
  }
}

// Block (c, s): Welford over rows [s * rows, (s + 1) * rows) of channel c,
// into partials[c * splits + s], or, with one split (Final), the channel's
// statistics.
template <typename T, typename P, typename S, bool Final>
__global__ void partial_stats_kernel(BatchNormArgs a, int64_t rows, Welford<S>* partials) {
  __shared__ Welford<S> shared[32];
  const int64_t c = blockIdx.x, b0 = int64_t(blockIdx.y) * rows, b1 = ::min(a.n, b0 + rows);
  Welford<S> w;
  for_channel_values(a, c, b0, b1, [&](int64_t at) { w.push(load<T, S>(a.input, at)); });
  w = block_welford(w, shared);
  if (threadIdx.x != 0) return;
  if constexpr (Final) {
    write_stats<P, S>(a, c, w);
  } else {
    partials[c * gridDim.y + blockIdx.y] = w;
  }
}

// Block (t, s): Welford over rows [s * rows, (s + 1) * rows) of the
// channels of tile t, into partials[c * splits + s] or, with one split
// (Final), the channels' statistics.
template <typename T, typename P, typename S, bool Final>
__global__ void tile_stats_kernel(BatchNormArgs a, int64_t rows, Welford<S>* partials) {
  __shared__ Welford<S> shared[kTileRows][kTileChannels];
  const int64_t b0 = int64_t(blockIdx.y) * rows, b1 = ::min(a.n, b0 + rows);
  Welford<S> w;
  const int64_t c = for_tile_values(a, b0, b1, [&](int64_t at) { w.push(load<T, S>(a.input, at)); });
  if (!merge_tile_rows(w, shared, c, a.c, [](Welford<S>& r, const Welford<S>& o) { r.merge(o); })) return;
  if constexpr (Final) {
    write_stats<P, S>(a, c, w);
  } else {
    partials[c * gridDim.y + blockIdx.y] = w;
  }
}

// A block per channel (merge_threads): thread t merges partials t,
// t + blockDim.x, ..., then the block's tree (a fixed order). A tiled
// reduction leaves about a thousand partials per channel, which one warp
// would merge 30 deep.
template <typename P, typename S>
__global__ void merge_stats_kernel(BatchNormArgs a, const Welford<S>* partials, int splits) {
  __shared__ Welford<S> shared[32];
  const int64_t c = blockIdx.x;
  Welford<S> w;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) w.merge(partials[c * splits + s]);
  w = block_welford(w, shared);
  if (threadIdx.x == 0) write_stats<P, S>(a, c, w);
}

template <typename P, typename S>
__global__ void running_stats_kernel(BatchNormArgs a) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.c) return;
  static_cast<S*>(a.save_mean)[c] = load<P, S>(a.running_mean, c);
  static_cast<S*>(a.save_invstd)[c] = S(1) / ::sqrt(load<P, S>(a.running_var, c) + S(a.eps));
}

// f(i, c) for every element i of channel c: planes of wide rows one block
// each, the rest through a flat loop (32-bit index math when it fits).
template <typename F>
__device__ __forceinline__ void for_each_element(const BatchNormArgs& a, F&& f) {
  const int64_t planes = a.n * a.c;
  if (a.inner >= kWidePlane) {
    for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
      const int64_t c = p % a.c, base = p * a.inner;
      for (int64_t k = threadIdx.x; k < a.inner; k += blockDim.x) f(base + k, c);
    }
    return;
  }
  const int64_t total = planes * a.inner;
  const int64_t first = int64_t(blockIdx.x) * blockDim.x + threadIdx.x, step = int64_t(gridDim.x) * blockDim.x;
  if (total <= INT32_MAX) {
    const uint32_t inner = uint32_t(a.inner), channels = uint32_t(a.c);
    for (uint32_t i = uint32_t(first); i < uint32_t(total); i += uint32_t(step)) f(i, i / inner % channels);
  } else {
    for (int64_t i = first; i < total; i += step) f(i, i / a.inner % a.c);
  }
}

// Channel c's y = x * scale + shift.
template <typename P, typename S>
struct Affine {
  S scale, shift;
  __device__ __forceinline__ Affine(const BatchNormArgs& a, int64_t c) {
    scale = static_cast<const S*>(a.save_invstd)[c] * (a.weight ? load<P, S>(a.weight, c) : S(1));
    shift = (a.bias ? load<P, S>(a.bias, c) : S(0)) - static_cast<const S*>(a.save_mean)[c] * scale;
  }
};

// nn::BatchNorm's counter, by the first thread of a normalizing launch.
__device__ __forceinline__ void count_batch(const BatchNormArgs& a) {
  if (a.num_batches_tracked != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) {
    ++*a.num_batches_tracked;
  }
}

template <typename T, typename P, typename S>
__global__ void normalize_kernel(BatchNormArgs a) {
  count_batch(a);
  for_each_element(a, [&](int64_t i, int64_t c) {
    const Affine<P, S> f(a, c);
    store<T, S>(a.output, i, load<T, S>(a.input, i) * f.scale + f.shift);
  });
}

// This thread's channel in a tile, clamped to the last one: lanes past it
// read its coefficients and write nothing (for_tile_values).
__device__ __forceinline__ int64_t tile_channel(const BatchNormArgs& a) {
  return ::min(int64_t(blockIdx.x) * kTileChannels + threadIdx.x % kTileChannels, a.c - 1);
}

// normalize_kernel over tiles of channels (tiles_channels), block (t, s)
// taking rows [s * rows, (s + 1) * rows): a thread's channel is fixed, so its
// coefficients are read once.
template <typename T, typename P, typename S>
__global__ void normalize_tile_kernel(BatchNormArgs a, int64_t rows) {
  count_batch(a);
  const int64_t b0 = int64_t(blockIdx.y) * rows, b1 = ::min(a.n, b0 + rows);
  const Affine<P, S> f(a, tile_channel(a));
  for_tile_values(a, b0, b1,
                  [&](int64_t at) { store<T, S>(a.output, at, load<T, S>(a.input, at) * f.scale + f.shift); });
}

// The channel's sum(dy) and sum(dy * xhat).
template <typename S>
struct GradSums {
  S dy = 0, dy_xhat = 0;
};

// sums[c] = sum(dy), sums[c + a.c] = sum(dy * xhat), and the parameter grads.
template <typename P, typename S>
__device__ __forceinline__ void write_sums(const BatchNormArgs& a, int64_t c, const GradSums<S>& g, S* sums) {
  sums[c] = g.dy;
  sums[c + a.c] = g.dy_xhat;
  if (a.grad_weight) store<P, S>(a.grad_weight, c, g.dy_xhat);
  if (a.grad_bias) store<P, S>(a.grad_bias, c, g.dy);
}

template <typename T, typename P, typename S, bool Final>
__global__ void partial_sums_kernel(BatchNormArgs a, int64_t rows, GradSums<S>* partials, S* sums) {
  __shared__ S shared[32];
  const int64_t c = blockIdx.x, b0 = int64_t(blockIdx.y) * rows, b1 = ::min(a.n, b0 + rows);
  const S mean = static_cast<const S*>(a.save_mean)[c], invstd = static_cast<const S*>(a.save_invstd)[c];
  GradSums<S> g;
  for_channel_values(a, c, b0, b1, [&](int64_t at) {
    const S dy = load<T, S>(a.grad_output, at);
    g.dy += dy;
    g.dy_xhat += dy * (load<T, S>(a.input, at) - mean) * invstd;
  });
  g.dy = block_sum(g.dy, shared);
  g.dy_xhat = block_sum(g.dy_xhat, shared);
  if (threadIdx.x != 0) return;
  if constexpr (Final) {
    write_sums<P, S>(a, c, g, sums);
  } else {
    partials[c * gridDim.y + blockIdx.y] = g;
  }
}

// partial_sums_kernel over the channels of a tile (see tile_stats_kernel).
template <typename T, typename P, typename S, bool Final>
__global__ void tile_sums_kernel(BatchNormArgs a, int64_t rows, GradSums<S>* partials, S* sums) {
  __shared__ GradSums<S> shared[kTileRows][kTileChannels];
  const int64_t b0 = int64_t(blockIdx.y) * rows, b1 = ::min(a.n, b0 + rows);
  const int64_t mine = tile_channel(a);
  const S mean = static_cast<const S*>(a.save_mean)[mine], invstd = static_cast<const S*>(a.save_invstd)[mine];
  GradSums<S> g;
  const int64_t c = for_tile_values(a, b0, b1, [&](int64_t at) {
    const S dy = load<T, S>(a.grad_output, at);
    g.dy += dy;
    g.dy_xhat += dy * (load<T, S>(a.input, at) - mean) * invstd;
  });
  auto add = [](GradSums<S>& r, const GradSums<S>& o) {
    r.dy += o.dy;
    r.dy_xhat += o.dy_xhat;
  };
  if (!merge_tile_rows(g, shared, c, a.c, add)) return;
  if constexpr (Final) {
    write_sums<P, S>(a, c, g, sums);
  } else {
    partials[c * gridDim.y + blockIdx.y] = g;
  }
}

// merge_stats_kernel's order, for the gradient sums.
template <typename P, typename S>
__global__ void merge_sums_kernel(BatchNormArgs a, const GradSums<S>* partials, int splits, S* sums) {
  __shared__ S shared[32];
  const int64_t c = blockIdx.x;
  GradSums<S> g;
  for (int s = threadIdx.x; s < splits; s += blockDim.x) {
    g.dy += partials[c * splits + s].dy;
    g.dy_xhat += partials[c * splits + s].dy_xhat;
  }
  g.dy = block_sum(g.dy, shared);
  g.dy_xhat = block_sum(g.dy_xhat, shared);
  if (threadIdx.x == 0) write_sums<P, S>(a, c, g, sums);
}

// Channel c's terms of dx = (dy - sum(dy) / m - xhat * sum(dy * xhat) / m) *
// invstd * weight (dy * invstd * weight in eval mode), in the CPU kernel's
// order of operations.
template <typename P, typename S>
struct GradInputTerms {
  S mean, invstd, scale, sum_dy, sum_dy_xhat;
  __device__ __forceinline__ GradInputTerms(const BatchNormArgs& a, const S* sums, int64_t c) {
    mean = static_cast<const S*>(a.save_mean)[c];
    invstd = static_cast<const S*>(a.save_invstd)[c];
    scale = invstd * (a.weight ? load<P, S>(a.weight, c) : S(1));
    sum_dy = a.training ? sums[c] : S(0);
    sum_dy_xhat = a.training ? sums[c + a.c] : S(0);
  }
  template <typename T>
  __device__ __forceinline__ S dx(const BatchNormArgs& a, int64_t i) const {
    S d = load<T, S>(a.grad_output, i);
    if (a.training) {
      const S m = S(a.n * a.inner), xhat = (load<T, S>(a.input, i) - mean) * invstd;
      d = d - sum_dy / m - xhat * sum_dy_xhat / m;
    }
    return d * scale;
  }
};

template <typename T, typename P, typename S>
__global__ void grad_input_kernel(BatchNormArgs a, const S* sums) {
  for_each_element(a, [&](int64_t i, int64_t c) {
    store<T, S>(a.grad_input, i, GradInputTerms<P, S>(a, sums, c).template dx<T>(a, i));
  });
}

// grad_input_kernel over tiles of channels (see normalize_tile_kernel).
template <typename T, typename P, typename S>
__global__ void grad_input_tile_kernel(BatchNormArgs a, int64_t rows, const S* sums) {
  const int64_t b0 = int64_t(blockIdx.y) * rows, b1 = ::min(a.n, b0 + rows);
  const GradInputTerms<P, S> terms(a, sums, tile_channel(a));
  for_tile_values(a, b0, b1, [&](int64_t at) { store<T, S>(a.grad_input, at, terms.template dx<T>(a, at)); });
}

// How the channels' rows are split among blocks.
struct Splits {
  int64_t rows;  // batch rows per block
  int count;     // blocks per channel
};

// The blocks of one split: a channel each, or a tile of channels each.
int64_t split_blocks(const BatchNormArgs& a) {
  return tiles_channels(a) ? (a.c + kTileChannels - 1) / kTileChannels : a.c;
}

Splits split_rows(const BatchNormArgs& a) {
  const int64_t target = 8 * int64_t(properties(a.device).multiprocessor_count), blocks = split_blocks(a);
  int64_t count = std::clamp<int64_t>((target + blocks - 1) / blocks, 1, a.n);
  int64_t rows = (a.n + count - 1) / count;
  // The flat walk of small planes indexes a block's values in 32 bits.
  if (a.inner < kWidePlane && !tiles_channels(a)) rows = std::min<int64_t>(rows, (int64_t(1) << 31) / a.inner);
  rows = std::max<int64_t>(rows, 1);
  return {rows, int((a.n + rows - 1) / rows)};
}

unsigned channel_blocks(int64_t c) { return unsigned((c + kThreads - 1) / kThreads); }
// The threads of a merge block: a warp for each 32 splits, up to kThreads.
unsigned merge_threads(int splits) { return unsigned(std::min(kThreads, (splits + 31) / 32 * 32)); }

unsigned element_blocks(const BatchNormArgs& a) {
  const int64_t work = a.inner >= kWidePlane ? a.n * a.c : (a.n * a.c * a.inner + kThreads - 1) / kThreads;
  return unsigned(std::min<int64_t>(work, int64_t(1) << 20));
}

void forward(const BatchNormArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "batch_norm", [&]<typename T>() {
    dispatch_same_or_float32<T>(a.dtype, a.param_dtype, "batch_norm", [&]<typename P>() {
      using S = acc_t<T>;
      const Splits s = split_rows(a);
      const dim3 grid(unsigned(split_blocks(a)), unsigned(s.count));
      const bool tiled = tiles_channels(a);
      if (a.training) {
        if (s.count == 1) {
          auto* stats = tiled ? tile_stats_kernel<T, P, S, true> : partial_stats_kernel<T, P, S, true>;
          stats<<<grid, kThreads, 0, stream>>>(a, s.rows, nullptr);
          EMBER_CUDA_CHECK_LAUNCH();
        } else {
          const Workspace partials = workspace_for<Welford<S>>(a.c * s.count, a.device);
          auto* p = partials.as<Welford<S>>();
          auto* stats = tiled ? tile_stats_kernel<T, P, S, false> : partial_stats_kernel<T, P, S, false>;
          stats<<<grid, kThreads, 0, stream>>>(a, s.rows, p);
          EMBER_CUDA_CHECK_LAUNCH();
          merge_stats_kernel<P, S><<<unsigned(a.c), merge_threads(s.count), 0, stream>>>(a, p, s.count);
          EMBER_CUDA_CHECK_LAUNCH();
        }
      } else {
        running_stats_kernel<P, S><<<channel_blocks(a.c), kThreads, 0, stream>>>(a);
        EMBER_CUDA_CHECK_LAUNCH();
      }
      if (tiled) normalize_tile_kernel<T, P, S><<<grid, kThreads, 0, stream>>>(a, s.rows);
      else normalize_kernel<T, P, S><<<element_blocks(a), kThreads, 0, stream>>>(a);
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
}

void backward(const BatchNormArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "batch_norm_backward", [&]<typename T>() {
    dispatch_same_or_float32<T>(a.dtype, a.param_dtype, "batch_norm_backward", [&]<typename P>() {
      using S = acc_t<T>;
      Tensor sums;
      const Splits s = split_rows(a);
      const dim3 grid(unsigned(split_blocks(a)), unsigned(s.count));
      const bool tiled = tiles_channels(a);
      if (a.grad_weight || a.grad_bias || (a.grad_input && a.training)) {
        sums = empty({2, a.c}, batch_norm_stats_dtype(a.dtype), cuda_device(a.device));
        S* out = static_cast<S*>(sums.data_ptr());
        if (s.count == 1) {
          auto* grad_sums = tiled ? tile_sums_kernel<T, P, S, true> : partial_sums_kernel<T, P, S, true>;
          grad_sums<<<grid, kThreads, 0, stream>>>(a, s.rows, nullptr, out);
          EMBER_CUDA_CHECK_LAUNCH();
        } else {
          const Workspace partials = workspace_for<GradSums<S>>(a.c * s.count, a.device);
          auto* p = partials.as<GradSums<S>>();
          auto* grad_sums = tiled ? tile_sums_kernel<T, P, S, false> : partial_sums_kernel<T, P, S, false>;
          grad_sums<<<grid, kThreads, 0, stream>>>(a, s.rows, p, out);
          EMBER_CUDA_CHECK_LAUNCH();
          merge_sums_kernel<P, S><<<unsigned(a.c), merge_threads(s.count), 0, stream>>>(a, p, s.count, out);
          EMBER_CUDA_CHECK_LAUNCH();
        }
      }
      if (a.grad_input) {
        const S* totals = sums.defined() ? static_cast<const S*>(sums.data_ptr()) : nullptr;
        if (tiled) grad_input_tile_kernel<T, P, S><<<grid, kThreads, 0, stream>>>(a, s.rows, totals);
        else grad_input_kernel<T, P, S><<<element_blocks(a), kThreads, 0, stream>>>(a, totals);
        EMBER_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(batch_norm_forward_stub, DeviceType::CUDA, forward);
EMBER_REGISTER_KERNEL(batch_norm_backward_stub, DeviceType::CUDA, backward);

}  // namespace ember::cuda
