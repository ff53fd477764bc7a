// CUDA layer-norm kernels (contract in ember/core/ops/layer_norm_kernels.h).
//
// Forward: rows of up to kCachedVecs 16-byte vectors per thread stay in
// registers: a warp per row when 32 threads hold it (1024 float32, 2048
// half: reductions by shuffles, no block barrier), else a block of
// kRowThreads per row (8192 float32, 16384 half). Every thread issues all
// its loads at once, the mean and then the variance are exact sums over
// the registers, and y is written from them, so the row is read from
// memory once. Longer rows (or rows that are not a whole number of
// vectors): pass 1 reads the row with 16-byte loads and keeps Welford
// statistics (each vector's own mean and M2 merged into the thread's, one
// division per vector), merged across the block; pass 2 re-reads the row
// (from L2: a block's row was just read) and writes y.
// Backward with dweight or dbias, rows of up to 768 columns (384 in float64; a
// warp per row), else of up to kOnePassVecs vectors per thread of a block (4096
// float32, 8192 half; a block per row): one pass over the data. A grid of as
// many blocks as the device holds at once walks the rows; for each row the team
// keeps x and dy in registers, computes dx (two sums), and each thread adds its
// columns' dy * xhat and dy to running sums (a thread always holds the same
// columns): in registers for a block, in the warp's own shared memory for a
// warp, whose block then adds its warps' sums in warp order. Each block writes
// its sums to a float partial buffer, and a last kernel adds the blocks'
// partials in a fixed order: deterministic for a given device, no atomics.
// Otherwise (no parameter gradients, or longer or unaligned rows): one block
// per row for dx (two block sums, then dx), and a column kernel for
// dweight/dbias: each block sums 32 columns over a slice of the rows into the
// partial buffer.
#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "ember/core/ops.h"
#include "ember/core/ops/layer_norm_kernels.h"
#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"

namespace ember::cuda {
namespace {

constexpr int kRowThreads = 256;
constexpr int kCachedVecs = 8;         // vectors of a row each thread keeps in registers
constexpr int kOnePassVecs = 4;        // its longest rows, in vectors per thread (more would spill)
constexpr int kWarpOnePassBytes = 96;  // a warp per row: the bytes of x (and of dy) a lane holds, in S

// Who shares a row in the cached kernels: a block of kRowThreads threads
// (kWarp false), or one warp (kWarp true: kRowThreads / 32 rows per block,
// reductions by shuffles alone, no block barrier per row). A team's rows
// are row0(), row0() + step(), ...; its threads are ranked 0 .. size - 1.
template <bool kWarp>
struct RowTeam {
  static constexpr int kSize = kWarp ? 32 : kRowThreads;
  static constexpr int kPerBlock = kRowThreads / kSize;
  __device__ static int rank() { return int(threadIdx.x) % kSize; }
  __device__ static int64_t row0() { return int64_t(blockIdx.x) * kPerBlock + threadIdx.x / kSize; }
  __device__ static int64_t step() { return int64_t(gridDim.x) * kPerBlock; }
  template <typename S>
  __device__ static S sum(S v, S* shared) {
    if constexpr (kWarp) return warp_sum(v);
    else return block_sum(v, shared);
  }
};

template <typename T, int V>
__device__ __forceinline__ void load_acc(const T* p, acc_t<T> (&out)[V]) {
  Vec<T, V> v = load_vec<T, V>(p);
#pragma unroll
  for (int j = 0; j < V; ++j) out[j] = to_acc(v.v[j]);
}

template <typename T, typename S, int V>
__global__ void layer_norm_forward_kernel(LayerNormArgs a) {
  using A = acc_t<T>;
  __shared__ Welford<S> shared[32];
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(a.x) + row * a.cols;
  T* y = static_cast<T*>(a.y) + row * a.cols;
  const T* w = static_cast<const T*>(a.weight);
  const T* b = static_cast<const T*>(a.bias);

  Welford<S> stats;
  for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
    A v[V];
    load_acc<T, V>(x + c, v);
    Welford<S> chunk;
    S sum = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) sum += S(v[j]);
    chunk.count = S(V);
    chunk.mean = sum / S(V);
#pragma unroll
    for (int j = 0; j < V; ++j) chunk.m2 += (S(v[j]) - chunk.mean) * (S(v[j]) - chunk.mean);
    stats.merge(chunk);
  }
  stats = block_welford(stats, shared);
  const S mean = stats.mean;
  const S rstd = S(1) / ::sqrt(stats.m2 / S(a.cols) + S(a.eps));
  if (threadIdx.x == 0) {
    static_cast<S*>(a.mean)[row] = mean;
    static_cast<S*>(a.rstd)[row] = rstd;
  }
  for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
    A v[V];
    load_acc<T, V>(x + c, v);
    Vec<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      S r = (S(v[j]) - mean) * rstd;
      if (w) r *= S(to_acc(w[c + j]));
      if (b) r += S(to_acc(b[c + j]));
      out.v[j] = from_acc<T>(A(r));
    }
    store_vec(y + c, out);
  }
}

