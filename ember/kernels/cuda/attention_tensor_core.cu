// Tensor-core fused attention (contract in
// ember/kernels/cuda/attention_tensor_core.h; the kernels' contract in
// ember/core/ops/attention_kernels.h): FlashAttention-2 on mma.sync
// m16n8k16 (float16/bfloat16 operands, float32 accumulators), sm_80+.
//
// Every kernel runs 4 warps; each warp owns 16 rows of the block's tile and
// computes with warp-level products on shared-memory tiles (rows padded by
// 16 bytes, so the 8 rows an ldmatrix reads fall in distinct banks):
// - warp_gemm_nt: acc[16 x N] += A[16 x K] B[N x K]^T, A and B row-major in
//   shared memory (ldmatrix; A = Q, K, dO or V rows, B = K, Q, V or dO rows).
// - warp_gemm_rn: acc[16 x N] += A[16 x K] B[K x N], A in registers (a
//   probability tile converted from accumulators), B row-major in shared
//   memory read with ldmatrix.trans.
// Fragment layouts (PTX ISA, mma.m16n8k16, g = lane / 4, t = lane % 4):
// A regs {a0, a1, a2, a3} = rows {g, g+8, g, g+8}, cols {2t, 2t+1} (+8 for
// a2, a3); B regs {b0, b1} = rows (k) {2t, 2t+1} (+8 for b1), col g; C
// {c0, c1} = row g, cols {2t, 2t+1}, {c2, c3} = row g+8. A thread therefore
// holds two rows of every score tile, shared with the 3 other threads of its
// quad: row statistics are reduced with two xor shuffles.
//
// Forward: one block per 64 query rows of a (batch, head). Q is loaded once;
// K and V tiles of kv_block keys are loaded with cp.async into one buffer
// each, V_j while S = Q K_j^T is computed and K_{j+1} while O += P V_j is,
// FlashAttention-2's overlap. Online softmax in base 2 (scores pre-scaled
// by scale * log2(e)), O rescaled when the row max grows; causal stops at
// the last key tile a row of the block can see, and the per-element masking
// (causal, bounds, bool/float masks, dropout) runs only on tiles that need
// it.
// Each kernel comes in two variants: one reading masks and drawing dropout,
// and one for neither (bounds and the causal mask only), whose smaller code
// and capped registers keep more warps on an SM (forward_min_blocks).
// Backward (deterministic, no atomics, as the CPU kernels): a row-dot kernel
// writes D_i = dO_i . O_i (float32 workspace); one block per 64 keys
// accumulates dK and dV over the query tiles; one block per 64 query rows
// accumulates dQ over the key tiles, both loading the next tile into a
// second stage while one is computed. S and dP are computed in both, the
// price of writing every gradient element from one block.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/error.h"
#include "ember/kernels/cuda/attention_tensor_core.h"
#include "ember/kernels/cuda/common/workspace.h"

// The kernels need sm_80 (cp.async, bfloat16 mma): compiled for an older
// architecture, their bodies and helpers are left out (the launchers never
// launch them there). The host pass sees everything.
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define EMBER_ATTENTION_TENSOR_CORES 1
#else
#define EMBER_ATTENTION_TENSOR_CORES 0
#endif

namespace ember::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerBlock = kWarps * 16;  // query rows of a dQ block, keys of a dK/dV block
constexpr int kPad = 8;                     // elements added to every shared-memory row (16 bytes)
constexpr float kLog2e = 1.4426950408889634f;

// Keys per tile of the forward and dQ kernels, query rows per tile of the
// dK/dV kernel: the score tile and the accumulators of a warp share its
// registers.
constexpr int kv_block(int d) { return d <= 128 ? 64 : 32; }
constexpr int q_block_backward(int d) { return d <= 64 ? 64 : 32; }
// Blocks of a kernel without masks or dropout an SM must hold at once, so
// that the compiler caps registers to fit them: left alone it took 141 a
// thread for the forward at head_dim 64 (3 blocks, 12 warps an SM on an
// H100, too few to hide the latency of the mma chains), 174 at 128, and 173
// for the dK/dV kernel at 64 (2 blocks). The kernels with masks or dropout
// keep the compiler's choice (capped, they spill).
constexpr int forward_min_blocks(int d, bool mask_or_dropout) {
  return mask_or_dropout ? 1 : d <= 64 ? 4 : d <= 128 ? 3 : 1;
}
constexpr int backward_kv_min_blocks(int d, bool mask_or_dropout) { return !mask_or_dropout && d <= 64 ? 3 : 1; }
// Keys per tile of the dQ kernel: its two stages of K and V tiles of 64
// keys at head_dim 128 would pass the 99 KB of shared memory a block gets
// on sm_86/sm_89.
constexpr int q_kernel_kv_block(int d) { return d <= 96 ? 64 : 32; }

// ---------------------------------------------------------------------------
// CUDA kernels
// ---------------------------------------------------------------------------

#if EMBER_ATTENTION_TENSOR_CORES

template <typename T>
__device__ __forceinline__ float to_float(T x) {
  if constexpr (std::is_same_v<T, Half>) return __half2float(__ushort_as_half(x.bits));
  else return __bfloat162float(__ushort_as_bfloat16(x.bits));
}

