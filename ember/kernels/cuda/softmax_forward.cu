// CUDA softmax and log_softmax forward (which kernel takes which shape:
// ember/kernels/cuda/softmax_common.cuh). Every kernel takes the row max m
// (NaN-propagating), s = sum(exp(x - m)), then writes
//   softmax      y = exp(x - m) * (1 / s)
//   log_softmax  y = (x - m) - log(s)
// as ember/kernels/cpu/softmax.cpp does.
#include <cuda_pipeline.h>

#include <cmath>
#include <type_traits>

#include "ember/core/cuda/stream.h"
#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/softmax_common.cuh"

namespace ember::cuda {
namespace {

// inner == 1, dim <= 32 * N: a warp per row, N values per lane in registers.
template <typename T, int N, int V>
__global__ void __launch_bounds__(256)
    softmax_warp_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int dim, bool is_log) {
  using A = acc_t<T>;
  constexpr int kVecs = N / V;
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t row = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); row < rows; row += int64_t(gridDim.x) * warps) {
    const T* xr = x + row * dim;
    T* yr = y + row * dim;
    A v[N];
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int c = (k * 32 + lane) * V;
      if (c < dim) {
        Vec<T, V> in = load_vec<T, V>(xr + c);
#pragma unroll
        for (int j = 0; j < V; ++j) v[k * V + j] = to_acc(in.v[j]);
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) v[k * V + j] = A(-INFINITY);
      }
    }
    A m = A(-INFINITY);
#pragma unroll
    for (int e = 0; e < N; ++e) m = nan_max(m, v[e]);
    m = warp_max(m);
    A s = 0;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if ((k * 32 + lane) * V >= dim) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A e = ::exp(v[k * V + j] - m);
        s += e;
        if (!is_log) v[k * V + j] = e;
      }
    }
    s = warp_sum(s);
    const A scale = is_log ? ::log(s) : A(1) / s;
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int c = (k * 32 + lane) * V;
      if (c >= dim) continue;
      Vec<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A vj = v[k * V + j];
        out.v[j] = from_acc<T>(is_log ? (vj - m) - scale : vj * scale);
      }
      store_vec(yr + c, out);
    }
  }
}

// inner == 1, rows of whole 16-byte vectors, at most kRegisterThreads *
// kRegisterVecs of them (8192 float32): a block per row, each thread's
// vectors loaded at once into registers, so the row is read from memory once
// and max, sum and y come from registers.
constexpr int kRegisterThreads = 256;
constexpr int kRegisterVecs = 8;

template <typename T, int V>
__global__ void __launch_bounds__(kRegisterThreads)
    softmax_register_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t dim,
                                    bool is_log) {
  using A = acc_t<T>;
  __shared__ A partial[32];
  const int64_t first = int64_t(threadIdx.x) * V, stride = int64_t(kRegisterThreads) * V;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * dim;
    T* yr = y + row * dim;
    A v[kRegisterVecs][V];
#pragma unroll
    for (int k = 0; k < kRegisterVecs; ++k) {
      if (first + k * stride >= dim) continue;
      const Vec<T, V> in = load_vec<T, V>(xr + first + k * stride);
#pragma unroll
      for (int j = 0; j < V; ++j) v[k][j] = to_acc(in.v[j]);
    }
    A m = A(-INFINITY);
#pragma unroll
    for (int k = 0; k < kRegisterVecs; ++k) {
      if (first + k * stride >= dim) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) m = nan_max(m, v[k][j]);
    }
    m = block_max(m, partial, A(-INFINITY));
    A s = 0;
#pragma unroll
    for (int k = 0; k < kRegisterVecs; ++k) {
      if (first + k * stride >= dim) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const A e = ::exp(v[k][j] - m);
        s += e;
        if (!is_log) v[k][j] = e;
      }
    }
    s = block_sum(s, partial);
    const A scale = is_log ? ::log(s) : A(1) / s;
#pragma unroll
    for (int k = 0; k < kRegisterVecs; ++k) {
      const int64_t c = first + k * stride;
      if (c >= dim) continue;
      Vec<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = from_acc<T>(is_log ? (v[k][j] - m) - scale : v[k][j] * scale);
      store_vec(yr + c, out);
    }
  }
}