// D: the residual's dtype in the residual form (kResidual: the row is
// x + residual, rounded to T, and is written to a.sum), else unused. Y: y's
// type (T, or D in the residual form). kWarp: a warp per row (RowTeam).
template <typename T, typename S, int V, typename D = T, bool kResidual = false, typename Y = T, bool kWarp = false>
__global__ void __launch_bounds__(kRowThreads) layer_norm_forward_cached_kernel(LayerNormArgs a) {
  using A = acc_t<T>;
  using Team = RowTeam<kWarp>;
  __shared__ S shared[32];
  const int64_t row = Team::row0();
  if (kWarp && row >= a.rows) return;  // a whole warp: no barrier follows
  const T* x = static_cast<const T*>(a.x) + row * a.cols;
  Y* y = static_cast<Y*>(a.y) + row * a.cols;
  const T* w = static_cast<const T*>(a.weight);
  const T* b = static_cast<const T*>(a.bias);
  const int64_t first = int64_t(Team::rank()) * V, stride = int64_t(Team::kSize) * V;

  A v[kCachedVecs][V];
#pragma unroll
  for (int k = 0; k < kCachedVecs; ++k) {
    if (first + k * stride < a.cols) load_acc<T, V>(x + first + k * stride, v[k]);
    if constexpr (kResidual) {
      const int64_t c = first + k * stride;
      if (c >= a.cols) continue;
      acc_t<D> r[V];
      load_acc<D, V>(static_cast<const D*>(a.residual) + row * a.cols + c, r);
      Vec<T, V> sum;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        sum.v[j] = from_acc<T>(A(v[k][j] + A(r[j])));
        v[k][j] = to_acc(sum.v[j]);
      }
      store_vec(static_cast<T*>(a.sum) + row * a.cols + c, sum);
    }
  }
  S sum = 0;
#pragma unroll
  for (int k = 0; k < kCachedVecs; ++k) {
    if (first + k * stride >= a.cols) continue;
#pragma unroll
    for (int j = 0; j < V; ++j) sum += S(v[k][j]);
  }
  const S mean = Team::sum(sum, shared) / S(a.cols);
  S m2 = 0;
#pragma unroll
  for (int k = 0; k < kCachedVecs; ++k) {
    if (first + k * stride >= a.cols) continue;
#pragma unroll
    for (int j = 0; j < V; ++j) m2 += (S(v[k][j]) - mean) * (S(v[k][j]) - mean);
  }
  const S rstd = S(1) / ::sqrt(Team::sum(m2, shared) / S(a.cols) + S(a.eps));
  if (Team::rank() == 0) {
    static_cast<S*>(a.mean)[row] = mean;
    static_cast<S*>(a.rstd)[row] = rstd;
  }