// Two floats as one register of two T, `lo` in the low half (the lower column).
template <typename T>
__device__ __forceinline__ uint32_t pack2(float lo, float hi) {
  if constexpr (std::is_same_v<T, Half>) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  } else {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
}

__device__ __forceinline__ uint32_t shared_address(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most `pending` of this thread's committed groups are in flight.
template <int pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(pending));
}

__device__ __forceinline__ void store_shared_zero16(uint32_t dst) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(dst), "r"(0));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}

// c[16 x 8] += a[16 x 16] b[16 x 8].
template <typename T>
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, Half>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// acc[16 x N] += A[16 x K] B[N x K]^T. a: the warp's first A row in shared
// memory, b: B's first row; both row-major with `stride` elements per row.
template <typename T, int K, int N>
__device__ __forceinline__ void warp_gemm_nt(float (&acc)[N / 8][4], uint32_t a, uint32_t b, int stride, int lane) {
  static_assert(K % 16 == 0 && N % 16 == 0);
  // ldmatrix.x4: lanes 8m..8m+7 give the rows of 8x8 matrix m.
  // A: matrices (rows 0-7, k 0-7), (rows 8-15, k 0-7), (rows 0-7, k 8-15), (rows 8-15, k 8-15) = a0..a3.
  const uint32_t a_lane = a + uint32_t(((lane % 16) * stride + (lane / 16) * 8) * int(sizeof(T)));
  // B (rows of B are the n of the product): matrices (n 0-7, k 0-7) = b0 and
  // (n 0-7, k 8-15) = b1 of the first n-tile, then the same for n 8-15.
  const uint32_t b_lane = b + uint32_t(((lane % 8 + (lane / 16) * 8) * stride + ((lane / 8) % 2) * 8) * int(sizeof(T)));
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    uint32_t af[4];
    ldmatrix_x4(af, a_lane + uint32_t(kk * 16 * int(sizeof(T))));
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t bf[4];
      ldmatrix_x4(bf, b_lane + uint32_t((np * 16 * stride + kk * 16) * int(sizeof(T))));
      mma_16816<T>(acc[2 * np], af, bf[0], bf[1]);
      mma_16816<T>(acc[2 * np + 1], af, bf[2], bf[3]);
    }
  }
}

// acc[16 x N] += A[16 x K] B[K x N]. a: A's fragments (from to_a_fragments),
// b: B's first row in shared memory, row-major with `stride` elements per row.
template <typename T, int K, int N>
__device__ __forceinline__ void warp_gemm_rn(float (&acc)[N / 8][4], const uint32_t (&a)[K / 16][4], uint32_t b,
                                             int stride, int lane) {
  static_assert(K % 16 == 0 && N % 16 == 0);
  // ldmatrix.x4.trans: matrices (k 0-7, n 0-7) = b0 and (k 8-15, n 0-7) = b1
  // of the first n-tile, then the same for n 8-15; .trans hands lane l the
  // elements (k 2t, 2t+1; n g) that B's fragment needs.
  const uint32_t b_lane = b + uint32_t(((lane % 8 + ((lane / 8) % 2) * 8) * stride + (lane / 16) * 8) * int(sizeof(T)));
#pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
#pragma unroll
    for (int np = 0; np < N / 16; ++np) {
      uint32_t bf[4];
      ldmatrix_x4_trans(bf, b_lane + uint32_t((kk * 16 * stride + np * 16) * int(sizeof(T))));
      mma_16816<T>(acc[2 * np], a[kk], bf[0], bf[1]);
      mma_16816<T>(acc[2 * np + 1], a[kk], bf[2], bf[3]);
    }
  }
}