// inner == 1, long rows, the row cached in dynamic shared memory (as T):
// read once from global memory (the whole row in flight: registers for a
// thread's first vectors, cp.async for the rest), then max, sum and y from
// shared memory. For float and double the sum pass keeps exp(x - m) in the
// cache.
template <typename T>
__global__ void __launch_bounds__(512)
    softmax_cached_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t dim, bool is_log) {
  using A = acc_t<T>;
  constexpr int V = kVecWidth<T>;
  constexpr bool kKeepExp = std::is_same_v<T, A>;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  __shared__ A partial[32];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * dim;
    T* yr = y + row * dim;
    const RowSplit sp = split_row(xr, dim);
    T* cache = row_cache(dynamic_smem, xr);
    __syncthreads();  // this row's slots may overlap other threads' slots of the previous row
    // Pass 1: the max. The thread's first kSoftmaxUnroll vectors come through
    // registers (max taken on arrival, then cached); any further ones are
    // already in flight by cp.async and are read back from the cache.
    const int64_t first = sp.head + int64_t(threadIdx.x) * V, stride = int64_t(blockDim.x) * V;
    const int64_t rest = first + kSoftmaxUnroll * stride;
    for (int64_t c = rest; c < sp.body_end; c += stride) __pipeline_memcpy_async(cache + c, xr + c, 16);
    __pipeline_commit();
    A m = A(-INFINITY);
    Vec<T, V> in[kSoftmaxUnroll];
#pragma unroll
    for (int u = 0; u < kSoftmaxUnroll; ++u) {
      if (first + u * stride < sp.body_end) in[u] = load_vec<T, V>(xr + first + u * stride);
    }
    auto cache_one = [&](int64_t c) {
      const T v = xr[c];
      cache[c] = v;
      m = nan_max(m, A(to_acc(v)));
    };
    for (int64_t c = threadIdx.x; c < sp.head; c += blockDim.x) cache_one(c);
    for (int64_t c = sp.body_end + threadIdx.x; c < dim; c += blockDim.x) cache_one(c);
#pragma unroll
    for (int u = 0; u < kSoftmaxUnroll; ++u) {
      if (first + u * stride >= sp.body_end) continue;
      store_vec(cache + first + u * stride, in[u]);
#pragma unroll
      for (int j = 0; j < V; ++j) m = nan_max(m, A(to_acc(in[u].v[j])));
    }
    __pipeline_wait_prior(0);
    for (int64_t c = rest; c < sp.body_end; c += stride) {
      const Vec<T, V> v = load_vec<T, V>(cache + c);
#pragma unroll
      for (int j = 0; j < V; ++j) m = nan_max(m, A(to_acc(v.v[j])));
    }
    m = block_max(m, partial, A(-INFINITY));
    A s = 0;
    for_each_owned<V>(
        sp, dim,
        [&](int64_t c) {
          Vec<T, V> v = load_vec<T, V>(cache + c);
#pragma unroll
          for (int j = 0; j < V; ++j) {
            const A e = ::exp(A(to_acc(v.v[j])) - m);
            s += e;
            if constexpr (kKeepExp) v.v[j] = e;
          }
          if constexpr (kKeepExp) {
            if (!is_log) store_vec(cache + c, v);
          }
        },
        [&](int64_t c) {
          const A e = ::exp(A(to_acc(cache[c])) - m);
          s += e;
          if constexpr (kKeepExp) {
            if (!is_log) cache[c] = e;
          }
        });
    s = block_sum(s, partial);
    const A scale = is_log ? ::log(s) : A(1) / s;
    // The cache holds x, or exp(x - m) for softmax when kKeepExp.
    auto out = [&](T v) -> T {
      const A a = to_acc(v);
      if (is_log) return from_acc<T>((a - m) - scale);
      return from_acc<T>((kKeepExp ? a : ::exp(a - m)) * scale);
    };
    for_each_owned<V>(
        sp, dim,
        [&](int64_t c) {
          const Vec<T, V> v = load_vec<T, V>(cache + c);
          Vec<T, V> o;
#pragma unroll
          for (int j = 0; j < V; ++j) o.v[j] = out(v.v[j]);
          store_vec(yr + c, o);
        },
        [&](int64_t c) { yr[c] = out(cache[c]); });
  }
}