#pragma unroll
  for (int k = 0; k < kCachedVecs; ++k) {
    const int64_t c = first + k * stride;
    if (c >= a.cols) continue;
    Vec<Y, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      S r = (S(v[k][j]) - mean) * rstd;
      if (w) r *= S(to_acc(w[c + j]));
      if (b) r += S(to_acc(b[c + j]));
      out.v[j] = from_acc<Y>(acc_t<Y>(r));
    }
    store_vec(y + c, out);
  }
}

template <typename T, typename S, int V>
__global__ void layer_norm_backward_dx_kernel(LayerNormArgs a) {
  using A = acc_t<T>;
  __shared__ S shared[32];
  const int64_t row = blockIdx.x;
  const T* x = static_cast<const T*>(a.x) + row * a.cols;
  const T* gy = static_cast<const T*>(a.grad_y) + row * a.cols;
  const T* w = static_cast<const T*>(a.weight);
  T* gx = static_cast<T*>(a.grad_x) + row * a.cols;
  const S mean = static_cast<const S*>(a.mean)[row], rstd = static_cast<const S*>(a.rstd)[row];

  S sum_dxhat = 0, sum_dxhat_xhat = 0;
  for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
    A xv[V], gv[V];
    load_acc<T, V>(x + c, xv);
    load_acc<T, V>(gy + c, gv);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      S dxhat = w ? S(gv[j]) * S(to_acc(w[c + j])) : S(gv[j]);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * (S(xv[j]) - mean) * rstd;
    }
  }
  sum_dxhat = block_sum(sum_dxhat, shared);
  sum_dxhat_xhat = block_sum(sum_dxhat_xhat, shared);
  const S inv_n = S(1) / S(a.cols);
  for (int64_t c = int64_t(threadIdx.x) * V; c < a.cols; c += int64_t(blockDim.x) * V) {
    A xv[V], gv[V];
    load_acc<T, V>(x + c, xv);
    load_acc<T, V>(gy + c, gv);
    Vec<T, V> out;
#pragma unroll
    for (int j = 0; j < V; ++j) {
      S xhat = (S(xv[j]) - mean) * rstd;
      S dxhat = w ? S(gv[j]) * S(to_acc(w[c + j])) : S(gv[j]);
      out.v[j] = from_acc<T>(A(rstd * (dxhat - inv_n * sum_dxhat - xhat * inv_n * sum_dxhat_xhat)));
    }
    store_vec(gx + c, out);
  }
}

// The one-pass backward (see the top): NV vectors of V elements per thread
// and row, the rows of a team as RowTeam says. Its partial sums go to
// partial_w / partial_b [gridDim.x][cols].
// In the residual form (kResidual), grad_sum (when given) is added to dx,
// and dx is written to grad_residual in D too (when given); partial_w and
// partial_b may then be null (no parameter gradients). Y: grad_y's type (T,
// or D in the residual form; acc_t<Y> is acc_t<T> either way). kWarp: a
// warp per row, the running sums in dynamic shared memory of
// warp_sums_bytes(cols) bytes (when partial_w is given).
template <typename T, typename S, int V, int NV, typename D = T, bool kResidual = false, typename Y = T,
          bool kWarp = false>
