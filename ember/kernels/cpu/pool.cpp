// CPU pooling kernels (contract in ember/core/ops/pool_kernels.h). Forward visits
// each output's window; backward scatters each output's gradient onto its
// window in an acc_t buffer per plane, rounded once into grad_input. Planes
// are addressed through ember/kernels/pool_layout.h, NCHW or channels-last.
// Planes are independent, so they split over threads (ember/core/parallel_for.h)
// with results equal to one thread's.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ember/core/ops/pool_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"
#include "ember/kernels/pool_layout.h"

namespace ember::cpu {
namespace {

// The clipped window of an average pool and its divisor.
struct AvgWindow {
  int64_t y0, y1, x0, x1;
  int64_t divisor;
};

AvgWindow avg_window(const PoolArgs& a, int64_t oy, int64_t ox) {
  int64_t y0 = oy * a.stride_h - a.padding_h, x0 = ox * a.stride_w - a.padding_w;
  int64_t y1 = std::min(y0 + a.kernel_h, a.h + a.padding_h), x1 = std::min(x0 + a.kernel_w, a.w + a.padding_w);
  int64_t padded_area = (y1 - y0) * (x1 - x0);
  y0 = std::max<int64_t>(y0, 0);
  x0 = std::max<int64_t>(x0, 0);
  y1 = std::min(y1, a.h);
  x1 = std::min(x1, a.w);
  int64_t area = y1 > y0 && x1 > x0 ? (y1 - y0) * (x1 - x0) : 0;
  return {y0, y1, x0, x1, a.count_include_pad ? padded_area : area};
}

AvgWindow adaptive_window(const PoolArgs& a, int64_t oy, int64_t ox) {
  int64_t y0 = oy * a.h / a.out_h, y1 = ((oy + 1) * a.h + a.out_h - 1) / a.out_h;
  int64_t x0 = ox * a.w / a.out_w, x1 = ((ox + 1) * a.w + a.out_w - 1) / a.out_w;
  return {y0, y1, x0, x1, (y1 - y0) * (x1 - x0)};
}

PlaneLayout<int64_t> layout_of(const PoolArgs& a) { return {a.channels, a.channels_last}; }

// The first tap of a dilated window at or after position 0.
int64_t first_tap(int64_t start, int64_t dilation) {
  while (start < 0) start += dilation;
  return start;
}

template <typename T>
void max_forward(const PoolArgs& a) {
  using A = acc_t<T>;
  const T* in = static_cast<const T*>(a.input);
  T* out = static_cast<T*>(a.output);
  const PlaneLayout<int64_t> layout = layout_of(a);
  const int64_t step = layout.step();
  parallel_for(0, a.planes, kCpuGrain / std::max<int64_t>(a.h * a.w, 1) + 1, [&](int64_t pl0, int64_t pl1) {
    for (int64_t pl = pl0; pl < pl1; ++pl) {
      const T* plane = in + layout.base(pl, a.h * a.w);
      const int64_t out_base = layout.base(pl, a.out_h * a.out_w);
      for (int64_t oy = 0; oy < a.out_h; ++oy) {
        int64_t ys = oy * a.stride_h - a.padding_h;
        int64_t y0 = first_tap(ys, a.dilation_h), y1 = std::min(ys + (a.kernel_h - 1) * a.dilation_h + 1, a.h);
        for (int64_t ox = 0; ox < a.out_w; ++ox) {
          int64_t xs = ox * a.stride_w - a.padding_w;
          int64_t x0 = first_tap(xs, a.dilation_w), x1 = std::min(xs + (a.kernel_w - 1) * a.dilation_w + 1, a.w);
          A best = -std::numeric_limits<A>::infinity();
          int64_t best_at = y0 < y1 && x0 < x1 ? y0 * a.w + x0 : -1;
          for (int64_t y = y0; y < y1; y += a.dilation_h) {
            for (int64_t x = x0; x < x1; x += a.dilation_w) {
              A v = A(plane[(y * a.w + x) * step]);
              if (v > best || std::isnan(v)) {
                best = v;
                best_at = y * a.w + x;
              }
            }
          }
          int64_t o = out_base + (oy * a.out_w + ox) * step;
          out[o] = T(best);
          a.indices[o] = best_at;
        }
      }
    }
  });
}

template <typename T, typename Window>
void avg_forward(const PoolArgs& a, Window window) {
  using A = acc_t<T>;
  const T* in = static_cast<const T*>(a.input);
  T* out = static_cast<T*>(a.output);
  const PlaneLayout<int64_t> layout = layout_of(a);
  const int64_t step = layout.step();
  parallel_for(0, a.planes, kCpuGrain / std::max<int64_t>(a.h * a.w, 1) + 1, [&](int64_t pl0, int64_t pl1) {
    for (int64_t pl = pl0; pl < pl1; ++pl) {
      const T* plane = in + layout.base(pl, a.h * a.w);
      T* out_plane = out + layout.base(pl, a.out_h * a.out_w);
      for (int64_t oy = 0; oy < a.out_h; ++oy) {
        for (int64_t ox = 0; ox < a.out_w; ++ox) {
          AvgWindow win = window(a, oy, ox);
          A total = 0;
          for (int64_t y = win.y0; y < win.y1; ++y) {
            for (int64_t x = win.x0; x < win.x1; ++x) total += A(plane[(y * a.w + x) * step]);
          }
          out_plane[(oy * a.out_w + ox) * step] = T(win.divisor > 0 ? total / A(win.divisor) : A(0));
        }
      }
    }
  });
}

template <typename T>
void forward(PoolOp op, const PoolArgs& a) {
  switch (op) {
    case PoolOp::Max: return max_forward<T>(a);
    case PoolOp::Avg: return avg_forward<T>(a, avg_window);
    case PoolOp::AdaptiveAvg: return avg_forward<T>(a, adaptive_window);
  }
}

template <typename T>
void backward(PoolOp op, const PoolArgs& a) {
  using A = acc_t<T>;
  const T* gy = static_cast<const T*>(a.grad_output);
  T* gx = static_cast<T*>(a.grad_input);
  const PlaneLayout<int64_t> layout = layout_of(a), gy_layout{a.channels, a.grad_output_channels_last};
  const int64_t step = layout.step(), gy_step = gy_layout.step();
  parallel_for(0, a.planes, kCpuGrain / std::max<int64_t>(a.h * a.w, 1) + 1, [&](int64_t pl0, int64_t pl1) {
    std::vector<A> acc(size_t(a.h * a.w));
    for (int64_t pl = pl0; pl < pl1; ++pl) {
      std::fill(acc.begin(), acc.end(), A(0));
      const int64_t out_base = layout.base(pl, a.out_h * a.out_w), gy_base = gy_layout.base(pl, a.out_h * a.out_w);
      for (int64_t oy = 0; oy < a.out_h; ++oy) {
        for (int64_t ox = 0; ox < a.out_w; ++ox) {
          const int64_t o = out_base + (oy * a.out_w + ox) * step;
          A g = A(gy[gy_base + (oy * a.out_w + ox) * gy_step]);
          if (op == PoolOp::Max) {
            int64_t at = a.indices[o];
            if (at >= 0 && at < a.h * a.w) acc[size_t(at)] += g;
            continue;
          }
          AvgWindow win = op == PoolOp::Avg ? avg_window(a, oy, ox) : adaptive_window(a, oy, ox);
          if (win.divisor == 0) continue;
          A share = g / A(win.divisor);
          for (int64_t y = win.y0; y < win.y1; ++y) {
            for (int64_t x = win.x0; x < win.x1; ++x) acc[size_t(y * a.w + x)] += share;
          }
        }
      }
      T* plane = gx + layout.base(pl, a.h * a.w);
      for (int64_t i = 0; i < a.h * a.w; ++i) plane[i * step] = T(acc[size_t(i)]);
    }
  });
}

void forward_kernel(PoolOp op, const PoolArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "pool2d", [&]<typename T>() { forward<T>(op, a); });
}

void backward_kernel(PoolOp op, const PoolArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "pool2d_backward", [&]<typename T>() { backward<T>(op, a); });
}

}  // namespace

EMBER_REGISTER_KERNEL(pool2d_forward_stub, DeviceType::CPU, forward_kernel);
EMBER_REGISTER_KERNEL(pool2d_backward_stub, DeviceType::CPU, backward_kernel);

}  // namespace ember::cpu
