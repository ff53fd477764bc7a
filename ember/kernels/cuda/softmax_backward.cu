// CUDA softmax and log_softmax backward (which kernel takes which shape:
// ember/kernels/cuda/softmax_common.cuh). From y (the forward's output) and
// g = dL/dy, every kernel takes one row sum s and writes
//   softmax      dx = y * (g - s),       s = sum(g * y)
//   log_softmax  dx = g - exp(y) * s,    s = sum(g)
// as ember/kernels/cpu/softmax.cpp does.
#include <cuda_pipeline.h>

#include <cmath>

#include "ember/core/cuda/stream.h"
#include "ember/kernels/cuda/common/block_reduce.cuh"
#include "ember/kernels/cuda/softmax_common.cuh"

namespace ember::cuda {
namespace {

template <typename A>
__device__ __forceinline__ A grad_term(A y, A g, bool is_log) {
  return is_log ? g : g * y;
}
template <typename A>
__device__ __forceinline__ A grad_input(A y, A g, A s, bool is_log) {
  return is_log ? g - ::exp(y) * s : y * (g - s);
}

// inner == 1, dim <= 32 * N: a warp per row, N values of y and g per lane.
template <typename T, int N, int V>
__global__ void __launch_bounds__(256)
    softmax_warp_backward_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx, int64_t rows,
                                 int dim, bool is_log) {
  using A = acc_t<T>;
  constexpr int kVecs = N / V;
  const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
  for (int64_t row = int64_t(blockIdx.x) * warps + (threadIdx.x >> 5); row < rows; row += int64_t(gridDim.x) * warps) {
    const int64_t base = row * dim;
    A yv[N], gv[N];
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int c = (k * 32 + lane) * V;
      if (c < dim) {
        Vec<T, V> yi = load_vec<T, V>(y + base + c), gi = load_vec<T, V>(g + base + c);
#pragma unroll
        for (int j = 0; j < V; ++j) {
          yv[k * V + j] = to_acc(yi.v[j]);
          gv[k * V + j] = to_acc(gi.v[j]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < V; ++j) yv[k * V + j] = gv[k * V + j] = A(0);  // adds nothing to s
      }
    }
    A s = 0;
#pragma unroll
    for (int e = 0; e < N; ++e) s += grad_term(yv[e], gv[e], is_log);
    s = warp_sum(s);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      const int c = (k * 32 + lane) * V;
      if (c >= dim) continue;
      Vec<T, V> out;
#pragma unroll
      for (int j = 0; j < V; ++j) out.v[j] = from_acc<T>(grad_input(yv[k * V + j], gv[k * V + j], s, is_log));
      store_vec(dx + base + c, out);
    }
  }
}