// A thread's running softmax statistics: the NaN-propagating max m of the
// elements seen and s = sum(exp(x - m)) over them (-inf elements add 0).
template <typename A>
struct OnlineSoftmaxSum {
  A m = A(-INFINITY), s = A(0);
  template <int K>
  __device__ __forceinline__ void push(const A (&v)[K]) {
    A group_max = A(-INFINITY);
#pragma unroll
    for (int k = 0; k < K; ++k) group_max = nan_max(group_max, v[k]);
    if (group_max != group_max) m = group_max;  // NaN: the row comes out NaN
    if (group_max > m) {
      s = m == A(-INFINITY) ? A(0) : s * ::exp(m - group_max);
      m = group_max;
    }
    if (m == A(-INFINITY) || m != m) return;
#pragma unroll
    for (int k = 0; k < K; ++k) s += ::exp(v[k] - m);
  }
};

// inner == 1, rows too long to cache: pass 1 folds the row into running
// (max, sum) pairs, kSoftmaxUnroll vectors in flight, merged across the
// block; pass 2 reads the row again and writes y.
template <typename T>
__global__ void __launch_bounds__(512)
    softmax_online_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t rows, int64_t dim, bool is_log) {
  using A = acc_t<T>;
  constexpr int V = kVecWidth<T>;
  __shared__ A partial[32];
  const int64_t tid = threadIdx.x, stride = int64_t(blockDim.x) * V;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * dim;
    T* yr = y + row * dim;
    const RowSplit sp = split_row(xr, dim);
    OnlineSoftmaxSum<A> acc;
    auto push_one = [&](int64_t c) {
      const A v[1] = {to_acc(xr[c])};
      acc.push(v);
    };
    for (int64_t c = tid; c < sp.head; c += blockDim.x) push_one(c);
    for (int64_t c = sp.body_end + tid; c < dim; c += blockDim.x) push_one(c);
    int64_t c = sp.head + tid * V;
    for (; c + (kSoftmaxUnroll - 1) * stride < sp.body_end; c += kSoftmaxUnroll * stride) {
      Vec<T, V> in[kSoftmaxUnroll];
#pragma unroll
      for (int u = 0; u < kSoftmaxUnroll; ++u) in[u] = load_vec<T, V>(xr + c + u * stride);
      A v[kSoftmaxUnroll * V];
#pragma unroll
      for (int k = 0; k < kSoftmaxUnroll * V; ++k) v[k] = to_acc(in[k / V].v[k % V]);
      acc.push(v);
    }
    for (; c < sp.body_end; c += stride) {
      const Vec<T, V> in = load_vec<T, V>(xr + c);
      A v[V];
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = to_acc(in.v[j]);
      acc.push(v);
    }
    const A m = block_max(acc.m, partial, A(-INFINITY));
    A s = block_sum(acc.m == A(-INFINITY) ? A(0) : acc.s * ::exp(acc.m - m), partial);
    if (m == A(-INFINITY)) s = A(NAN);  // a row of -inf: exp(-inf - -inf) is NaN, as on the CPU
    const A scale = is_log ? ::log(s) : A(1) / s;
    auto out = [&](T v) -> T {
      const A a = to_acc(v);
      return from_acc<T>(is_log ? (a - m) - scale : ::exp(a - m) * scale);
    };
    for_each_owned<V>(
        sp, dim,
        [&](int64_t c) {
          const Vec<T, V> v = load_vec<T, V>(xr + c);
          Vec<T, V> o;
#pragma unroll
          for (int j = 0; j < V; ++j) o.v[j] = out(v.v[j]);
          store_vec(yr + c, o);
        },
        [&](int64_t c) { yr[c] = out(xr[c]); });
  }
}

