// CPU conv2d kernels (contract in ember/core/ops/conv_kernels.h): im2col + GEMM.
//
// Per image, im2col unfolds the input into columns (c_in * kh * kw rows,
// out_h * out_w columns; row (c, p, q) holds the input pixel each output
// position sees through kernel tap (p, q) of channel c, 0 in the padding).
// The groups split those rows into `groups` equal blocks, so one GEMM
// batched over groups (gemm_stub, ember/core/ops/gemm_kernels.h) does the work:
//   forward          out_g  (c_out/g x OHW) = W_g (c_out/g x K) . col_g (K x OHW)
//   backward input   dcol_g (K x OHW)       = W_g^T . dout_g, then col2im adds
//                                             each column back onto its pixels
//   backward weight  dW_g  (c_out/g x K)   += dout_g . col_g^T, over the images
// with K = c_in/g * kh * kw. A 1x1 kernel with unit stride and no padding
// needs no im2col: the image itself is the column matrix. im2col and col2im
// move each tap's inside outputs row by row, or, for a "same" convolution
// with unit strides, as one run of the plane (is_flat).
// Arithmetic is in S (double for float64, float otherwise); float16 and
// bfloat16 data is widened into S buffers first and each result is rounded
// once, so sums over images and taps never round in between. Channels-last
// arrays are reordered into NCHW buffers on the way in and back on the way
// out (correct, not fast: the fast channels-last path is cuDNN's).
//
// Threads (ember/core/parallel_for.h): with at least get_num_threads() images,
// the images are shared out (each thread with its own im2col buffer, its
// GEMMs single-threaded); with fewer, the images run in turn and each GEMM
// splits over the threads. The output and the input gradient are per image,
// so they equal one thread's exactly; the weight gradient sums over images:
// each chunk of images sums its own partial gradient (the first chunk into
// the gradient itself), then the threads add the partials in chunk order,
// each over its share of the gradient's elements, so no serial pass over the
// partials remains (bit-identical run to run at a given thread count).
// The bias gradient is split by channel (exact). im2col buffers and partials
// are scratch from the CPU allocator's cache (see Scratch).
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <type_traits>
#include <vector>

#include "ember/core/cpu_allocator.h"
#include "ember/core/ops/conv_kernels.h"
#include "ember/core/ops/gemm_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"
#include "ember/kernels/cpu/output_span.h"

namespace ember::cpu {
namespace {

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

// The dims of one of the kernels' 4-D arrays (N, C, H, W order) and whether
// it lies channels-last (N, H, W, C) in memory.
struct Array4 {
  int64_t n, c, h, w;
  bool channels_last;
  int64_t numel() const { return n * c * h * w; }
  // f(i, at) for every element: its NCHW index i and its index in memory.
  template <typename F>
  void for_each(F&& f) const {
    int64_t i = 0;
    for (int64_t b = 0; b < n; ++b) {
      for (int64_t ch = 0; ch < c; ++ch) {
        for (int64_t y = 0; y < h; ++y) {
          const int64_t row = channels_last ? (b * h + y) * w * c + ch : i;
          const int64_t step = channels_last ? c : 1;
          for (int64_t x = 0; x < w; ++x, ++i) f(i, row + x * step);
        }
      }
    }
  }
};

// An array of T read as NCHW S: the memory itself when T is S and the
// array is NCHW, else a widened (and reordered) copy.
template <typename S, typename T>
class Input {
 public:
  Input(const void* p, const Array4& dims) {
    const T* src = static_cast<const T*>(p);
    if constexpr (std::is_same_v<S, T>) {
      if (!dims.channels_last) {
        ptr_ = src;
        return;
      }
    }
    copy_.resize(size_t(dims.numel()));
    dims.for_each([&](int64_t i, int64_t at) { copy_[size_t(i)] = S(acc_t<T>(src[at])); });
    ptr_ = copy_.data();
  }
  const S* get() const { return ptr_; }