// inner == 1, long rows. kCached: y and g cached in dynamic shared memory
// (two padded regions of row_cache_bytes), read once from global memory (a
// thread's first vectors through registers, the rest by cp.async), and pass
// 2 reads shared memory. Otherwise pass 1 reads y and g (kSoftmaxUnroll
// vectors of each in flight) and pass 2 reads them again.
template <typename T, bool kCached>
__global__ void __launch_bounds__(512)
    softmax_block_backward_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx, int64_t rows,
                                  int64_t dim, bool is_log) {
  using A = acc_t<T>;
  constexpr int V = kVecWidth<T>;
  extern __shared__ __align__(16) unsigned char dynamic_smem[];
  __shared__ A partial[32];
  const int64_t tid = threadIdx.x, stride = int64_t(blockDim.x) * V;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* yr = y + row * dim;
    const T* gr = g + row * dim;
    T* dxr = dx + row * dim;
    const RowSplit sp = split_row(yr, dim);
    // Rows are read from yp/gp: the cache when kCached, else global memory.
    const T* yp = yr;
    const T* gp = gr;
    A s = 0;
    if constexpr (kCached) {
      T* cy = row_cache(dynamic_smem, yr);
      T* cg = row_cache(dynamic_smem + row_cache_bytes<T>(dim), gr);
      __syncthreads();  // this row's slots may overlap other threads' slots of the previous row
      // The thread's first kSoftmaxUnroll vectors of y and g come through
      // registers (summed on arrival, then cached); any further ones are
      // already in flight by cp.async and are read back from the cache.
      const int64_t first = sp.head + tid * V, rest = first + kSoftmaxUnroll * stride;
      for (int64_t c = rest; c < sp.body_end; c += stride) {
        __pipeline_memcpy_async(cy + c, yr + c, 16);
        __pipeline_memcpy_async(cg + c, gr + c, 16);
      }
      __pipeline_commit();
      Vec<T, V> yv[kSoftmaxUnroll], gv[kSoftmaxUnroll];
#pragma unroll
      for (int u = 0; u < kSoftmaxUnroll; ++u) {
        if (first + u * stride < sp.body_end) {
          yv[u] = load_vec<T, V>(yr + first + u * stride);
          gv[u] = load_vec<T, V>(gr + first + u * stride);
        }
      }
      auto cache_one = [&](int64_t c) {
        cy[c] = yr[c];
        cg[c] = gr[c];
        s += grad_term(A(to_acc(cy[c])), A(to_acc(cg[c])), is_log);
      };
      for (int64_t c = tid; c < sp.head; c += blockDim.x) cache_one(c);
      for (int64_t c = sp.body_end + tid; c < dim; c += blockDim.x) cache_one(c);
#pragma unroll
      for (int u = 0; u < kSoftmaxUnroll; ++u) {
        const int64_t c = first + u * stride;
        if (c >= sp.body_end) continue;
        store_vec(cy + c, yv[u]);
        store_vec(cg + c, gv[u]);
#pragma unroll
        for (int j = 0; j < V; ++j) s += grad_term(A(to_acc(yv[u].v[j])), A(to_acc(gv[u].v[j])), is_log);
      }
      __pipeline_wait_prior(0);
      for (int64_t c = rest; c < sp.body_end; c += stride) {
        const Vec<T, V> y1 = load_vec<T, V>(cy + c), g1 = load_vec<T, V>(cg + c);
#pragma unroll
        for (int j = 0; j < V; ++j) s += grad_term(A(to_acc(y1.v[j])), A(to_acc(g1.v[j])), is_log);
      }
      yp = cy;
      gp = cg;
    } else {
      for (int64_t c = tid; c < sp.head; c += blockDim.x) s += grad_term(A(to_acc(yr[c])), A(to_acc(gr[c])), is_log);
      for (int64_t c = sp.body_end + tid; c < dim; c += blockDim.x) {
        s += grad_term(A(to_acc(yr[c])), A(to_acc(gr[c])), is_log);
      }
      int64_t c = sp.head + tid * V;
      for (; c + (kSoftmaxUnroll - 1) * stride < sp.body_end; c += kSoftmaxUnroll * stride) {
        Vec<T, V> yv[kSoftmaxUnroll], gv[kSoftmaxUnroll];
#pragma unroll
        for (int u = 0; u < kSoftmaxUnroll; ++u) {
          yv[u] = load_vec<T, V>(yr + c + u * stride);
          gv[u] = load_vec<T, V>(gr + c + u * stride);
        }
#pragma unroll
        for (int u = 0; u < kSoftmaxUnroll; ++u) {
#pragma unroll
          for (int j = 0; j < V; ++j) s += grad_term(A(to_acc(yv[u].v[j])), A(to_acc(gv[u].v[j])), is_log);
        }
      }
      for (; c < sp.body_end; c += stride) {
        const Vec<T, V> yv = load_vec<T, V>(yr + c), gv = load_vec<T, V>(gr + c);
#pragma unroll
        for (int j = 0; j < V; ++j) s += grad_term(A(to_acc(yv.v[j])), A(to_acc(gv.v[j])), is_log);
      }
    }
    s = block_sum(s, partial);
    auto out = [&](T yv, T gv) { return from_acc<T>(grad_input(A(to_acc(yv)), A(to_acc(gv)), s, is_log)); };
    for_each_owned<V>(
        sp, dim,
        [&](int64_t c) {
          const Vec<T, V> yv = load_vec<T, V>(yp + c), gv = load_vec<T, V>(gp + c);
          Vec<T, V> o;
#pragma unroll
          for (int j = 0; j < V; ++j) o.v[j] = out(yv.v[j], gv.v[j]);
          store_vec(dxr + c, o);
        },
        [&](int64_t c) { dxr[c] = out(yp[c], gp[c]); });
  }
}