__global__ void __launch_bounds__(kRowThreads)
    layer_norm_backward_cached_kernel(LayerNormArgs a, S* partial_w, S* partial_b) {
  using A = acc_t<T>;
  using Team = RowTeam<kWarp>;
  // A thread's V columns of one running sum (16-byte shared-memory accesses).
  struct alignas(sizeof(S) * V < 16 ? sizeof(S) * V : 16) Sums {
    S v[V];
  };
  __shared__ S shared[32];
  const T* w = static_cast<const T*>(a.weight);
  const int64_t first = int64_t(Team::rank()) * V, stride = int64_t(Team::kSize) * V;
  const S inv_n = S(1) / S(a.cols);
  const bool sums = partial_w != nullptr;
  // A block keeps its threads' weights and running sums in registers. A
  // warp's lanes hold more columns: they read the weights at each use (from
  // L1) and keep the sums in the warp's own rows of shared memory ([warp]
  // [dweight, dbias][cols], only ever touched by the lane owning a column
  // until the end), which leaves registers for more warps per SM.
  S wv[kWarp ? 1 : NV][kWarp ? 1 : V];
  S dw[kWarp ? 1 : NV][kWarp ? 1 : V] = {}, db[kWarp ? 1 : NV][kWarp ? 1 : V] = {};
  extern __shared__ unsigned char warp_sums_bytes[];
  S* const warp_sums = kWarp ? reinterpret_cast<S*>(warp_sums_bytes) + int64_t(threadIdx.x / 32) * 2 * a.cols : nullptr;
  const auto weight_at = [&](int k, int j) -> S {
    const int64_t c = first + k * stride + j;
    return w && c < a.cols ? S(to_acc(w[c])) : S(1);
  };
#pragma unroll
  for (int k = 0; k < NV; ++k) {
    if constexpr (kWarp) {
      if (sums && first + k * stride < a.cols) {
        *reinterpret_cast<Sums*>(warp_sums + first + k * stride) = Sums{};
        *reinterpret_cast<Sums*>(warp_sums + a.cols + first + k * stride) = Sums{};
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) wv[k][j] = weight_at(k, j);
    }
  }
  const auto weight = [&](int k, int j) -> S {
    if constexpr (kWarp) return weight_at(k, j);
    else return wv[k][j];
  };
  for (int64_t row = Team::row0(); row < a.rows; row += Team::step()) {
    const T* x = static_cast<const T*>(a.x) + row * a.cols;
    const Y* gy = static_cast<const Y*>(a.grad_y) + row * a.cols;
    T* gx = static_cast<T*>(a.grad_x) + row * a.cols;
    const S mean = static_cast<const S*>(a.mean)[row], rstd = static_cast<const S*>(a.rstd)[row];
    A xv[NV][V], gv[NV][V];
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      if (first + k * stride < a.cols) {
        load_acc<T, V>(x + first + k * stride, xv[k]);
        load_acc<Y, V>(gy + first + k * stride, gv[k]);
      }
    }
    S sum_dxhat = 0, sum_dxhat_xhat = 0;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      if (first + k * stride >= a.cols) continue;
      Sums add_w, add_b;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const S xhat = (S(xv[k][j]) - mean) * rstd;
        const S dxhat = S(gv[k][j]) * weight(k, j);
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
        add_w.v[j] = S(gv[k][j]) * xhat;
        add_b.v[j] = S(gv[k][j]);
      }
      if constexpr (kWarp) {
        if (sums) {
          Sums& sw = *reinterpret_cast<Sums*>(warp_sums + first + k * stride);
          Sums& sb = *reinterpret_cast<Sums*>(warp_sums + a.cols + first + k * stride);
          Sums nw = sw, nb = sb;
#pragma unroll
          for (int j = 0; j < V; ++j) {
            nw.v[j] += add_w.v[j];
            nb.v[j] += add_b.v[j];
          }
          sw = nw;
          sb = nb;
        }
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          dw[k][j] += add_w.v[j];
          db[k][j] += add_b.v[j];
        }
      }
    }
    sum_dxhat = Team::sum(sum_dxhat, shared);
    sum_dxhat_xhat = Team::sum(sum_dxhat_xhat, shared);