// inner > 1: lane (tx, ty) of a (bx, by) block walks column i of its outer
// block at k = ty, ty + by, ...
template <typename T>
__global__ void __launch_bounds__(256)
    softmax_strided_forward_kernel(const T* __restrict__ x, T* __restrict__ y, int64_t outer, int64_t dim,
                                   int64_t inner, int64_t inner_blocks, bool is_log) {
  using A = acc_t<T>;
  __shared__ A shared[256];
  const int by = blockDim.y;
  for (int64_t cb = blockIdx.x; cb < outer * inner_blocks; cb += gridDim.x) {
    const int64_t o = cb / inner_blocks, i = (cb % inner_blocks) * blockDim.x + threadIdx.x;
    const bool valid = i < inner;  // the same for every lane of a column
    const T* xc = x + o * dim * inner + i;
    T* yc = y + o * dim * inner + i;
    A m = A(-INFINITY);
    if (valid) {
      for (int64_t k = threadIdx.y; k < dim; k += by) m = nan_max(m, A(to_acc(xc[k * inner])));
    }
    m = column_reduce(m, shared, NanMaxOp{});
    A s = 0;
    if (valid) {
      for (int64_t k = threadIdx.y; k < dim; k += by) s += ::exp(A(to_acc(xc[k * inner])) - m);
    }
    s = column_reduce(s, shared, SumOp{});
    if (!valid) continue;
    const A scale = is_log ? ::log(s) : A(1) / s;
    for (int64_t k = threadIdx.y; k < dim; k += by) {
      const A v = to_acc(xc[k * inner]);
      yc[k * inner] = from_acc<T>(is_log ? (v - m) - scale : ::exp(v - m) * scale);
    }
  }
}

template <typename T>
void forward(const SoftmaxArgs& a, bool is_log) {
  constexpr int V = kVecWidth<T>;
  cudaStream_t stream = current_stream(a.device).handle();
  const T* x = static_cast<const T*>(a.in);
  T* y = static_cast<T*>(a.out);
  SoftmaxShape shape;
  shape.aligned = aligned16(x) && aligned16(y);
  shape.whole_vectors = a.dim % V == 0;
  shape.register_max_dim = int64_t(kRegisterThreads) * kRegisterVecs * V;
  shape.cache_bytes = row_cache_bytes<T>(a.dim);
  switch (softmax_path_for(a, shape)) {
    case SoftmaxPath::Warp:
      launch_warp_rows<V>(a.outer, a.dim, shape.aligned && shape.whole_vectors, [&]<int N, int W>(unsigned grid) {
        softmax_warp_forward_kernel<T, N, W><<<grid, 256, 0, stream>>>(x, y, a.outer, int(a.dim), is_log);
      });
      return;
    case SoftmaxPath::Register:
      softmax_register_forward_kernel<T, V>
          <<<grid_size(a.outer), kRegisterThreads, 0, stream>>>(x, y, a.outer, a.dim, is_log);
      EMBER_CUDA_CHECK_LAUNCH();
      return;
    case SoftmaxPath::Cached:
      launch_row_blocks(softmax_cached_forward_kernel<T>, a.outer, row_block_threads(a.dim, V), shape.cache_bytes,
                        stream, x, y, a.outer, a.dim, is_log);
      return;
    case SoftmaxPath::Online:
      launch_row_blocks(softmax_online_forward_kernel<T>, a.outer, row_block_threads(a.dim, V), 0, stream, x, y,
                        a.outer, a.dim, is_log);
      return;
    case SoftmaxPath::Strided: {
      const StridedLaunch l = strided_launch(a.outer, a.inner);
      softmax_strided_forward_kernel<T>
          <<<l.grid, l.block, 0, stream>>>(x, y, a.outer, a.dim, a.inner, l.inner_blocks, is_log);
      EMBER_CUDA_CHECK_LAUNCH();
      return;
    }
    case SoftmaxPath::Auto: break;
  }
  EMBER_INTERNAL_ASSERT(false, "softmax: softmax_path_for returned Auto");
}

}  // namespace

void softmax_forward_cuda(const SoftmaxArgs& a, bool is_log) {
  EMBER_DISPATCH_FLOAT(a.dtype, "softmax", [&]<typename T>() { forward<T>(a, is_log); });
}

}  // namespace ember::cuda