// An accumulator tile [16 x N] as the A fragments of the next product: the
// C layout of n-tiles 2kk and 2kk+1 is the A layout of k-step kk.
template <typename T, int N>
__device__ __forceinline__ void to_a_fragments(const float (&c)[N / 8][4], uint32_t (&a)[N / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < N / 16; ++kk) {
    a[kk][0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
    a[kk][1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
    a[kk][2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[kk][3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
  }
}

template <int N>
__device__ __forceinline__ void zero(float (&c)[N][4]) {
#pragma unroll
  for (int n = 0; n < N; ++n) c[n][0] = c[n][1] = c[n][2] = c[n][3] = 0.f;
}

// Rows [0, R) of a [rows, D] matrix (row stride `row_stride` elements) into
// shared memory at dst (D + kPad elements per row) with cp.async; rows from
// `valid` on are zero-filled, so products over them add zeros.
template <typename T, int D, int R>
__device__ __forceinline__ void load_tile(uint32_t dst, const T* src, int64_t row_stride, int64_t valid) {
  constexpr int kChunks = D / 8;  // 16-byte pieces of a row
  for (int c = threadIdx.x; c < R * kChunks; c += kThreads) {
    const int r = c / kChunks, col = (c % kChunks) * 8;
    const uint32_t d = dst + uint32_t((r * (D + kPad) + col) * int(sizeof(T)));
    if (r < valid) cp_async16(d, src + r * row_stride + col);
    else store_shared_zero16(d);
  }
}

// One (batch, head) of the problem: masks and dropout of its positions.
struct Head {
  const AttentionArgs& a;
  int64_t b, h;
  uint64_t dropout_offset;
  float dropout_scale;  // 1 / (1 - p)

  __device__ Head(const AttentionArgs& args, int64_t batch, int64_t head) : a(args), b(batch), h(head) {
    dropout_offset = a.dropout_state.offset + (a.dropout_offset_shift ? *a.dropout_offset_shift : 0);
    dropout_scale = a.dropout_p < 1.0 ? float(1.0 / (1.0 - a.dropout_p)) : 0.f;
  }
  template <typename T>
  __device__ const T* rows(const void* base, const int64_t* strides) const {
    return static_cast<const T*>(base) + b * strides[0] + h * strides[1];
  }
  template <typename T>
  __device__ T* rows(void* base, const int64_t* strides) const {
    return static_cast<T*>(base) + b * strides[0] + h * strides[1];
  }
  // What (i, j) adds to a base-2 score: -inf when blocked (out of bounds,
  // causal, a false bool mask), a float mask's value times log2(e), else 0.
  // Without kMaskOrDropout the mask is not read (the launcher passes none).
  template <typename T, bool kMaskOrDropout>
  __device__ float score_offset(int64_t i, int64_t j) const {
    if (i >= a.q_len || j >= a.kv_len || (a.causal && j > i)) return -INFINITY;
    if (!kMaskOrDropout || a.mask == nullptr) return 0.f;
    const int64_t* ms = a.mask_strides;
    const int64_t at = b * ms[0] + h * ms[1] + i * ms[2] + j * ms[3];
    if (a.mask_dtype == DType::Bool) return static_cast<const bool*>(a.mask)[at] ? 0.f : -INFINITY;
    return to_float(static_cast<const T*>(a.mask)[at]) * kLog2e;
  }
  // The dropout factor of (i, j): 1 / (1 - p) when kept, else 0.
  __device__ float dropout_factor(int64_t i, int64_t j) const {
    const uint64_t index = uint64_t(((b * a.heads + h) * a.q_len + i) * a.kv_len + j);
    return attention_dropout_keep(a.dropout_state.seed, dropout_offset, index, float(a.dropout_p)) ? dropout_scale
                                                                                                   : 0.f;
  }
  // Whether the rows [i0, i0 + rows) x keys [j0, j0 + cols) need score_offset:
  // a mask, keys past the end or causal blocking inside the tile.
  __device__ bool needs_offsets(int64_t i0, int64_t j0, int cols) const {
    return a.mask != nullptr || j0 + cols > a.kv_len || (a.causal && j0 + cols - 1 > i0);
  }
};

#endif  // EMBER_ATTENTION_TENSOR_CORES

// Forward: out and logsumexp of 64 query rows (blockIdx.x) of the (batch
// blockIdx.z, head blockIdx.y).
template <typename T, int D, bool kMaskOrDropout>
__global__ void __launch_bounds__(kThreads, forward_min_blocks(D, kMaskOrDropout))
    attention_forward_kernel(const AttentionArgs a, float scale_log2) {
#if EMBER_ATTENTION_TENSOR_CORES
  constexpr int Bc = kv_block(D), S = D + kPad;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sk = sq + kRowsPerBlock * S;
  T* sv = sk + Bc * S;
  const uint32_t q_addr = shared_address(sq), k_addr = shared_address(sk), v_addr = shared_address(sv);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const Head hd(a, blockIdx.z, blockIdx.y);
  const T* q = hd.rows<T>(a.q, a.q_strides);
  const T* k = hd.rows<T>(a.k, a.k_strides);
  const T* v = hd.rows<T>(a.v, a.v_strides);
  const int64_t q0 = int64_t(blockIdx.x) * kRowsPerBlock, warp_row0 = q0 + warp * 16;
  const int64_t kv_end = a.causal && q0 + kRowsPerBlock < a.kv_len ? q0 + kRowsPerBlock : a.kv_len;
  const int64_t tiles = (kv_end + Bc - 1) / Bc;
  const bool dropout = kMaskOrDropout && a.dropout_p > 0.0;

  load_tile<T, D, kRowsPerBlock>(q_addr, q + q0 * a.q_strides[2], a.q_strides[2], a.q_len - q0);
  if (tiles > 0) load_tile<T, D, Bc>(k_addr, k, a.k_strides[2], a.kv_len);
  cp_async_commit();

  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};  // rows g and g + 8 (base 2; l: this thread's columns)
  float o[D / 8][4];
  zero(o);
  const uint32_t q_warp = q_addr + uint32_t(warp * 16 * S * int(sizeof(T)));
  for (int64_t tile = 0; tile < tiles; ++tile) {
    const int64_t j0 = tile * Bc;
    load_tile<T, D, Bc>(v_addr, v + j0 * a.v_strides[2], a.v_strides[2], a.kv_len - j0);
    cp_async_commit();
    cp_async_wait<1>();  // Q and K_j have landed; V_j may be in flight
    __syncthreads();

    float s[Bc / 8][4];
    zero(s);
    warp_gemm_nt<T, D, Bc>(s, q_warp, k_addr, S, lane);
    __syncthreads();  // every warp is done with K_j
    if (tile + 1 < tiles) {
      load_tile<T, D, Bc>(k_addr, k + (j0 + Bc) * a.k_strides[2], a.k_strides[2], a.kv_len - j0 - Bc);
    }
    cp_async_commit();

    // Online softmax of the two rows this thread holds.
    const bool offsets = hd.needs_offsets(warp_row0, j0, Bc);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = warp_row0 + g + 8 * r;
      float row_max = -INFINITY;
#pragma unroll
      for (int n = 0; n < Bc / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float x = s[n][2 * r + e] * scale_log2;
          if (offsets) x += hd.score_offset<T, kMaskOrDropout>(i, j0 + n * 8 + 2 * t + e);
          s[n][2 * r + e] = x;
          row_max = fmaxf(row_max, x);
        }
      }
      row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
      row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
      const float m_new = fmaxf(m[r], row_max);
      const float base = m_new == -INFINITY ? 0.f : m_new;  // a row with nothing kept yet: every p is 0
      const float alpha = exp2f(m[r] - base);
      m[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int n = 0; n < Bc / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 2; ++e) {
          float p = exp2f(s[n][2 * r + e] - base);
          sum += p;
          if (dropout) p *= hd.dropout_factor(i, j0 + n * 8 + 2 * t + e);
          s[n][2 * r + e] = p;
        }
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][2 * r] *= alpha;
        o[n][2 * r + 1] *= alpha;
      }
    }
    uint32_t p[Bc / 16][4];
    to_a_fragments<T, Bc>(s, p);

    cp_async_wait<1>();  // V_j has landed; K_{j+1} may be in flight
    __syncthreads();
    warp_gemm_rn<T, Bc, D>(o, p, v_addr, S, lane);
    __syncthreads();  // every warp is done with V_j
  }
  cp_async_wait<0>();

  T* out = hd.rows<T>(a.out, a.out_strides);
  float* lse = static_cast<float*>(a.logsumexp) + (int64_t(blockIdx.z) * a.heads + blockIdx.y) * a.q_len;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float total = l[r];
    total += __shfl_xor_sync(0xffffffffu, total, 1);
    total += __shfl_xor_sync(0xffffffffu, total, 2);
    const int64_t i = warp_row0 + g + 8 * r;
    if (i >= a.q_len) continue;
    const float inv = total > 0.f ? 1.f / total : 0.f;
    T* row = out + i * a.out_strides[2];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(row + n * 8 + 2 * t) = pack2<T>(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
    constexpr float kLn2 = 0.6931471805599453f;
    if (t == 0) lse[i] = total > 0.f ? (m[r] + log2f(total)) * kLn2 : -INFINITY;
  }