#pragma unroll
    for (int k = 0; k < NV; ++k) {
      const int64_t c = first + k * stride;
      if (c >= a.cols) continue;
      S dx[V];
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const S xhat = (S(xv[k][j]) - mean) * rstd;
        const S dxhat = S(gv[k][j]) * weight(k, j);
        dx[j] = rstd * (dxhat - inv_n * sum_dxhat - xhat * inv_n * sum_dxhat_xhat);
      }
      if constexpr (kResidual) {
        if (a.grad_sum != nullptr) {
          A gs[V];
          load_acc<T, V>(static_cast<const T*>(a.grad_sum) + row * a.cols + c, gs);
#pragma unroll
          for (int j = 0; j < V; ++j) dx[j] += S(gs[j]);
        }
      }
      Vec<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = from_acc<T>(A(dx[j]));
      store_vec(gx + c, out);
      if constexpr (kResidual) {
        if (a.grad_residual != nullptr) {
          Vec<D, V> rd;
#pragma unroll
          for (int j = 0; j < V; ++j) rd.v[j] = from_acc<D>(acc_t<D>(to_acc(out.v[j])));
          store_vec(static_cast<D*>(a.grad_residual) + row * a.cols + c, rd);
        }
      }
    }
  }
  if (!sums) return;
  S* out_w = partial_w + int64_t(blockIdx.x) * a.cols;
  S* out_b = partial_b + int64_t(blockIdx.x) * a.cols;
  if constexpr (kWarp) {
    // The block's sums: its warps' rows added in warp order (a fixed order).
    __syncthreads();
    const S* all = reinterpret_cast<const S*>(warp_sums_bytes);
    for (int64_t c = threadIdx.x; c < a.cols; c += kRowThreads) {
      S sw = 0, sb = 0;
      for (int team = 0; team < Team::kPerBlock; ++team) {
        sw += all[int64_t(team) * 2 * a.cols + c];
        sb += all[int64_t(team) * 2 * a.cols + a.cols + c];
      }
      out_w[c] = sw;
      out_b[c] = sb;
    }
  } else {
#pragma unroll
    for (int k = 0; k < NV; ++k) {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const int64_t c = first + k * stride + j;
        if (c >= a.cols) continue;
        out_w[c] = dw[k][j];
        out_b[c] = db[k][j];
      }
    }
  }
}