// inner > 1: lane (tx, ty) of a (bx, by) block walks column i of its outer
// block at k = ty, ty + by, ...
template <typename T>
__global__ void __launch_bounds__(256)
    softmax_strided_backward_kernel(const T* __restrict__ y, const T* __restrict__ g, T* __restrict__ dx, int64_t outer,
                                    int64_t dim, int64_t inner, int64_t inner_blocks, bool is_log) {
  using A = acc_t<T>;
  __shared__ A shared[256];
  const int by = blockDim.y;
  for (int64_t cb = blockIdx.x; cb < outer * inner_blocks; cb += gridDim.x) {
    const int64_t o = cb / inner_blocks, i = (cb % inner_blocks) * blockDim.x + threadIdx.x;
    const bool valid = i < inner;  // the same for every lane of a column
    const int64_t base = o * dim * inner + i;
    A s = 0;
    if (valid) {
      for (int64_t k = threadIdx.y; k < dim; k += by) {
        s += grad_term(A(to_acc(y[base + k * inner])), A(to_acc(g[base + k * inner])), is_log);
      }
    }
    s = column_reduce(s, shared, SumOp{});
    if (!valid) continue;
    for (int64_t k = threadIdx.y; k < dim; k += by) {
      const int64_t j = base + k * inner;
      dx[j] = from_acc<T>(grad_input(A(to_acc(y[j])), A(to_acc(g[j])), s, is_log));
    }
  }
}

template <typename T>
void backward(const SoftmaxArgs& a, bool is_log) {
  constexpr int V = kVecWidth<T>;
  cudaStream_t stream = current_stream(a.device).handle();
  const T* y = static_cast<const T*>(a.in);
  const T* g = static_cast<const T*>(a.grad);
  T* dx = static_cast<T*>(a.out);
  SoftmaxShape shape;
  shape.backward = true;
  shape.aligned = aligned16(y) && aligned16(g) && aligned16(dx);
  shape.whole_vectors = a.dim % V == 0;
  shape.cache_bytes = 2 * row_cache_bytes<T>(a.dim);
  switch (softmax_path_for(a, shape)) {
    case SoftmaxPath::Warp:
      launch_warp_rows<V>(a.outer, a.dim, shape.aligned && shape.whole_vectors, [&]<int N, int W>(unsigned grid) {
        softmax_warp_backward_kernel<T, N, W><<<grid, 256, 0, stream>>>(y, g, dx, a.outer, int(a.dim), is_log);
      });
      return;
    case SoftmaxPath::Cached:
      launch_row_blocks(softmax_block_backward_kernel<T, true>, a.outer, row_block_threads(a.dim, V), shape.cache_bytes,
                        stream, y, g, dx, a.outer, a.dim, is_log);
      return;
    case SoftmaxPath::Online:
      launch_row_blocks(softmax_block_backward_kernel<T, false>, a.outer, row_block_threads(a.dim, V), 0, stream, y, g,
                        dx, a.outer, a.dim, is_log);
      return;
    case SoftmaxPath::Strided: {
      const StridedLaunch l = strided_launch(a.outer, a.inner);
      softmax_strided_backward_kernel<T>
          <<<l.grid, l.block, 0, stream>>>(y, g, dx, a.outer, a.dim, a.inner, l.inner_blocks, is_log);
      EMBER_CUDA_CHECK_LAUNCH();
      return;
    }
    case SoftmaxPath::Register:
    case SoftmaxPath::Auto: break;
  }
  EMBER_INTERNAL_ASSERT(false, "softmax_backward: softmax_path_for returned a forward-only or no path");
}

}  // namespace

void softmax_backward_cuda(const SoftmaxArgs& a, bool is_log) {
  EMBER_DISPATCH_FLOAT(a.dtype, "softmax_backward", [&]<typename T>() { backward<T>(a, is_log); });
}

}  // namespace ember::cuda