#endif
}

// D_i = sum_c grad_out_ic * out_ic for every row of every (batch, head):
// one warp per row, 16-byte loads.
template <typename T, int D>
__global__ void __launch_bounds__(256) attention_row_dot_kernel(const AttentionArgs a, float* row_dot) {
#if EMBER_ATTENTION_TENSOR_CORES
  const int64_t row = int64_t(blockIdx.x) * 8 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= a.batch * a.heads * a.q_len) return;
  const int64_t i = row % a.q_len, b = row / a.q_len / a.heads, h = row / a.q_len % a.heads;
  const T* o = static_cast<const T*>(a.out) + b * a.out_strides[0] + h * a.out_strides[1] + i * a.out_strides[2];
  const T* go = static_cast<const T*>(a.grad_out) + b * a.grad_out_strides[0] + h * a.grad_out_strides[1] +
                i * a.grad_out_strides[2];
  float sum = 0.f;
  for (int c = lane * 8; c < D; c += 32 * 8) {
    const uint4 ov = *reinterpret_cast<const uint4*>(o + c), gv = *reinterpret_cast<const uint4*>(go + c);
    const T* oe = reinterpret_cast<const T*>(&ov);
    const T* ge = reinterpret_cast<const T*>(&gv);
#pragma unroll
    for (int e = 0; e < 8; ++e) sum += to_float(oe[e]) * to_float(ge[e]);
  }
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, offset);
  if (lane == 0) row_dot[row] = sum;
#endif
}

#if EMBER_ATTENTION_TENSOR_CORES
// The backward's probabilities of one accumulator tile, in place: P (p),
// and dS = P * (dP * Z - D) (dp), Z the dropout factor; P is multiplied by
// Z after dS is formed (the dropped probabilities, which dV needs). Rows
// are queries unless `transposed` (rows keys, columns queries, the dK/dV
// kernel's S^T). lse2 and dot hold the queries' logsumexp in base 2 (+inf
// where it is -inf, so P = 0 there) and D: per column of the tile when
// transposed (in shared memory), else this thread's rows g and g + 8.
template <typename T, int N, bool transposed, bool kMaskOrDropout>
__device__ __forceinline__ void backward_probabilities(const Head& hd, float scale_log2, int64_t row0, int64_t col0,
                                                       bool offsets, const float* lse2, const float* dot,
                                                       float (&p)[N / 8][4], float (&dp)[N / 8][4]) {
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const bool dropout = kMaskOrDropout && hd.a.dropout_p > 0.0;
#pragma unroll
  for (int n = 0; n < N / 8; ++n) {
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int r = g + 8 * (c / 2), col = n * 8 + 2 * t + c % 2;
      const int64_t i = transposed ? col0 + col : row0 + r, j = transposed ? row0 + r : col0 + col;
      float x = p[n][c] * scale_log2;
      if (offsets) x += hd.score_offset<T, kMaskOrDropout>(i, j);
      const int stat = transposed ? col : c / 2;
      const float prob = exp2f(x - lse2[stat]);
      const float z = dropout ? hd.dropout_factor(i, j) : 1.f;
      dp[n][c] = prob * (dp[n][c] * z - dot[stat]);
      p[n][c] = prob * z;
    }
  }
}