// Block (32, 8): 32 columns; the 8 thread rows and gridDim.y blocks split the rows.
template <typename T, typename S>
__global__ void layer_norm_backward_params_kernel(LayerNormArgs a, S* partial_w, S* partial_b) {
  __shared__ S sw[8][33], sb[8][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  S dw = 0, db = 0;
  if (c < a.cols) {
    const T* x = static_cast<const T*>(a.x);
    const T* gy = static_cast<const T*>(a.grad_y);
    const S* mean = static_cast<const S*>(a.mean);
    const S* rstd = static_cast<const S*>(a.rstd);
    for (int64_t r = int64_t(blockIdx.y) * 8 + threadIdx.y; r < a.rows; r += int64_t(gridDim.y) * 8) {
      S g = S(to_acc(gy[r * a.cols + c]));
      dw += g * (S(to_acc(x[r * a.cols + c])) - mean[r]) * rstd[r];
      db += g;
    }
  }
  sw[threadIdx.y][threadIdx.x] = dw;
  sb[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y == 0 && c < a.cols) {
    for (int i = 1; i < 8; ++i) {
      dw += sw[i][threadIdx.x];
      db += sb[i][threadIdx.x];
    }
    partial_w[int64_t(blockIdx.y) * a.cols + c] = dw;
    partial_b[int64_t(blockIdx.y) * a.cols + c] = db;
  }
}

// Block (32, 8): 32 columns; thread row y adds slices y, y + 8, ..., then
// the 8 sums are added in thread-row order (a fixed order).
template <typename T, typename S>
__global__ void layer_norm_sum_partials_kernel(LayerNormArgs a, const S* partial_w, const S* partial_b, int slices) {
  __shared__ S sw[8][33], sb[8][33];
  const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
  S dw = 0, db = 0;
  if (c < a.cols) {
    for (int i = int(threadIdx.y); i < slices; i += 8) {
      dw += partial_w[int64_t(i) * a.cols + c];
      db += partial_b[int64_t(i) * a.cols + c];
    }
  }
  sw[threadIdx.y][threadIdx.x] = dw;
  sb[threadIdx.y][threadIdx.x] = db;
  __syncthreads();
  if (threadIdx.y != 0 || c >= a.cols) return;
  for (int i = 1; i < 8; ++i) {
    dw += sw[i][threadIdx.x];
    db += sb[i][threadIdx.x];
  }
  if (a.grad_weight) static_cast<T*>(a.grad_weight)[c] = from_acc<T>(acc_t<T>(dw));
  if (a.grad_bias) static_cast<T*>(a.grad_bias)[c] = from_acc<T>(acc_t<T>(db));
}

template <typename T, typename S>
void sum_partials(const LayerNormArgs& a, const S* partial_w, const S* partial_b, int slices, cudaStream_t stream) {
  layer_norm_sum_partials_kernel<T, S>
      <<<unsigned((a.cols + 31) / 32), dim3(32, 8), 0, stream>>>(a, partial_w, partial_b, slices);
  EMBER_CUDA_CHECK_LAUNCH();
}

// 16-byte vectors when they divide the row and the row tensors (`rows`:
// x, y or the gradients) start 16-byte aligned (a contiguous view can start
// anywhere); else one element at a time.
template <typename T, typename Launch>
void with_vector_width(int64_t cols, std::initializer_list<const void*> rows, Launch launch) {
  constexpr int V = kVecWidth<T>;
  bool vectors = cols % V == 0;
  for (const void* p : rows) vectors = vectors && aligned16(p);
  if (vectors) launch.template operator()<V>();
  else launch.template operator()<1>();
}

// The forward with the row in registers (up to kCachedVecs vectors per
// thread): a warp per row when 32 threads hold it, else a block per row.
// Returns false, launching nothing, for longer rows.
template <typename T, typename S, int V, typename D = T, bool kResidual = false, typename Y = T>
bool cached_forward(const LayerNormArgs& a, cudaStream_t stream) {
  if (a.cols <= int64_t(RowTeam<true>::kSize) * kCachedVecs * V) {
    const int64_t blocks = (a.rows + RowTeam<true>::kPerBlock - 1) / RowTeam<true>::kPerBlock;
    layer_norm_forward_cached_kernel<T, S, V, D, kResidual, Y, true><<<unsigned(blocks), kRowThreads, 0, stream>>>(a);
  } else if (a.cols <= int64_t(kRowThreads) * kCachedVecs * V) {
    layer_norm_forward_cached_kernel<T, S, V, D, kResidual, Y, false><<<unsigned(a.rows), kRowThreads, 0, stream>>>(a);
  } else {
    return false;
  }
  EMBER_CUDA_CHECK_LAUNCH();
  return true;
}

void forward(const LayerNormArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "layer_norm", [&]<typename T>() {
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    with_vector_width<T>(a.cols, {a.x, a.y}, [&]<int V>() {
      if (V > 1 && cached_forward<T, S, V>(a, stream)) return;
      layer_norm_forward_kernel<T, S, V><<<unsigned(a.rows), kRowThreads, 0, stream>>>(a);
      EMBER_CUDA_CHECK_LAUNCH();
    });
  });
}

// The warp-per-row backward's shared memory: each warp's running dweight
// and dbias over the columns.
template <typename S>
size_t warp_sums_bytes(int64_t cols) {
  return size_t(RowTeam<true>::kPerBlock) * 2 * size_t(cols) * sizeof(S);
}