 private:
  std::vector<S> copy_;
  const S* ptr_ = nullptr;
};

// An array of T written as NCHW S: the memory itself when T is S and the
// array is NCHW, else a buffer rounded (and reordered) into the memory by
// store().
template <typename S, typename T>
class Output {
 public:
  Output(void* p, const Array4& dims) : dst_(static_cast<T*>(p)), dims_(dims) {
    if constexpr (std::is_same_v<S, T>) {
      if (!dims.channels_last) {
        ptr_ = dst_;
        return;
      }
    }
    copy_.resize(size_t(dims.numel()));
    ptr_ = copy_.data();
  }
  S* get() const { return ptr_; }
  void store() {
    if (copy_.empty()) return;
    dims_.for_each([&](int64_t i, int64_t at) { dst_[at] = T(acc_t<T>(copy_[size_t(i)])); });
  }

 private:
  T* dst_;
  Array4 dims_;
  std::vector<S> copy_;
  S* ptr_ = nullptr;
};

// Uninitialized scratch memory for n elements of S (none for 0), from the CPU
// allocator's cache of large blocks: at least kCpuCacheMinBytes are asked
// for, so that the block is cached and its pages stay mapped from call to
// call. A buffer from the C library of a few hundred KiB is mapped afresh
// at each call and takes a page fault per 4 KiB page on first touch (about
// 10 us each on a virtual machine).
template <typename S>
class Scratch {
 public:
  explicit Scratch(size_t n)
      : mem_(n == 0 ? DataPtr(nullptr, &std::free)
                    : cpu_allocator().allocate(std::max(n * sizeof(S), kCpuCacheMinBytes), kCPU)) {}
  S* get() const { return static_cast<S*>(mem_.get()); }

 private:
  DataPtr mem_;
};

// The arrays of a call: input, weight and output sides.
Array4 input_dims(const ConvArgs& a) { return {a.n, a.c_in, a.h, a.w, a.channels_last}; }
Array4 weight_dims(const ConvArgs& a) { return {a.c_out, a.c_in / a.groups, a.kernel_h, a.kernel_w, a.channels_last}; }
Array4 output_dims(const ConvArgs& a) { return {a.n, a.c_out, a.out_h, a.out_w, a.channels_last}; }
Array4 bias_dims(const ConvArgs& a) { return {1, a.c_out, 1, 1, false}; }

bool is_pointwise(const ConvArgs& a) {
  return a.kernel_h == 1 && a.kernel_w == 1 && a.stride_h == 1 && a.stride_w == 1 && a.padding_h == 0 &&
         a.padding_w == 0;
}

// Row `row` = (c * kh + p) * kw + q of the column matrix: tap (p, q) of
// channel c. Output (oy, ox) reads input (oy * stride_h + y_offset,
// ox * stride_w + x_offset), inside the input for oy in y and ox in x.
struct TapRow {
  int64_t c, row;
  Span y, x;
  int64_t y_offset, x_offset;
};

template <typename F>
void for_each_tap_row(const ConvArgs& a, F&& f) {
  for (int64_t c = 0; c < a.c_in; ++c) {
    for (int64_t p = 0; p < a.kernel_h; ++p) {
      const int64_t y_offset = p * a.dilation_h - a.padding_h;
      for (int64_t q = 0; q < a.kernel_w; ++q) {
        const int64_t x_offset = q * a.dilation_w - a.padding_w;
        f(TapRow{c, (c * a.kernel_h + p) * a.kernel_w + q, inside(a.h, a.out_h, a.stride_h, y_offset),
                 inside(a.w, a.out_w, a.stride_w, x_offset), y_offset, x_offset});
      }
    }
  }
}

// Unit strides and an output as wide as the input (a "same" convolution):
// output oy * w + ox of a tap row reads element oy * w + ox + shift of the
// plane, shift = y_offset * w + x_offset, so the inside outputs from the
// first to the last are one run of the plane; the run's outputs in padding
// columns land on the neighbouring rows' edge pixels.
bool is_flat(const ConvArgs& a) { return a.stride_h == 1 && a.stride_w == 1 && a.out_w == a.w; }

// dst[i] = src[i * stride] for i < n (restrict pointers, so that it vectorizes).
template <typename S>
void gather_run(S* __restrict dst, const S* __restrict src, int64_t n, int64_t stride) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = src[i * stride];
  }
}

// dst[i * stride] += src[i] for i < n.
template <typename S>
void scatter_add_run(S* __restrict dst, const S* __restrict src, int64_t n, int64_t stride) {
  if (stride == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * stride] += src[i];
  }
}

