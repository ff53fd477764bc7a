// CUDA fused attention (contract in ember/core/ops/attention_kernels.h): the
// launchers try the fused routes first (float16/bfloat16,
// ember/kernels/cuda/attention_route.h: ember's tensor-core path or cuDNN's
// fused attention, whichever is faster for the shape) and run these SIMT
// kernels for every call they decline: every float dtype and head_dim up to
// 256 (value_dim == head_dim, which the front-end guarantees on CUDA).
//
// Layout shared by every kernel here: a block works on tiles of R rows (R
// query rows and R keys, R from tile_rows: 8 to 32 so the staged tiles fit
// about 70 KB of shared memory), kGroup = 8 threads per row of its own tile.
// Tiles are staged in shared memory in the accumulation type, the head dim
// zero-padded to the bucket D (32, 64, 128 or 256) and each row padded by one
// element so the threads of a group read distinct banks. A group computes
// the scores of its row against the other tile's rows (thread t takes rows
// t, t + 8, ...), then owns the head-dim slice t, t + 8, ... of its row's
// accumulators.
//
// Forward: one block per (batch, head, query tile), a loop over key tiles
// with an online softmax (running max and sum per row); with causal the key
// tiles wholly above the diagonal are skipped.
// Backward (FlashAttention-2, deterministic: no atomics, each gradient
// element summed by one thread in a fixed order):
// 1. delta_kernel: D_i = sum_c grad_out_ic * out_ic into a workspace.
// 2. dkdv_kernel: one block per key tile, a loop over query tiles (with
//    causal, from the tile's own rows on), recomputing P from the saved
//    logsumexp: dV = (P o Z)^T dO, dK = scale dS^T Q with
//    dS = P o (Z o dO V^T - D), Z the dropout keep mask over (1 - p).
// 3. dq_kernel: one block per query tile, a loop over key tiles (a second
//    recomputation of P), dQ = scale dS K.
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <type_traits>
#include <utility>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/ops/attention_kernels.h"
#include "ember/kernels/acc_type.h"
#include "ember/kernels/cuda/attention_route.h"
#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/common/elementwise_launch.cuh"
#include "ember/kernels/cuda/common/grid_math.h"
#include "ember/kernels/cuda/common/vector_access.cuh"
#include "ember/kernels/cuda/common/workspace.h"