__device__ __forceinline__ float lse_base2(float lse) { return lse == -INFINITY ? INFINITY : lse * kLog2e; }
#endif  // EMBER_ATTENTION_TENSOR_CORES

// dK and dV of 64 keys (blockIdx.x) of the (batch blockIdx.z, head
// blockIdx.y), summed over query tiles of q_block_backward(D) rows.
template <typename T, int D, bool kMaskOrDropout>
__global__ void __launch_bounds__(kThreads, backward_kv_min_blocks(D, kMaskOrDropout))
    attention_backward_kv_kernel(const AttentionArgs a, float scale_log2, const float* row_dot) {
#if EMBER_ATTENTION_TENSOR_CORES
  constexpr int Br = q_block_backward(D), S = D + kPad;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sk = reinterpret_cast<T*>(smem);
  T* sv = sk + kRowsPerBlock * S;
  T* sq = sv + kRowsPerBlock * S;  // two stages of Q, then two of dO, logsumexp and D
  T* sdo = sq + 2 * Br * S;
  float* s_lse2 = reinterpret_cast<float*>(sdo + 2 * Br * S);
  float* s_dot = s_lse2 + 2 * Br;
  const uint32_t k_addr = shared_address(sk), v_addr = shared_address(sv), q_addr = shared_address(sq),
                 do_addr = shared_address(sdo);
  constexpr uint32_t kStageBytes = uint32_t(Br * S * int(sizeof(T)));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const Head hd(a, blockIdx.z, blockIdx.y);
  const int64_t j0 = int64_t(blockIdx.x) * kRowsPerBlock, warp_key0 = j0 + warp * 16;
  const T* q = hd.rows<T>(a.q, a.q_strides);
  const T* go = hd.rows<T>(a.grad_out, a.grad_out_strides);
  const int64_t bh = int64_t(blockIdx.z) * a.heads + blockIdx.y;
  const float* lse = static_cast<const float*>(a.logsumexp) + bh * a.q_len;
  const float* dot = row_dot + bh * a.q_len;
  // The query tile at i0 into `stage`: Q and dO rows with cp.async (the
  // caller commits), logsumexp (base 2) and D with plain stores.
  const auto load_query_tile = [&](int64_t i0, int stage) {
    const uint32_t offset = uint32_t(stage) * kStageBytes;
    load_tile<T, D, Br>(q_addr + offset, q + i0 * a.q_strides[2], a.q_strides[2], a.q_len - i0);
    load_tile<T, D, Br>(do_addr + offset, go + i0 * a.grad_out_strides[2], a.grad_out_strides[2], a.q_len - i0);
    for (int r = threadIdx.x; r < Br; r += kThreads) {
      const bool in = i0 + r < a.q_len;
      s_lse2[stage * Br + r] = in ? lse_base2(lse[i0 + r]) : INFINITY;
      s_dot[stage * Br + r] = in ? dot[i0 + r] : 0.f;
    }
  };
  // Causal: query rows before j0 see none of these keys.
  const int64_t first_row = a.causal ? j0 / Br * Br : 0;

  load_tile<T, D, kRowsPerBlock>(k_addr, hd.rows<T>(a.k, a.k_strides) + j0 * a.k_strides[2], a.k_strides[2],
                                 a.kv_len - j0);
  load_tile<T, D, kRowsPerBlock>(v_addr, hd.rows<T>(a.v, a.v_strides) + j0 * a.v_strides[2], a.v_strides[2],
                                 a.kv_len - j0);
  if (first_row < a.q_len) load_query_tile(first_row, 0);
  cp_async_commit();

  float dk[D / 8][4], dv[D / 8][4];
  zero(dk);
  zero(dv);
  const uint32_t k_warp = k_addr + uint32_t(warp * 16 * S * int(sizeof(T)));
  const uint32_t v_warp = v_addr + uint32_t(warp * 16 * S * int(sizeof(T)));
  int stage = 0;
  for (int64_t i0 = first_row; i0 < a.q_len; i0 += Br, stage ^= 1) {
    cp_async_wait<0>();  // this thread's part of the tile at i0 has landed
    // Every thread's part has; every warp is done with the previous tile,
    // whose stage the next tile now fills while this one is computed.
    __syncthreads();
    if (i0 + Br < a.q_len) {
      load_query_tile(i0 + Br, stage ^ 1);
      cp_async_commit();
    }
    const uint32_t q_tile = q_addr + uint32_t(stage) * kStageBytes, do_tile = do_addr + uint32_t(stage) * kStageBytes;

    float st[Br / 8][4], dpt[Br / 8][4];  // S^T and dP^T: rows keys, columns queries
    zero(st);
    zero(dpt);
    warp_gemm_nt<T, D, Br>(st, k_warp, q_tile, S, lane);
    warp_gemm_nt<T, D, Br>(dpt, v_warp, do_tile, S, lane);
    const bool offsets =
        a.mask != nullptr || warp_key0 + 16 > a.kv_len || i0 + Br > a.q_len || (a.causal && warp_key0 + 15 > i0);
    backward_probabilities<T, Br, true, kMaskOrDropout>(hd, scale_log2, warp_key0, i0, offsets, s_lse2 + stage * Br,
                                                        s_dot + stage * Br, st, dpt);
    uint32_t pf[Br / 16][4], dsf[Br / 16][4];
    to_a_fragments<T, Br>(st, pf);
    to_a_fragments<T, Br>(dpt, dsf);
    warp_gemm_rn<T, Br, D>(dv, pf, do_tile, S, lane);
    warp_gemm_rn<T, Br, D>(dk, dsf, q_tile, S, lane);
  }
  cp_async_wait<0>();  // no query tile: K's and V's copies

  T* grad_k = hd.rows<T>(a.grad_k, a.grad_k_strides);
  T* grad_v = hd.rows<T>(a.grad_v, a.grad_v_strides);
  const float scale = scale_log2 / kLog2e;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = warp_key0 + g + 8 * r;
    if (j >= a.kv_len) continue;
    T* k_row = grad_k + j * a.grad_k_strides[2];
    T* v_row = grad_v + j * a.grad_v_strides[2];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(k_row + n * 8 + 2 * t) = pack2<T>(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      *reinterpret_cast<uint32_t*>(v_row + n * 8 + 2 * t) = pack2<T>(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
#endif
}

// dQ of 64 query rows of the (batch blockIdx.z, head blockIdx.y), summed
// over key tiles of q_kernel_kv_block(D) keys; blockIdx.x counts the row
// blocks from the last, so that under a causal mask the heaviest blocks
// start first.
template <typename T, int D, bool kMaskOrDropout>
__global__ void __launch_bounds__(kThreads)
    attention_backward_q_kernel(const AttentionArgs a, float scale_log2, const float* row_dot) {
#if EMBER_ATTENTION_TENSOR_CORES
  constexpr int Bc = q_kernel_kv_block(D), S = D + kPad;
  extern __shared__ __align__(16) unsigned char smem[];
  T* sq = reinterpret_cast<T*>(smem);
  T* sdo = sq + kRowsPerBlock * S;
  T* sk = sdo + kRowsPerBlock * S;  // two stages of K, then two of V
  T* sv = sk + 2 * Bc * S;
  const uint32_t q_addr = shared_address(sq), do_addr = shared_address(sdo), k_addr = shared_address(sk),
                 v_addr = shared_address(sv);
  constexpr uint32_t kStageBytes = uint32_t(Bc * S * int(sizeof(T)));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const Head hd(a, blockIdx.z, blockIdx.y);
  const int64_t q0 = int64_t(gridDim.x - 1 - blockIdx.x) * kRowsPerBlock, warp_row0 = q0 + warp * 16;
  const T* k = hd.rows<T>(a.k, a.k_strides);
  const T* v = hd.rows<T>(a.v, a.v_strides);
  const int64_t bh = int64_t(blockIdx.z) * a.heads + blockIdx.y;

  load_tile<T, D, kRowsPerBlock>(q_addr, hd.rows<T>(a.q, a.q_strides) + q0 * a.q_strides[2], a.q_strides[2],
                                 a.q_len - q0);
  load_tile<T, D, kRowsPerBlock>(do_addr, hd.rows<T>(a.grad_out, a.grad_out_strides) + q0 * a.grad_out_strides[2],
                                 a.grad_out_strides[2], a.q_len - q0);
  const int64_t kv_end = a.causal && q0 + kRowsPerBlock < a.kv_len ? q0 + kRowsPerBlock : a.kv_len;
  if (kv_end > 0) {
    load_tile<T, D, Bc>(k_addr, k, a.k_strides[2], a.kv_len);
    load_tile<T, D, Bc>(v_addr, v, a.v_strides[2], a.kv_len);
  }
  cp_async_commit();
  float lse2[2], dot[2];  // of this thread's rows g and g + 8
  {
    const float* lse = static_cast<const float*>(a.logsumexp) + bh * a.q_len;
    const float* rd = row_dot + bh * a.q_len;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int64_t i = warp_row0 + g + 8 * r;
      lse2[r] = i < a.q_len ? lse_base2(lse[i]) : INFINITY;
      dot[r] = i < a.q_len ? rd[i] : 0.f;
    }
  }

  float dq[D / 8][4];
  zero(dq);
  const uint32_t q_warp = q_addr + uint32_t(warp * 16 * S * int(sizeof(T)));
  const uint32_t do_warp = do_addr + uint32_t(warp * 16 * S * int(sizeof(T)));
  int stage = 0;
  for (int64_t j0 = 0; j0 < kv_end; j0 += Bc, stage ^= 1) {
    cp_async_wait<0>();  // this thread's part of K_j and V_j (and Q, dO) has landed
    // Every thread's part has; every warp is done with the previous tile,
    // whose stage the next tile now fills while this one is computed.
    __syncthreads();
    const uint32_t next = uint32_t(stage ^ 1) * kStageBytes;
    if (j0 + Bc < kv_end) {
      load_tile<T, D, Bc>(k_addr + next, k + (j0 + Bc) * a.k_strides[2], a.k_strides[2], a.kv_len - j0 - Bc);
      load_tile<T, D, Bc>(v_addr + next, v + (j0 + Bc) * a.v_strides[2], a.v_strides[2], a.kv_len - j0 - Bc);
      cp_async_commit();
    }
    const uint32_t k_tile = k_addr + uint32_t(stage) * kStageBytes, v_tile = v_addr + uint32_t(stage) * kStageBytes;

    float s[Bc / 8][4], dp[Bc / 8][4];
    zero(s);
    zero(dp);
    warp_gemm_nt<T, D, Bc>(s, q_warp, k_tile, S, lane);
    warp_gemm_nt<T, D, Bc>(dp, do_warp, v_tile, S, lane);
    const bool offsets = hd.needs_offsets(warp_row0, j0, Bc);
    backward_probabilities<T, Bc, false, kMaskOrDropout>(hd, scale_log2, warp_row0, j0, offsets, lse2, dot, s, dp);
    uint32_t dsf[Bc / 16][4];
    to_a_fragments<T, Bc>(dp, dsf);
    warp_gemm_rn<T, Bc, D>(dq, dsf, k_tile, S, lane);
  }
  cp_async_wait<0>();  // no key tile: Q's and dO's copies

  T* grad_q = hd.rows<T>(a.grad_q, a.grad_q_strides);
  const float scale = scale_log2 / kLog2e;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = warp_row0 + g + 8 * r;
    if (i >= a.q_len) continue;
    T* row = grad_q + i * a.grad_q_strides[2];
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<uint32_t*>(row + n * 8 + 2 * t) = pack2<T>(dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
    }
  }
#endif
}