// Zeroes the outputs of rows [y0, y1) of a flat tap row (width w) in the
// padding columns, outside x.
template <typename S>
void zero_padding_columns(S* out, int64_t w, int64_t y0, int64_t y1, Span x) {
  for (int64_t oy = y0; oy < y1; ++oy) {
    std::fill(out + oy * w, out + oy * w + x.lo, S(0));
    std::fill(out + oy * w + x.hi, out + (oy + 1) * w, S(0));
  }
}

// image (c_in, h, w) -> col (c_in * kh * kw, out_h * out_w)
template <typename S>
void im2col(const ConvArgs& a, const S* image, S* col) {
  const int64_t ohw = a.out_h * a.out_w;
  const bool flat = is_flat(a);
  for_each_tap_row(a, [&](const TapRow& t) {
    S* out = col + t.row * ohw;
    const S* plane = image + t.c * a.h * a.w;
    if (t.y.empty() || t.x.empty()) {
      std::fill(out, out + ohw, S(0));
    } else if (flat) {
      const int64_t first = t.y.lo * a.w + t.x.lo, last = (t.y.hi - 1) * a.w + t.x.hi;
      gather_run(out + first, plane + first + t.y_offset * a.w + t.x_offset, last - first, 1);
      std::fill(out, out + first, S(0));
      std::fill(out + last, out + ohw, S(0));
      zero_padding_columns(out, a.w, t.y.lo, t.y.hi, t.x);
    } else {
      for (int64_t oy = 0; oy < a.out_h; ++oy) {
        S* out_row = out + oy * a.out_w;
        if (oy < t.y.lo || oy >= t.y.hi) {
          std::fill(out_row, out_row + a.out_w, S(0));
          continue;
        }
        const S* in_row = plane + (oy * a.stride_h + t.y_offset) * a.w + t.x.lo * a.stride_w + t.x_offset;
        std::fill(out_row, out_row + t.x.lo, S(0));
        gather_run(out_row + t.x.lo, in_row, t.x.hi - t.x.lo, a.stride_w);
        std::fill(out_row + t.x.hi, out_row + a.out_w, S(0));
      }
    }
  });
}

// image (c_in, h, w) += col2im(col), the adjoint of im2col; zeroes col's
// entries that lie in the padding (scratch the caller has used).
template <typename S>
void col2im_add(const ConvArgs& a, S* col, S* image) {
  const int64_t ohw = a.out_h * a.out_w;
  const bool flat = is_flat(a);
  for_each_tap_row(a, [&](const TapRow& t) {
    if (t.y.empty() || t.x.empty()) return;
    S* in = col + t.row * ohw;
    S* plane = image + t.c * a.h * a.w;
    if (flat) {
      // Padding columns add 0 to the pixels the run wraps them onto.
      const int64_t first = t.y.lo * a.w + t.x.lo, last = (t.y.hi - 1) * a.w + t.x.hi;
      zero_padding_columns(in, a.w, t.y.lo, t.y.hi, t.x);
      scatter_add_run(plane + first + t.y_offset * a.w + t.x_offset, in + first, last - first, 1);
      return;
    }
    for (int64_t oy = t.y.lo; oy < t.y.hi; ++oy) {
      scatter_add_run(plane + (oy * a.stride_h + t.y_offset) * a.w + t.x.lo * a.stride_w + t.x_offset,
                      in + oy * a.out_w + t.x.lo, t.x.hi - t.x.lo, a.stride_w);
    }
  });
}

// Calls f(b0, b1, col) over ranges of images: shared out over threads when
// there are enough images, else all images on the calling thread (whose
// GEMMs then split). col is a buffer of col_size elements for the range.
template <typename S, typename F>
void over_images(const ConvArgs& a, size_t col_size, F&& f) {
  const int64_t per_image = a.c_out * a.out_h * a.out_w * (a.c_in / a.groups) * a.kernel_h * a.kernel_w;
  const bool share = a.n >= get_num_threads();
  parallel_for(0, a.n, share ? kCpuGrain * 8 / std::max<int64_t>(per_image, 1) + 1 : a.n, [&](int64_t b0, int64_t b1) {
    const Scratch<S> col(col_size);  // im2col writes every element
    f(b0, b1, col.get());
  });
}

template <typename S>
DType dtype_of_compute() {
  return std::is_same_v<S, double> ? DType::Float64 : DType::Float32;
}