// One launch of the one-pass backward: a grid of as many blocks as the
// device holds at once (or fewer, for few rows), then the sum of their
// partials when parameter gradients are asked for.
template <typename T, typename S, int V, int NV, typename D, bool kResidual, typename Y, bool kWarp>
void run_one_pass(const LayerNormArgs& a, cudaStream_t stream) {
  const auto kernel = layer_norm_backward_cached_kernel<T, S, V, NV, D, kResidual, Y, kWarp>;
  const bool params = a.grad_weight || a.grad_bias;
  const size_t shared = kWarp && params ? warp_sums_bytes<S>(a.cols) : 0;
  if (shared > 0) {
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared)));
  }
  int per_sm = 0;
  EMBER_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kRowThreads, shared));
  const int64_t needed = (a.rows + RowTeam<kWarp>::kPerBlock - 1) / RowTeam<kWarp>::kPerBlock;
  const int blocks =
      int(std::min<int64_t>(needed, int64_t(std::max(per_sm, 1)) * properties(a.device).multiprocessor_count));
  Tensor partial;
  S *pw = nullptr, *pb = nullptr;
  if (params) {
    partial = empty({2, blocks, a.cols}, layer_norm_stats_dtype(a.dtype), cuda_device(a.device));
    pw = static_cast<S*>(partial.data_ptr());
    pb = pw + int64_t(blocks) * a.cols;
  }
  kernel<<<unsigned(blocks), kRowThreads, shared, stream>>>(a, pw, pb);
  EMBER_CUDA_CHECK_LAUNCH();
  if (params) sum_partials<T, S>(a, pw, pb, blocks, stream);
}

// The one-pass backward (dx, and dweight and dbias) when it takes the call:
// V-element vectors, rows of which each lane of a warp holds at most
// kWarpOnePassBytes of x in S (a warp per row: 768 columns, 384 in
// float64; longer half rows go to a block, whose threads hold fewer
// columns each) or that a block holds in at most kOnePassVecs vectors per
// thread (a block per row), and outside the residual form parameter
// gradients asked for (else the dx kernel alone reads less). Returns
// whether it ran.
template <typename T, typename S, int V, typename D = T, bool kResidual = false, typename Y = T>
bool one_pass_backward(const LayerNormArgs& a, cudaStream_t stream) {
  if (!kResidual && !a.grad_weight && !a.grad_bias) return false;
  const auto per_thread = [&](int threads) { return (a.cols + int64_t(threads) * V - 1) / (int64_t(threads) * V); };
  constexpr int kWarpVecs = std::max(kWarpOnePassBytes / int(sizeof(S)) / V, 2);
  const int64_t warp_vecs = per_thread(RowTeam<true>::kSize), block_vecs = per_thread(kRowThreads);
  if (warp_vecs <= 2) run_one_pass<T, S, V, 2, D, kResidual, Y, true>(a, stream);
  else if (warp_vecs <= kWarpVecs) run_one_pass<T, S, V, kWarpVecs, D, kResidual, Y, true>(a, stream);
  else if (block_vecs <= 2) run_one_pass<T, S, V, 2, D, kResidual, Y, false>(a, stream);
  else if (block_vecs <= kOnePassVecs) run_one_pass<T, S, V, kOnePassVecs, D, kResidual, Y, false>(a, stream);
  else return false;
  return true;
}

// Calls fn.template operator()<D>() with D the C++ type of the residual
// dtype a residual form of T takes (T itself, or half beside float); false
// for any other.
template <typename T, typename Fn>
bool with_residual_type(DType residual, Fn fn) {
  if (residual == dtype_of<T>::value) return fn.template operator()<T>();
  if constexpr (std::is_same_v<T, float>) {
    if (residual == DType::Float16) return fn.template operator()<Half>();
    if (residual == DType::BFloat16) return fn.template operator()<BFloat16>();
  }
  return false;
}