// ---------------------------------------------------------------------------
// kernel launchers
// ---------------------------------------------------------------------------

constexpr size_t forward_shared_bytes(int d) { return size_t(kRowsPerBlock + 2 * kv_block(d)) * size_t(d + kPad) * 2; }
constexpr size_t backward_kv_shared_bytes(int d) {
  return size_t(2 * kRowsPerBlock + 4 * q_block_backward(d)) * size_t(d + kPad) * 2 +
         4 * size_t(q_block_backward(d)) * sizeof(float);
}
constexpr size_t backward_q_shared_bytes(int d) {
  return size_t(2 * kRowsPerBlock + 4 * q_kernel_kv_block(d)) * size_t(d + kPad) * 2;
}

bool forward_head_dim(int64_t d) { return d == 32 || d == 64 || d == 96 || d == 128 || d == 256; }
bool backward_head_dim(int64_t d) { return d == 32 || d == 64 || d == 96 || d == 128; }

bool rows_aligned(const void* p, const int64_t* strides) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && strides[0] % 8 == 0 && strides[1] % 8 == 0 && strides[2] % 8 == 0;
}

int64_t blocks_of(int64_t n, int64_t block) { return (n + block - 1) / block; }

// Why the tensor-core path cannot take `a`, or null when it can.
const char* cannot_take(const AttentionArgs& a, bool backward) {
  if (a.dtype != DType::Float16 && a.dtype != DType::BFloat16) return "it takes float16 and bfloat16 only";
  if (a.head_dim != a.value_dim) return "it takes head_dim == value_dim only";
  if (backward ? !backward_head_dim(a.head_dim) : !forward_head_dim(a.head_dim)) {
    return backward ? "its backward takes head_dim 32, 64, 96 or 128" : "it takes head_dim 32, 64, 96, 128 or 256";
  }
  if (properties(a.device).major < 8) return "it needs a GPU of compute capability 8.0 or newer";
  if (a.mask != nullptr && a.mask_dtype != DType::Bool && a.mask_dtype != a.dtype) {
    return "it takes bool masks and masks of q's dtype only";
  }
  if (a.heads > 65535 || a.batch > 65535) return "it takes at most 65535 batches and heads";
  bool aligned = rows_aligned(a.q, a.q_strides) && rows_aligned(a.k, a.k_strides) && rows_aligned(a.v, a.v_strides) &&
                 rows_aligned(a.out, a.out_strides);
  if (backward) {
    aligned = aligned && rows_aligned(a.grad_out, a.grad_out_strides) && rows_aligned(a.grad_q, a.grad_q_strides) &&
              rows_aligned(a.grad_k, a.grad_k_strides) && rows_aligned(a.grad_v, a.grad_v_strides);
  }
  if (!aligned) return "it takes 16-byte aligned operands whose batch, head and row strides are multiples of 8";
  const size_t bytes =
      backward ? std::max(backward_kv_shared_bytes(int(a.head_dim)), backward_q_shared_bytes(int(a.head_dim)))
               : forward_shared_bytes(int(a.head_dim));
  if (bytes > properties(a.device).shared_memory_per_block_optin)
    return "its tiles do not fit the device's shared memory";
  return nullptr;
}