// Sizes shared by the three kernels.
struct Dims {
  int64_t ohw, hw, k, cin_g, cout_g;
  explicit Dims(const ConvArgs& a)
      : ohw(a.out_h * a.out_w),
        hw(a.h * a.w),
        k(a.c_in / a.groups * a.kernel_h * a.kernel_w),
        cin_g(a.c_in / a.groups),
        cout_g(a.c_out / a.groups) {}
};

template <typename T>
void forward(const ConvArgs& a) {
  using S = compute_t<T>;
  const Dims d(a);
  Input<S, T> x(a.input, input_dims(a)), w(a.weight, weight_dims(a));
  Output<S, T> y(a.output, output_dims(a));
  const bool pointwise = is_pointwise(a);
  over_images<S>(a, pointwise ? 0 : size_t(a.groups * d.k * d.ohw), [&](int64_t b0, int64_t b1, S* col) {
    for (int64_t b = b0; b < b1; ++b) {
      const S* image = x.get() + b * a.c_in * d.hw;
      if (!pointwise) im2col(a, image, col);
      GemmArgs g;
      g.dtype = dtype_of_compute<S>();
      g.m = d.cout_g;
      g.n = d.ohw;
      g.k = d.k;
      g.batch = a.groups;
      g.a = w.get();
      g.lda = d.k;
      g.stride_a = d.cout_g * d.k;
      g.b = pointwise ? image : col;
      g.ldb = d.ohw;
      g.stride_b = d.k * d.ohw;
      g.c = y.get() + b * a.c_out * d.ohw;
      g.ldc = d.ohw;
      g.stride_c = d.cout_g * d.ohw;
      gemm_stub(DeviceType::CPU)(g);
    }
  });
  if (a.bias) {
    Input<S, T> bias(a.bias, bias_dims(a));
    parallel_for(0, a.n * a.c_out, kCpuGrain / std::max<int64_t>(d.ohw, 1) + 1, [&](int64_t p0, int64_t p1) {
      for (int64_t plane = p0; plane < p1; ++plane) {
        S* out = y.get() + plane * d.ohw;
        for (int64_t i = 0; i < d.ohw; ++i) out[i] += bias.get()[plane % a.c_out];
      }
    });
  }
  y.store();
}

template <typename T>
void backward_input(const ConvArgs& a) {
  using S = compute_t<T>;
  const Dims d(a);
  Input<S, T> gy(a.grad_output, output_dims(a)), w(a.weight, weight_dims(a));
  Output<S, T> gx(a.grad_input, input_dims(a));
  const bool pointwise = is_pointwise(a);
  over_images<S>(a, pointwise ? 0 : size_t(a.groups * d.k * d.ohw), [&](int64_t b0, int64_t b1, S* col) {
    for (int64_t b = b0; b < b1; ++b) {
      S* image = gx.get() + b * a.c_in * d.hw;
      GemmArgs g;
      g.dtype = dtype_of_compute<S>();
      g.trans_a = true;
      g.m = d.k;
      g.n = d.ohw;
      g.k = d.cout_g;
      g.batch = a.groups;
      g.a = w.get();
      g.lda = d.k;
      g.stride_a = d.cout_g * d.k;
      g.b = gy.get() + b * a.c_out * d.ohw;
      g.ldb = d.ohw;
      g.stride_b = d.cout_g * d.ohw;
      g.c = pointwise ? image : col;
      g.ldc = d.ohw;
      g.stride_c = d.k * d.ohw;
      gemm_stub(DeviceType::CPU)(g);
      if (!pointwise) {
        std::fill(image, image + a.c_in * d.hw, S(0));
        col2im_add(a, col, image);
      }
    }
  });
  gx.store();
}

// Images [b0, b1) of the weight gradient summed into dw (set by the first
// image); col is an im2col buffer (unused when pointwise).
template <typename S>
void sum_weight_gradient(const ConvArgs& a, const S* x, const S* gy, int64_t b0, int64_t b1, S* col, S* dw) {
  const Dims d(a);
  const bool pointwise = is_pointwise(a);
  for (int64_t b = b0; b < b1; ++b) {
    const S* image = x + b * a.c_in * d.hw;
    if (!pointwise) im2col(a, image, col);
    GemmArgs g;
    g.dtype = dtype_of_compute<S>();
    g.trans_b = true;
    g.m = d.cout_g;
    g.n = d.k;
    g.k = d.ohw;
    g.batch = a.groups;
    g.beta = b == b0 ? 0.0 : 1.0;
    g.a = gy + b * a.c_out * d.ohw;
    g.lda = d.ohw;
    g.stride_a = d.cout_g * d.ohw;
    g.b = pointwise ? image : col;
    g.ldb = d.ohw;
    g.stride_b = d.k * d.ohw;
    g.c = dw;
    g.ldc = d.k;
    g.stride_c = d.cout_g * d.k;
    gemm_stub(DeviceType::CPU)(g);
  }
}