// Calls fn.template operator()<Y>() with Y the C++ type of a residual
// form's y_dtype: T, or D (the residual's type) where that differs; false
// for any other.
template <typename T, typename D, typename Fn>
bool with_output_type(DType y_dtype, Fn fn) {
  if (y_dtype == dtype_of<T>::value) return fn.template operator()<T>();
  if constexpr (!std::is_same_v<T, D>) {
    if (y_dtype == dtype_of<D>::value) return fn.template operator()<D>();
  }
  return false;
}

// The residual form (add_layer_norm): rows kept in registers with 16-byte
// vectors of every operand; declines otherwise.
bool add_forward(const LayerNormArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  bool done = false;
  EMBER_DISPATCH_FLOAT(a.dtype, "add_layer_norm", [&]<typename T>() {
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    constexpr int V = kVecWidth<T>;
    if (a.cols % V != 0 || a.cols > int64_t(kRowThreads) * kCachedVecs * V) return;
    for (const void* p : std::initializer_list<const void*>{a.x, a.y, a.sum, a.residual}) {
      if (!aligned16(p)) return;
    }
    done = with_residual_type<T>(a.residual_dtype, [&]<typename D>() {
      return with_output_type<T, D>(a.y_dtype,
                                    [&]<typename Y>() { return cached_forward<T, S, V, D, true, Y>(a, stream); });
    });
  });
  return done;
}

bool add_backward(const LayerNormArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  bool done = false;
  EMBER_DISPATCH_FLOAT(a.dtype, "add_layer_norm_backward", [&]<typename T>() {
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    constexpr int V = kVecWidth<T>;
    if (a.cols % V != 0) return;
    for (const void* p : std::initializer_list<const void*>{a.x, a.grad_y, a.grad_x, a.grad_sum, a.grad_residual}) {
      if (p != nullptr && !aligned16(p)) return;
    }
    done = with_residual_type<T>(a.residual_dtype, [&]<typename D>() {
      return with_output_type<T, D>(a.y_dtype,
                                    [&]<typename Y>() { return one_pass_backward<T, S, V, D, true, Y>(a, stream); });
    });
  });
  return done;
}

void backward(const LayerNormArgs& a) {
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  EMBER_DISPATCH_FLOAT(a.dtype, "layer_norm_backward", [&]<typename T>() {
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    bool done = false;
    with_vector_width<T>(a.cols, {a.x, a.grad_y, a.grad_x}, [&]<int V>() {
      if constexpr (V > 1) done = one_pass_backward<T, S, V>(a, stream);
      if (done) return;
      layer_norm_backward_dx_kernel<T, S, V><<<unsigned(a.rows), kRowThreads, 0, stream>>>(a);
      EMBER_CUDA_CHECK_LAUNCH();
    });
    if (done || (!a.grad_weight && !a.grad_bias)) return;
    int64_t col_blocks = (a.cols + 31) / 32;
    int slices = int(std::clamp<int64_t>(4 * properties(a.device).multiprocessor_count / col_blocks, 1,
                                         std::min<int64_t>((a.rows + 7) / 8, 1024)));
    Tensor partial = empty({2, slices, a.cols}, layer_norm_stats_dtype(a.dtype), cuda_device(a.device));
    S* pw = static_cast<S*>(partial.data_ptr());
    S* pb = pw + int64_t(slices) * a.cols;
    layer_norm_backward_params_kernel<T, S>
        <<<dim3(unsigned(col_blocks), unsigned(slices)), dim3(32, 8), 0, stream>>>(a, pw, pb);
    EMBER_CUDA_CHECK_LAUNCH();
    sum_partials<T, S>(a, pw, pb, slices, stream);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(layer_norm_forward_stub, DeviceType::CUDA, forward);
EMBER_REGISTER_KERNEL(layer_norm_backward_stub, DeviceType::CUDA, backward);
EMBER_REGISTER_KERNEL(add_layer_norm_forward_stub, DeviceType::CUDA, add_forward);
EMBER_REGISTER_KERNEL(add_layer_norm_backward_stub, DeviceType::CUDA, add_backward);

}  // namespace ember::cuda