// Whether to take `a`: Auto takes what it can, Simt and Cudnn nothing,
// TensorCore everything or throws.
bool takes(const AttentionArgs& a, bool backward) {
  const AttentionPath forced = forced_attention_path();
  if (forced == AttentionPath::Simt || forced == AttentionPath::Cudnn) return false;
  const char* why = cannot_take(a, backward);
  if (forced == AttentionPath::Auto) return why == nullptr;
  EMBER_CHECK(!why, (backward ? "scaled_dot_product_attention backward" : "scaled_dot_product_attention")
                        << ": the forced CUDA path 'tensor_core' cannot take q [" << a.batch << ", " << a.heads << ", "
                        << a.q_len << ", " << a.head_dim << "], k [" << a.batch << ", " << a.heads << ", " << a.kv_len
                        << ", " << a.head_dim << "], v [..., " << a.value_dim << "] " << dtype_name(a.dtype)
                        << " on cuda:" << a.device << ": " << why
                        << "; force AttentionPath::Simt or Auto (ember/kernels/cuda/attention_tensor_core.h)");
  return true;
}

template <typename... Params>
void launch(void (*kernel)(Params...), dim3 grid, size_t shared_bytes, cudaStream_t stream,
            std::type_identity_t<Params>... args) {
  constexpr size_t kDefaultLimit = 48 * 1024;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return;
  if (shared_bytes > kDefaultLimit) {
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(shared_bytes)));
  }
  kernel<<<grid, kThreads, shared_bytes, stream>>>(args...);
  EMBER_CUDA_CHECK_LAUNCH();
}