namespace ember::cuda {
namespace {

constexpr int kGroup = 8;  // threads per row of a tile

// Rows of a tile (query rows and keys alike) for the accumulation type A and
// the head-dim bucket D: four staged tiles of R * (D + 1) values stay near
// 70 KB.
template <typename A, int D>
constexpr int tile_rows() {
  if constexpr (sizeof(A) == 4) return D <= 128 ? 32 : 16;
  else return D <= 32 ? 32 : D <= 128 ? 16 : 8;
}

// Dynamic shared memory of every kernel: four [R][D + 1] tiles, two
// [R][R + 1] score tiles and two [R] row statistics (the forward and dq
// kernels use part of it).
template <typename A, int D>
constexpr size_t shared_bytes() {
  constexpr int R = tile_rows<A, D>();
  return sizeof(A) * (4 * size_t(R) * (D + 1) + 2 * size_t(R) * (R + 1) + 2 * size_t(R));
}

template <typename A>
__device__ __forceinline__ A neg_inf() {
  return -std::numeric_limits<A>::infinity();
}

// Reductions over the kGroup threads of a row (lanes 8k .. 8k + 7 of a warp).
template <typename A>
__device__ __forceinline__ A group_max(A v) {
#pragma unroll
  for (int offset = kGroup / 2; offset > 0; offset >>= 1) v = ::max(v, __shfl_xor_sync(0xffffffffu, v, offset, kGroup));
  return v;
}

template <typename A>
__device__ __forceinline__ A group_sum(A v) {
#pragma unroll
  for (int offset = kGroup / 2; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset, kGroup);
  return v;
}

// Stages rows [0, rows) of a (row_stride, dense last dim) matrix into
// dst[R][D + 1] as A: columns past `cols` and rows past `rows` are zeros.
// `vec`: 16-byte loads (the launcher checked alignment and strides).
template <typename T, int D, int R>
__device__ __forceinline__ void load_tile(acc_t<T>* dst, const T* src, int64_t row_stride, int64_t rows, int64_t cols,
                                          bool vec) {
  using A = acc_t<T>;
  if (vec) {
    constexpr int N = kVecWidth<T>;
    for (int x = threadIdx.x; x < R * (D / N); x += blockDim.x) {
      const int r = x / (D / N), c = (x % (D / N)) * N;
      A* d = dst + r * (D + 1) + c;
      if (r < rows && c < cols) {
        Vec<T, N> v = load_vec<T, N>(src + r * row_stride + c);
#pragma unroll
        for (int e = 0; e < N; ++e) d[e] = to_acc(v.v[e]);
      } else {
#pragma unroll
        for (int e = 0; e < N; ++e) d[e] = A(0);
      }
    }
  } else {
    for (int x = threadIdx.x; x < R * D; x += blockDim.x) {
      const int r = x / D, c = x % D;
      dst[r * (D + 1) + c] = r < rows && c < cols ? to_acc(src[r * row_stride + c]) : A(0);
    }
  }
}

// One (batch, head) of the arguments: where its rows start.
struct HeadOffsets {
  int64_t b, h, bh;
  __device__ HeadOffsets(const AttentionArgs& a, int64_t bh_) : b(bh_ / a.heads), h(bh_ % a.heads), bh(bh_) {}
  __device__ int64_t of(const int64_t (&strides)[3]) const { return b * strides[0] + h * strides[1]; }
};

// The score s (already scaled) of query row i and key j after causal and the
// mask: -inf where blocked. i and j must be in range.
template <typename T>
__device__ __forceinline__ acc_t<T> masked_score(const AttentionArgs& a, const HeadOffsets& o, acc_t<T> s, int64_t i,
                                                 int64_t j) {
  using A = acc_t<T>;
  if (a.causal && j > i) return neg_inf<A>();
  if (a.mask != nullptr) {
    const int64_t m = o.b * a.mask_strides[0] + o.h * a.mask_strides[1] + i * a.mask_strides[2] + j * a.mask_strides[3];
    if (a.mask_dtype == DType::Bool) {
      if (!static_cast<const bool*>(a.mask)[m]) return neg_inf<A>();
    } else {
      s += to_acc(static_cast<const T*>(a.mask)[m]);
    }
  }
  return s;
}

// Dropout's factor Z for (i, j): 1 / (1 - p) where kept, 0 where dropped, 1
// without dropout.
template <typename A>
__device__ __forceinline__ A dropout_factor(const AttentionArgs& a, uint64_t offset, const HeadOffsets& o, int64_t i,
                                            int64_t j, A keep_scale) {
  if (a.dropout_p <= 0.0) return A(1);
  const uint64_t index = (uint64_t(o.bh) * uint64_t(a.q_len) + uint64_t(i)) * uint64_t(a.kv_len) + uint64_t(j);
  return attention_dropout_keep(a.dropout_state.seed, offset, index, float(a.dropout_p)) ? keep_scale : A(0);
}

__device__ __forceinline__ uint64_t dropout_offset(const AttentionArgs& a) {
  return a.dropout_state.offset + (a.dropout_offset_shift != nullptr ? *a.dropout_offset_shift : 0);
}

template <typename A>
__device__ __forceinline__ A keep_scale(const AttentionArgs& a) {
  return a.dropout_p < 1.0 ? A(1) / (A(1) - A(a.dropout_p)) : A(0);
}

// ---------------------------------------------------------------------------
// CUDA kernels

template <typename T, int D>
__global__ void __launch_bounds__(kGroup* tile_rows<acc_t<T>, D>()) forward_kernel(const AttentionArgs a, bool vec) {
  using A = acc_t<T>;
  constexpr int R = tile_rows<A, D>(), P = D + 1, C = D / kGroup;
  extern __shared__ __align__(16) unsigned char shared[];
  A* q_s = reinterpret_cast<A*>(shared);  // [R][P]
  A* k_s = q_s + R * P;                   // [R][P]
  A* v_s = k_s + R * P;                   // [R][P]
  A* p_s = v_s + R * P;                   // [R][R + 1]: probabilities after dropout
  const int row = threadIdx.x / kGroup, t = threadIdx.x % kGroup;
  const int64_t L = a.q_len, S = a.kv_len, E = a.head_dim;
  const int64_t tiles = (L + R - 1) / R;
  const A scale = A(a.scale), z_scale = keep_scale<A>(a);
  const uint64_t offset = dropout_offset(a);

  for (int64_t w = blockIdx.x; w < a.batch * a.heads * tiles; w += gridDim.x) {
    const HeadOffsets o(a, w / tiles);
    const int64_t i0 = (tiles - 1 - w % tiles) * R;  // the longest causal tiles first
    const int64_t i = i0 + row;
    const T* q = static_cast<const T*>(a.q) + o.of(a.q_strides);
    const T* k = static_cast<const T*>(a.k) + o.of(a.k_strides);
    const T* v = static_cast<const T*>(a.v) + o.of(a.v_strides);
    __syncthreads();  // the previous tile's reads of q_s are done
    load_tile<T, D, R>(q_s, q + i0 * a.q_strides[2], a.q_strides[2], L - i0, E, vec);

    A m = neg_inf<A>(), l = A(0), acc[C] = {};
    const int64_t kv_end = a.causal ? ::min(S, i0 + R) : S;
    for (int64_t j0 = 0; j0 < kv_end; j0 += R) {
      __syncthreads();  // the previous key tile's reads are done
      load_tile<T, D, R>(k_s, k + j0 * a.k_strides[2], a.k_strides[2], S - j0, E, vec);
      load_tile<T, D, R>(v_s, v + j0 * a.v_strides[2], a.v_strides[2], S - j0, E, vec);
      __syncthreads();

      A s[R / kGroup] = {};
#pragma unroll 8
      for (int d = 0; d < D; ++d) {
        const A qd = q_s[row * P + d];
#pragma unroll
        for (int c = 0; c < R / kGroup; ++c) s[c] += qd * k_s[(t + kGroup * c) * P + d];
      }
      A tile_max = neg_inf<A>();
#pragma unroll
      for (int c = 0; c < R / kGroup; ++c) {
        const int64_t j = j0 + t + kGroup * c;
        s[c] = i < L && j < S ? masked_score<T>(a, o, s[c] * scale, i, j) : neg_inf<A>();
        tile_max = ::max(tile_max, s[c]);
      }
      const A m_new = ::max(m, group_max(tile_max));
      // A row with nothing kept so far has m_new = -inf: exponents against 0
      // keep its probabilities 0 instead of NaN.
      const A base = m_new == neg_inf<A>() ? A(0) : m_new;
      const A alpha = ::exp(m - base);
      A sum = 0;
#pragma unroll
      for (int c = 0; c < R / kGroup; ++c) {
        const A p = ::exp(s[c] - base);
        sum += p;
        const A z = p != A(0) ? dropout_factor<A>(a, offset, o, i, j0 + t + kGroup * c, z_scale) : A(1);
        p_s[row * (R + 1) + t + kGroup * c] = p * z;
      }
      l = l * alpha + group_sum(sum);
      m = m_new;
      __syncwarp();  // the group's p_s row is written
#pragma unroll
      for (int c = 0; c < C; ++c) acc[c] *= alpha;
      for (int jj = 0; jj < R; ++jj) {
        const A p = p_s[row * (R + 1) + jj];
#pragma unroll
        for (int c = 0; c < C; ++c) acc[c] += p * v_s[jj * P + t + kGroup * c];
      }
    }

    if (i < L) {
      const A inv = l > A(0) ? A(1) / l : A(0);
      T* out = static_cast<T*>(a.out) + o.of(a.out_strides) + i * a.out_strides[2];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int d = t + kGroup * c;
        if (d < E) out[d] = from_acc<T>(acc[c] * inv);
      }
      if (t == 0) static_cast<A*>(a.logsumexp)[o.bh * L + i] = l > A(0) ? m + ::log(l) : neg_inf<A>();
    }
  }
}

// One warp per row: delta[row] = sum_c grad_out[row, c] * out[row, c].
template <typename T>
__global__ void delta_kernel(const AttentionArgs a, acc_t<T>* delta) {
  using A = acc_t<T>;
  const int lane = threadIdx.x % 32;
  const int64_t rows = a.batch * a.heads * a.q_len;
  const int64_t warps = int64_t(gridDim.x) * (blockDim.x / 32);
  for (int64_t r = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32; r < rows; r += warps) {
    const HeadOffsets o(a, r / a.q_len);
    const int64_t i = r % a.q_len;
    const T* go = static_cast<const T*>(a.grad_out) + o.of(a.grad_out_strides) + i * a.grad_out_strides[2];
    const T* out = static_cast<const T*>(a.out) + o.of(a.out_strides) + i * a.out_strides[2];
    A sum = 0;
    for (int64_t c = lane; c < a.value_dim; c += 32) sum += to_acc(go[c]) * to_acc(out[c]);
    sum = warp_sum(sum);
    if (lane == 0) delta[r] = sum;
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kGroup* tile_rows<acc_t<T>, D>())
    dkdv_kernel(const AttentionArgs a, const acc_t<T>* delta, bool vec) {
  using A = acc_t<T>;
  constexpr int R = tile_rows<A, D>(), P = D + 1, C = D / kGroup;
  extern __shared__ __align__(16) unsigned char shared[];
  A* k_s = reinterpret_cast<A*>(shared);  // [R][P]
  A* v_s = k_s + R * P;                   // [R][P]
  A* q_s = v_s + R * P;                   // [R][P]
  A* do_s = q_s + R * P;                  // [R][P]
  A* pt_s = do_s + R * P;                 // [R keys][R + 1 rows]: P o Z
  A* dst_s = pt_s + R * (R + 1);          // [R keys][R + 1 rows]: dS
  A* lse_s = dst_s + R * (R + 1);         // [R rows]
  A* delta_s = lse_s + R;                 // [R rows]
  const int key = threadIdx.x / kGroup, t = threadIdx.x % kGroup;
  const int64_t L = a.q_len, S = a.kv_len, E = a.head_dim;
  const int64_t tiles = (S + R - 1) / R;
  const A scale = A(a.scale), z_scale = keep_scale<A>(a);
  const uint64_t offset = dropout_offset(a);

  for (int64_t w = blockIdx.x; w < a.batch * a.heads * tiles; w += gridDim.x) {
    const HeadOffsets o(a, w / tiles);
    const int64_t j0 = (w % tiles) * R;
    const int64_t j = j0 + key;
    const T* q = static_cast<const T*>(a.q) + o.of(a.q_strides);
    const T* k = static_cast<const T*>(a.k) + o.of(a.k_strides);
    const T* v = static_cast<const T*>(a.v) + o.of(a.v_strides);
    const T* go = static_cast<const T*>(a.grad_out) + o.of(a.grad_out_strides);
    const A* lse = static_cast<const A*>(a.logsumexp) + o.bh * L;
    __syncthreads();  // the previous tile's reads of k_s, v_s are done
    load_tile<T, D, R>(k_s, k + j0 * a.k_strides[2], a.k_strides[2], S - j0, E, vec);
    load_tile<T, D, R>(v_s, v + j0 * a.v_strides[2], a.v_strides[2], S - j0, E, vec);

    A dk[C] = {}, dv[C] = {};
    // With causal, query rows before j0 see none of these keys.
    for (int64_t i0 = a.causal ? j0 : 0; i0 < L; i0 += R) {
      __syncthreads();  // the previous query tile's reads are done
      load_tile<T, D, R>(q_s, q + i0 * a.q_strides[2], a.q_strides[2], L - i0, E, vec);
      load_tile<T, D, R>(do_s, go + i0 * a.grad_out_strides[2], a.grad_out_strides[2], L - i0, E, vec);
      if (threadIdx.x < R) {
        const int64_t i = i0 + threadIdx.x;
        lse_s[threadIdx.x] = i < L ? lse[i] : neg_inf<A>();
        delta_s[threadIdx.x] = i < L ? delta[o.bh * L + i] : A(0);
      }
      __syncthreads();

      A s[R / kGroup] = {}, dp[R / kGroup] = {};
#pragma unroll 4
      for (int d = 0; d < D; ++d) {
        const A kd = k_s[key * P + d], vd = v_s[key * P + d];
#pragma unroll
        for (int c = 0; c < R / kGroup; ++c) {
          s[c] += q_s[(t + kGroup * c) * P + d] * kd;
          dp[c] += do_s[(t + kGroup * c) * P + d] * vd;
        }
      }
#pragma unroll
      for (int c = 0; c < R / kGroup; ++c) {
        const int r = t + kGroup * c;
        const int64_t i = i0 + r;
        const A sc = i < L && j < S ? masked_score<T>(a, o, s[c] * scale, i, j) : neg_inf<A>();
        // A fully blocked row (logsumexp -inf) has P = 0 and no gradient.
        const A p = lse_s[r] == neg_inf<A>() ? A(0) : ::exp(sc - lse_s[r]);
        const A z = p != A(0) ? dropout_factor<A>(a, offset, o, i, j, z_scale) : A(1);
        pt_s[key * (R + 1) + r] = p * z;
        dst_s[key * (R + 1) + r] = p * (dp[c] * z - delta_s[r]);
      }
      __syncwarp();  // the group's pt_s and dst_s rows are written
      for (int r = 0; r < R; ++r) {
        const A pz = pt_s[key * (R + 1) + r], ds = dst_s[key * (R + 1) + r];
#pragma unroll
        for (int c = 0; c < C; ++c) {
          dv[c] += pz * do_s[r * P + t + kGroup * c];
          dk[c] += ds * q_s[r * P + t + kGroup * c];
        }
      }
    }

    if (j < S) {
      T* gk = static_cast<T*>(a.grad_k) + o.of(a.grad_k_strides) + j * a.grad_k_strides[2];
      T* gv = static_cast<T*>(a.grad_v) + o.of(a.grad_v_strides) + j * a.grad_v_strides[2];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int d = t + kGroup * c;
        if (d < E) {
          gk[d] = from_acc<T>(dk[c] * scale);
          gv[d] = from_acc<T>(dv[c]);
        }
      }
    }
  }
}

template <typename T, int D>
__global__ void __launch_bounds__(kGroup* tile_rows<acc_t<T>, D>())
    dq_kernel(const AttentionArgs a, const acc_t<T>* delta, bool vec) {
  using A = acc_t<T>;
  constexpr int R = tile_rows<A, D>(), P = D + 1, C = D / kGroup;
  extern __shared__ __align__(16) unsigned char shared[];
  A* q_s = reinterpret_cast<A*>(shared);  // [R][P]
  A* do_s = q_s + R * P;                  // [R][P]
  A* k_s = do_s + R * P;                  // [R][P]
  A* v_s = k_s + R * P;                   // [R][P]
  A* ds_s = v_s + R * P;                  // [R rows][R + 1 keys]: dS
  const int row = threadIdx.x / kGroup, t = threadIdx.x % kGroup;
  const int64_t L = a.q_len, S = a.kv_len, E = a.head_dim;
  const int64_t tiles = (L + R - 1) / R;
  const A scale = A(a.scale), z_scale = keep_scale<A>(a);
  const uint64_t offset = dropout_offset(a);

  for (int64_t w = blockIdx.x; w < a.batch * a.heads * tiles; w += gridDim.x) {
    const HeadOffsets o(a, w / tiles);
    const int64_t i0 = (tiles - 1 - w % tiles) * R;
    const int64_t i = i0 + row;
    const T* q = static_cast<const T*>(a.q) + o.of(a.q_strides);
    const T* k = static_cast<const T*>(a.k) + o.of(a.k_strides);
    const T* v = static_cast<const T*>(a.v) + o.of(a.v_strides);
    const T* go = static_cast<const T*>(a.grad_out) + o.of(a.grad_out_strides);
    const A lse = i < L ? static_cast<const A*>(a.logsumexp)[o.bh * L + i] : neg_inf<A>();
    const A delta_i = i < L ? delta[o.bh * L + i] : A(0);
    __syncthreads();  // the previous tile's reads of q_s, do_s are done
    load_tile<T, D, R>(q_s, q + i0 * a.q_strides[2], a.q_strides[2], L - i0, E, vec);
    load_tile<T, D, R>(do_s, go + i0 * a.grad_out_strides[2], a.grad_out_strides[2], L - i0, E, vec);

    A dq[C] = {};
    const int64_t kv_end = a.causal ? ::min(S, i0 + R) : S;
    for (int64_t j0 = 0; j0 < kv_end; j0 += R) {
      __syncthreads();  // the previous key tile's reads are done
      load_tile<T, D, R>(k_s, k + j0 * a.k_strides[2], a.k_strides[2], S - j0, E, vec);
      load_tile<T, D, R>(v_s, v + j0 * a.v_strides[2], a.v_strides[2], S - j0, E, vec);
      __syncthreads();

      A s[R / kGroup] = {}, dp[R / kGroup] = {};
#pragma unroll 4
      for (int d = 0; d < D; ++d) {
        const A qd = q_s[row * P + d], od = do_s[row * P + d];
#pragma unroll
        for (int c = 0; c < R / kGroup; ++c) {
          s[c] += qd * k_s[(t + kGroup * c) * P + d];
          dp[c] += od * v_s[(t + kGroup * c) * P + d];
        }
      }
#pragma unroll
      for (int c = 0; c < R / kGroup; ++c) {
        const int64_t j = j0 + t + kGroup * c;
        const A sc = i < L && j < S ? masked_score<T>(a, o, s[c] * scale, i, j) : neg_inf<A>();
        const A p = lse == neg_inf<A>() ? A(0) : ::exp(sc - lse);
        const A z = p != A(0) ? dropout_factor<A>(a, offset, o, i, j, z_scale) : A(1);
        ds_s[row * (R + 1) + t + kGroup * c] = p * (dp[c] * z - delta_i);
      }
      __syncwarp();  // the group's ds_s row is written
      for (int jj = 0; jj < R; ++jj) {
        const A ds = ds_s[row * (R + 1) + jj];
#pragma unroll
        for (int c = 0; c < C; ++c) dq[c] += ds * k_s[jj * P + t + kGroup * c];
      }
    }

    if (i < L) {
      T* gq = static_cast<T*>(a.grad_q) + o.of(a.grad_q_strides) + i * a.grad_q_strides[2];
#pragma unroll
      for (int c = 0; c < C; ++c) {
        const int d = t + kGroup * c;
        if (d < E) gq[d] = from_acc<T>(dq[c] * scale);
      }
    }
  }
}

// ---------------------------------------------------------------------------
// kernel launchers

// Calls f.template operator()<D>() with the head-dim bucket of head_dim.
template <typename F>
void with_head_dim(const AttentionArgs& a, const char* op, F f) {
  EMBER_INTERNAL_ASSERT(a.value_dim == a.head_dim, op << ": CUDA kernels need value_dim == head_dim, got "
                                                      << a.value_dim << " and " << a.head_dim);
  EMBER_INTERNAL_ASSERT(a.mask == nullptr || a.mask_dtype == DType::Bool || a.mask_dtype == a.dtype,
                        op << ": a " << dtype_name(a.mask_dtype) << " mask for " << dtype_name(a.dtype) << " inputs");
  EMBER_CHECK(a.head_dim >= 1 && a.head_dim <= 256,
              op << ": CUDA fused attention takes head_dim 1 to 256, got q [" << a.batch << ", " << a.heads << ", "
                 << a.q_len << ", " << a.head_dim << "] " << dtype_name(a.dtype)
                 << "; scaled_dot_product_attention computes larger head dims with matmul and softmax");
  if (a.head_dim <= 32) f.template operator()<32>();
  else if (a.head_dim <= 64) f.template operator()<64>();
  else if (a.head_dim <= 128) f.template operator()<128>();
  else f.template operator()<256>();
}

// Whether every tile operand can be read in 16-byte vectors: its rows are
// whole vectors and it starts (and every (batch, head, row) starts) 16-byte
// aligned.
template <typename T>
bool vector_tiles(const AttentionArgs& a, std::initializer_list<std::pair<const void*, const int64_t*>> operands) {
  constexpr int N = kVecWidth<T>;
  if (a.head_dim % N != 0) return false;
  for (auto [p, strides] : operands) {
    if (!aligned16(p) || strides[0] % N != 0 || strides[1] % N != 0 || strides[2] % N != 0) return false;
  }
  return true;
}

// Launches a tile kernel over `work` (batch, head, tile) items with its
// dynamic shared memory, raising the kernel's limit above the default 48 KB.
template <typename... Params>
void launch_tiles(void (*kernel)(Params...), int64_t work, int threads, size_t bytes, const AttentionArgs& a,
                  const char* op, cudaStream_t stream, std::type_identity_t<Params>... args) {
  constexpr size_t kDefaultLimit = 48 * 1024;
  const size_t limit = properties(a.device).shared_memory_per_block_optin;
  EMBER_CHECK(bytes <= limit, op << ": the SIMT kernel for head_dim " << a.head_dim << " " << dtype_name(a.dtype)
                                 << " needs " << bytes << " bytes of shared memory per block, this device allows "
                                 << limit << "; use a smaller head_dim or float32");
  if (bytes > kDefaultLimit) {
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
  }
  kernel<<<grid_size(work), threads, bytes, stream>>>(args...);
  EMBER_CUDA_CHECK_LAUNCH();
}

void forward(const AttentionArgs& a) {
  constexpr const char* op = "scaled_dot_product_attention";
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  if (attention_route_forward(a, stream)) return;
  if (a.batch * a.heads * a.q_len == 0) return;
  EMBER_DISPATCH_FLOAT(a.dtype, op, [&]<typename T>() {
    with_head_dim(a, op, [&]<int D>() {
      using A = acc_t<T>;
      constexpr int R = tile_rows<A, D>();
      const bool vec = vector_tiles<T>(a, {{a.q, a.q_strides}, {a.k, a.k_strides}, {a.v, a.v_strides}});
      launch_tiles(forward_kernel<T, D>, a.batch * a.heads * ceil_div(a.q_len, R), kGroup * R, shared_bytes<A, D>(), a,
                   op, stream, a, vec);
    });
  });
}

void backward(const AttentionArgs& a) {
  constexpr const char* op = "scaled_dot_product_attention_backward";
  DeviceGuard guard(a.device);
  cudaStream_t stream = current_stream(a.device).handle();
  if (attention_route_backward(a, stream)) return;
  if (a.batch * a.heads == 0 || a.q_len + a.kv_len == 0) return;
  EMBER_DISPATCH_FLOAT(a.dtype, op, [&]<typename T>() {
    with_head_dim(a, op, [&]<int D>() {
      using A = acc_t<T>;
      constexpr int R = tile_rows<A, D>();
      const bool vec = vector_tiles<T>(
          a, {{a.q, a.q_strides}, {a.k, a.k_strides}, {a.v, a.v_strides}, {a.grad_out, a.grad_out_strides}});
      const int64_t rows = a.batch * a.heads * a.q_len;
      Workspace delta = workspace_for<A>(rows, a.device);
      if (rows > 0) {
        delta_kernel<T><<<grid_size(ceil_div(rows, 8)), 256, 0, stream>>>(a, delta.as<A>());
        EMBER_CUDA_CHECK_LAUNCH();
      }
      // Each kernel writes zeros where the other length is 0.
      if (a.kv_len > 0) {
        launch_tiles(dkdv_kernel<T, D>, a.batch * a.heads * ceil_div(a.kv_len, R), kGroup * R, shared_bytes<A, D>(), a,
                     op, stream, a, delta.as<A>(), vec);
      }
      if (a.q_len > 0) {
        launch_tiles(dq_kernel<T, D>, a.batch * a.heads * ceil_div(a.q_len, R), kGroup * R, shared_bytes<A, D>(), a, op,
                     stream, a, delta.as<A>(), vec);
      }
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(attention_forward_stub, DeviceType::CUDA, forward);
EMBER_REGISTER_KERNEL(attention_backward_stub, DeviceType::CUDA, backward);

}  // namespace ember::cuda