// The weight gradient into dw: the images in chunks (parallel_for's static
// split, but at most one chunk a thread, as each chunk's partial is added in
// afterwards; one a thread when there are at least as many images), each
// chunk summing its images into a partial of its own (the first chunk into
// dw itself) on the pool; then the partials added into dw in chunk order,
// split over dw's elements. One scratch block holds the chunks' im2col
// buffers and partials.
template <typename S>
void weight_gradient(const ConvArgs& a, const S* x, const S* gy, S* dw) {
  const Dims d(a);
  const int64_t w_size = weight_dims(a).numel();
  const int64_t col_size = is_pointwise(a) ? 0 : a.groups * d.k * d.ohw;
  const int64_t per_image = w_size * d.ohw;
  const int64_t chunks = a.n >= get_num_threads() && !in_parallel_region()
                             ? parallel_chunk_count(a.n, kCpuGrain * 8 / std::max<int64_t>(per_image, 1) + 1,
                                                    /*chunks_per_thread=*/1)
                             : 1;
  Scratch<S> scratch(size_t(chunks * col_size + (chunks - 1) * w_size));
  S* const partials = scratch.get() + chunks * col_size;  // chunk c >= 1 at (c - 1) * w_size
  auto partial = [&](int64_t c) { return c == 0 ? dw : partials + (c - 1) * w_size; };
  auto chunk = [&](int64_t c) {
    sum_weight_gradient(a, x, gy, parallel_chunk_start(0, a.n, chunks, c), parallel_chunk_start(0, a.n, chunks, c + 1),
                        scratch.get() + c * col_size, partial(c));
  };
  if (chunks == 1) {
    chunk(0);  // on the calling thread, whose GEMMs split over the threads
    return;
  }
  detail::run_chunks(chunks, chunk);
  parallel_for(0, w_size, kCpuGrain / (chunks - 1) + 1, [&](int64_t i0, int64_t i1) {
    for (int64_t c = 1; c < chunks; ++c) {
      const S* p = partial(c);
      for (int64_t i = i0; i < i1; ++i) dw[i] += p[i];
    }
  });
}

template <typename T>
void backward_weight(const ConvArgs& a) {
  using S = compute_t<T>;
  const Dims d(a);
  Input<S, T> gy(a.grad_output, output_dims(a));
  if (a.grad_weight) {
    Input<S, T> x(a.input, input_dims(a));
    Output<S, T> gw(a.grad_weight, weight_dims(a));
    weight_gradient(a, x.get(), gy.get(), gw.get());
    gw.store();
  }
  if (a.grad_bias) {
    Output<S, T> gb(a.grad_bias, bias_dims(a));
    parallel_for(0, a.c_out, kCpuGrain / std::max<int64_t>(a.n * d.ohw, 1) + 1, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o) {
        S total = 0;
        for (int64_t b = 0; b < a.n; ++b) {
          const S* plane = gy.get() + (b * a.c_out + o) * d.ohw;
          for (int64_t i = 0; i < d.ohw; ++i) total += plane[i];
        }
        gb.get()[o] = total;
      }
    });
    gb.store();
  }
}

template <int Which>
void conv_kernel(const ConvArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "conv2d", [&]<typename T>() {
    if constexpr (Which == 0) forward<T>(a);
    else if constexpr (Which == 1) backward_input<T>(a);
    else backward_weight<T>(a);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(conv2d_forward_stub, DeviceType::CPU, conv_kernel<0>);
EMBER_REGISTER_KERNEL(conv2d_backward_input_stub, DeviceType::CPU, conv_kernel<1>);
EMBER_REGISTER_KERNEL(conv2d_backward_weight_stub, DeviceType::CPU, conv_kernel<2>);

}  // namespace ember::cpu