// Masks and dropout get kernels of their own: their per-element code (a
// mask read, a Philox draw) in every unrolled element of a tile made the
// plain kernels' code too large for the instruction cache and took
// registers from them.
bool mask_or_dropout(const AttentionArgs& a) { return a.mask != nullptr || a.dropout_p > 0.0; }

template <typename T, int D>
void forward(const AttentionArgs& a, cudaStream_t stream) {
  const dim3 grid(unsigned(blocks_of(a.q_len, kRowsPerBlock)), unsigned(a.heads), unsigned(a.batch));
  launch(mask_or_dropout(a) ? attention_forward_kernel<T, D, true> : attention_forward_kernel<T, D, false>, grid,
         forward_shared_bytes(D), stream, a, float(a.scale) * kLog2e);
}

template <typename T, int D>
void backward(const AttentionArgs& a, cudaStream_t stream) {
  const bool general = mask_or_dropout(a);
  const auto kv_kernel = general ? attention_backward_kv_kernel<T, D, true> : attention_backward_kv_kernel<T, D, false>;
  const auto q_kernel = general ? attention_backward_q_kernel<T, D, true> : attention_backward_q_kernel<T, D, false>;
  const int64_t rows = a.batch * a.heads * a.q_len;
  if (rows > 0) {
    Workspace row_dot = workspace_for<float>(rows, a.device);
    attention_row_dot_kernel<T, D><<<unsigned(blocks_of(rows, 8)), 256, 0, stream>>>(a, row_dot.as<float>());
    EMBER_CUDA_CHECK_LAUNCH();
    const float scale_log2 = float(a.scale) * kLog2e;
    launch(kv_kernel, dim3(unsigned(blocks_of(a.kv_len, kRowsPerBlock)), unsigned(a.heads), unsigned(a.batch)),
           backward_kv_shared_bytes(D), stream, a, scale_log2, static_cast<const float*>(row_dot.as<float>()));
    launch(q_kernel, dim3(unsigned(blocks_of(a.q_len, kRowsPerBlock)), unsigned(a.heads), unsigned(a.batch)),
           backward_q_shared_bytes(D), stream, a, scale_log2, static_cast<const float*>(row_dot.as<float>()));
  } else {
    // No query rows: dK and dV are zeros (the dK/dV kernel's loop runs no tile).
    launch(kv_kernel, dim3(unsigned(blocks_of(a.kv_len, kRowsPerBlock)), unsigned(a.heads), unsigned(a.batch)),
           backward_kv_shared_bytes(D), stream, a, float(a.scale) * kLog2e, static_cast<const float*>(nullptr));
  }
}

template <typename T>
void dispatch_head_dim(const AttentionArgs& a, cudaStream_t stream, bool is_backward) {
  switch (a.head_dim) {
    case 32: return is_backward ? backward<T, 32>(a, stream) : forward<T, 32>(a, stream);
    case 64: return is_backward ? backward<T, 64>(a, stream) : forward<T, 64>(a, stream);
    case 96: return is_backward ? backward<T, 96>(a, stream) : forward<T, 96>(a, stream);
    case 128: return is_backward ? backward<T, 128>(a, stream) : forward<T, 128>(a, stream);
    case 256:
      EMBER_INTERNAL_ASSERT(!is_backward, "attention tensor-core backward called with head_dim 256");
      return forward<T, 256>(a, stream);
  }
  EMBER_INTERNAL_ASSERT(false, "attention tensor-core path called with head_dim " << a.head_dim);
}

bool run(const AttentionArgs& a, cudaStream_t stream, bool is_backward) {
  if (!takes(a, is_backward)) return false;
  if (a.dtype == DType::Float16) dispatch_head_dim<Half>(a, stream, is_backward);
  else dispatch_head_dim<BFloat16>(a, stream, is_backward);
  return true;
}

}  // namespace

bool attention_tensor_core_forward(const AttentionArgs& a, cudaStream_t stream) { return run(a, stream, false); }
bool attention_tensor_core_backward(const AttentionArgs& a, cudaStream_t stream) { return run(a, stream, true); }

}  // namespace ember::cuda
