// CPU pooling kernels (contract in ember/core/ops/pool_kernels.h). Forward visits
// each output's window (max pooling goes over many windows at once; MaxPlan
// says how); backward scatters each output's gradient onto its
// window in an acc_t buffer per plane, rounded once into grad_input. Planes
// are addressed through ember/kernels/pool_layout.h, NCHW or channels-last.
// Planes are independent, so they split over threads (ember/core/parallel_for.h)
// with results equal to one thread's.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/core/ops/pool_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"
#include "ember/kernels/cpu/output_span.h"
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

// Max pooling's value and argmax so far, updated with the value v at
// position pos: selects rather than branches (on real data the comparison is
// a coin toss that a branch predictor keeps losing), which also lets the
// compiler vectorize a loop of them. I is the position's type.
template <typename A, typename I>
inline void take_max(A v, I pos, A& best, I& best_at) {
  const bool take = (v > best) | std::isnan(v);
  best = take ? v : best;
  best_at = take ? pos : best_at;
}

// One tap of n windows: window i sees position origin[i] + offset of the
// plane (elements `step` apart in memory), or pos0 + i * stride without a
// table. Pointers that alias nothing, so that the loops vectorize.
template <typename T, typename A>
void max_tap(const T* __restrict plane, int64_t step, const int64_t* __restrict origin, int64_t offset, int64_t n,
             A* __restrict best, int64_t* __restrict best_at) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = origin[i] + offset;
    take_max(A(plane[pos * step]), pos, best[i], best_at[i]);
  }
}
template <typename T, typename A>
void max_tap(const T* __restrict plane, int64_t step, int64_t pos0, int64_t stride, int64_t n, A* __restrict best,
             int64_t* __restrict best_at) {
  for (int64_t i = 0; i < n; ++i) {
    const int64_t pos = pos0 + i * stride;
    take_max(A(plane[pos * step]), pos, best[i], best_at[i]);
  }
}

// The outputs along one dim whose whole window lies inside the input: those
// whose first tap (offset -padding) and last tap do.
Span interior(int64_t size, int64_t out_size, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation) {
  const Span first = inside(size, out_size, stride, -padding);
  const Span last = inside(size, out_size, stride, (kernel - 1) * dilation - padding);
  const int64_t lo = std::max(first.lo, last.lo);
  return {lo, std::max(lo, std::min(first.hi, last.hi))};
}

// How max pooling visits a plane, in one of three ways that all visit a
// window's taps in the same order (rows, then columns), so every output gets
// the same value and index whichever way runs:
//   pairs        windows two adjacent columns wide at stride 2 (MaxPool2d(2)
//                and its kind) in NCHW, planes under 2^31 elements: each
//                row's column pairs first (one contiguous loop over the
//                plane when w is even), then each window's rows over those
//                pairs. No gathers, which GCC's generic x86-64 tuning turns
//                into loads lane by lane.
//   whole_plane  no window clipped: tap by tap over every window of the
//                plane at once (origin[o] is the position y * w + x of output
//                o's first tap)
//   by rows      otherwise: the inside columns [cols.lo, cols.hi) of each row
//                tap by tap, the edge windows one at a time
// Taking the maximum of the pairs' maxima gives the tap-by-tap result: the
// running choice (a later value wins when greater or NaN) picks the last NaN
// if any, else the first maximum, of any run of taps, so runs may be taken
// apart and combined in order.
struct MaxPlan {
  Span cols;
  bool pairs;
  bool whole_plane;
  std::vector<int64_t> origin;  // out_h * out_w positions when whole_plane, else empty

  explicit MaxPlan(const PoolArgs& a)
      : cols(interior(a.w, a.out_w, a.kernel_w, a.stride_w, a.padding_w, a.dilation_w)) {
    pairs = !a.channels_last && a.kernel_w == 2 && a.stride_w == 2 && a.dilation_w == 1 && a.padding_w == 0 &&
            2 * a.out_w <= a.w && a.h * a.w <= std::numeric_limits<int32_t>::max();
    const Span rows = interior(a.h, a.out_h, a.kernel_h, a.stride_h, a.padding_h, a.dilation_h);
    whole_plane = !pairs && rows.lo == 0 && rows.hi == a.out_h && cols.lo == 0 && cols.hi == a.out_w;
    if (!whole_plane) return;
    origin.resize(size_t(a.out_h * a.out_w));
    for (int64_t o = 0; o < int64_t(origin.size()); ++o) {
      origin[size_t(o)] = (o / a.out_w * a.stride_h - a.padding_h) * a.w + o % a.out_w * a.stride_w - a.padding_w;
    }
  }
};

// dst[i * step] = Dst(src[i]) for i < n: a plane's n values into its
// layout (adjacent when step is 1, a loop of its own that vectorizes).
template <typename Dst, typename Src>
void store_plane(Dst* __restrict dst, int64_t step, const Src* __restrict src, int64_t n) {
  if (step == 1) {
    for (int64_t i = 0; i < n; ++i) dst[i] = Dst(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i * step] = Dst(src[i]);
  }
}

// One plane's maxima into best and best_at (out_h * out_w each) when no
// window is clipped.
template <typename T, typename A>
void max_plane_whole(const PoolArgs& a, const MaxPlan& plan, const T* plane, int64_t step, A* best, int64_t* best_at) {
  const int64_t n = a.out_h * a.out_w;
  std::fill(best, best + n, -std::numeric_limits<A>::infinity());
  std::copy(plan.origin.begin(), plan.origin.end(), best_at);
  for (int64_t p = 0; p < a.kernel_h; ++p) {
    for (int64_t q = 0; q < a.kernel_w; ++q) {
      max_tap(plane, step, plan.origin.data(), p * a.dilation_h * a.w + q * a.dilation_w, n, best, best_at);
    }
  }
}

// Max pooling's pairs path works on rows too short for the compiler's
// vector loops (7 and 14 outputs in MaxPool2d(2) of a 28x28 image), whose
// scalar remainders branch on every comparison. So it works in vectors of
// PairLanes<A>::kLanes lanes (GCC's vector extensions), one register of A
// wide: 32 bytes with AVX, else SSE's 16 (a vector wider than the registers
// is shuffled lane by lane). Positions are int32, as many lanes. A run of
// n >= kLanes ends with a vector that overlaps the one before (its lanes
// computed twice, to the same values); a shorter run of the buffers below
// reads and writes past its end, into the next row or the kLanes elements
// of slack that end every such buffer. Rows go in order and each vector
// overwrites its lanes, so what spills into the next row is replaced when
// that row is computed.
#ifdef __AVX__
constexpr int64_t kPairBytes = 32;
#else
constexpr int64_t kPairBytes = 16;
#endif

// The vectors of a pairs path over accumulation type A. Its helpers take
// and give vectors by reference: a vector passed by value changes the
// calling convention with the instruction set (GCC's -Wpsabi).
template <typename A>
struct PairLanes {
  static constexpr int64_t kLanes = kPairBytes / int64_t(sizeof(A));
  using Lane = std::conditional_t<sizeof(A) == 8, int64_t, int32_t>;  // a comparison's lane: all ones or zero
  typedef A Value __attribute__((vector_size(kPairBytes)));
  typedef Lane Mask __attribute__((vector_size(kPairBytes)));
  typedef int32_t Pos __attribute__((vector_size(kLanes * sizeof(int32_t))));

  template <typename V, typename E>
  static void load(V& v, const E* p) {
    std::memcpy(&v, p, sizeof v);
  }
  template <typename V, typename E>
  static void store(E* p, const V& v) {
    std::memcpy(p, &v, sizeof v);
  }
  // The even (left) and odd (right) lanes of lo then hi.
  static void split_pairs(const Value& lo, const Value& hi, Value& left, Value& right) {
    if constexpr (kLanes == 8) {
      left = __builtin_shufflevector(lo, hi, 0, 2, 4, 6, 8, 10, 12, 14);
      right = __builtin_shufflevector(lo, hi, 1, 3, 5, 7, 9, 11, 13, 15);
    } else if constexpr (kLanes == 4) {
      left = __builtin_shufflevector(lo, hi, 0, 2, 4, 6);
      right = __builtin_shufflevector(lo, hi, 1, 3, 5, 7);
    } else {
      static_assert(kLanes == 2);
      left = __builtin_shufflevector(lo, hi, 0, 2);
      right = __builtin_shufflevector(lo, hi, 1, 3);
    }
  }
  // best and best_at take v and v_at in the lanes where v wins: greater, or
  // NaN (take_max's rule).
  static void take(const Value& v, const Pos& v_at, Value& best, Pos& best_at) {
    const Mask wins = Mask(v > best) | Mask(v != v);
    best = wins ? v : best;
    best_at = __builtin_convertvector(wins, Pos) ? v_at : best_at;
  }
};

// Calls block(j) for j = 0, lanes, 2 lanes, ... over [0, n), the last at
// n - lanes where n allows; one block at 0 when n is shorter.
template <typename Block>
void for_blocks(int64_t n, int64_t lanes, Block block) {
  if (n < lanes) return block(int64_t(0));
  for (int64_t j = 0; j < n; j += lanes) block(std::min(j, n - lanes));
}

// The maxima of n column pairs src[2k], src[2k + 1] into value[k], with
// their positions pos0 + 2k (+1 for the right one) into at[k]. A run
// shorter than kLanes goes pair by pair: src has no slack.
template <typename T, typename A>
void max_pairs(const T* src, int32_t pos0, int64_t n, A* value, int32_t* at) {
  using L = PairLanes<A>;
  using Value = typename L::Value;
  using Pos = typename L::Pos;
  constexpr int64_t lanes = L::kLanes;
  if (n < lanes) {
    for (int32_t k = 0; k < int32_t(n); ++k) {
      value[k] = A(src[2 * k]);
      at[k] = pos0 + 2 * k;
      take_max(A(src[2 * k + 1]), pos0 + 2 * k + 1, value[k], at[k]);
    }
    return;
  }
  Pos lane_pos;
  for (int32_t l = 0; l < int32_t(lanes); ++l) lane_pos[l] = 2 * l;
  for_blocks(n, lanes, [&](int64_t k0) {
    Value lo, hi, left, right;
    if constexpr (std::is_same_v<T, A>) {
      L::load(lo, src + 2 * k0);
      L::load(hi, src + 2 * k0 + lanes);
    } else {
      A wide[2 * lanes];
      for (int64_t l = 0; l < 2 * lanes; ++l) wide[l] = A(src[2 * k0 + l]);
      L::load(lo, wide);
      L::load(hi, wide + lanes);
    }
    L::split_pairs(lo, hi, left, right);
    Pos left_at = int32_t(pos0 + 2 * k0) + lane_pos;
    const Pos right_at = left_at + 1;
    L::take(right, right_at, left, left_at);
    L::store(value + k0, left);
    L::store(at + k0, left_at);
  });
}

// One plane's maxima through column pairs (MaxPlan's pairs): pair_value and
// pair_at hold h * out_w pairs, row y's at [y * out_w, (y + 1) * out_w),
// and best and best_at out_h * out_w maxima; all four end in
// PairLanes<A>::kLanes elements of slack.
template <typename T, typename A>
void max_plane_pairs(const PoolArgs& a, const T* plane, A* pair_value, int32_t* pair_at, A* best, int32_t* best_at) {
  using L = PairLanes<A>;
  using Value = typename L::Value;
  using Pos = typename L::Pos;
  const int64_t ow = a.out_w;
  if (a.w == 2 * ow) {
    max_pairs(plane, 0, a.h * ow, pair_value, pair_at);
  } else {
    for (int64_t y = 0; y < a.h; ++y) {
      max_pairs(plane + y * a.w, int32_t(y * a.w), ow, pair_value + y * ow, pair_at + y * ow);
    }
  }
  for (int64_t oy = 0; oy < a.out_h; ++oy) {
    const int64_t ys = oy * a.stride_h - a.padding_h;
    const int64_t y0 = first_tap(ys, a.dilation_h), y1 = std::min(ys + (a.kernel_h - 1) * a.dilation_h + 1, a.h);
    for_blocks(ow, L::kLanes, [&](int64_t j0) {
      Value top = Value{} - std::numeric_limits<A>::infinity();
      Pos top_at = Pos{} - 1;
      if (y0 < y1) {
        L::load(top, pair_value + y0 * ow + j0);
        L::load(top_at, pair_at + y0 * ow + j0);
      }
      for (int64_t y = y0 + a.dilation_h; y < y1; y += a.dilation_h) {
        Value v;
        Pos v_at;
        L::load(v, pair_value + y * ow + j0);
        L::load(v_at, pair_at + y * ow + j0);
        L::take(v, v_at, top, top_at);
      }
      L::store(best + oy * ow + j0, top);
      L::store(best_at + oy * ow + j0, top_at);
    });
  }
}

// One plane's maxima row by row, when the input clips some windows.
template <typename T, typename A>
void max_plane_by_rows(const PoolArgs& a, const MaxPlan& plan, const T* plane, int64_t step, A* best,
                       int64_t* best_at) {
  const Span cols = plan.cols;
  for (int64_t oy = 0; oy < a.out_h; ++oy) {
    const int64_t ys = oy * a.stride_h - a.padding_h;
    const int64_t y0 = first_tap(ys, a.dilation_h), y1 = std::min(ys + (a.kernel_h - 1) * a.dilation_h + 1, a.h);
    A* best_row = best + oy * a.out_w;
    int64_t* at_row = best_at + oy * a.out_w;
    auto window = [&](int64_t ox) {
      const int64_t xs = ox * a.stride_w - a.padding_w;
      const int64_t x0 = first_tap(xs, a.dilation_w), x1 = std::min(xs + (a.kernel_w - 1) * a.dilation_w + 1, a.w);
      best_row[ox] = -std::numeric_limits<A>::infinity();
      at_row[ox] = y0 < y1 && x0 < x1 ? y0 * a.w + x0 : -1;
      for (int64_t y = y0; y < y1; y += a.dilation_h) {
        for (int64_t x = x0; x < x1; x += a.dilation_w) {
          take_max(A(plane[(y * a.w + x) * step]), y * a.w + x, best_row[ox], at_row[ox]);
        }
      }
    };
    for (int64_t ox = 0; ox < cols.lo; ++ox) window(ox);
    for (int64_t ox = cols.hi; ox < a.out_w; ++ox) window(ox);
    for (int64_t ox = cols.lo; ox < cols.hi; ++ox) {
      best_row[ox] = -std::numeric_limits<A>::infinity();
      at_row[ox] = y0 < y1 ? y0 * a.w + ox * a.stride_w - a.padding_w : -1;
    }
    const int64_t first_x = cols.lo * a.stride_w - a.padding_w;
    for (int64_t y = y0; y < y1; y += a.dilation_h) {
      for (int64_t q = 0; q < a.kernel_w; ++q) {
        max_tap(plane, step, y * a.w + first_x + q * a.dilation_w, a.stride_w, cols.hi - cols.lo, best_row + cols.lo,
                at_row + cols.lo);
      }
    }
  }
}

template <typename T>
void max_forward(const PoolArgs& a) {
  using A = acc_t<T>;
  const T* in = static_cast<const T*>(a.input);
  T* out = static_cast<T*>(a.output);
  const PlaneLayout<int64_t> layout = layout_of(a);
  const int64_t step = layout.step(), out_area = a.out_h * a.out_w;
  const MaxPlan plan(a);
  parallel_for(0, a.planes, kCpuGrain / std::max<int64_t>(a.h * a.w, 1) + 1, [&](int64_t pl0, int64_t pl1) {
    // The pairs path's buffers end in slack (MaxPlan's pairs).
    const int64_t slack = plan.pairs ? PairLanes<A>::kLanes : 0;
    std::vector<A> best(static_cast<size_t>(out_area + slack));
    std::vector<int64_t> best_at(plan.pairs ? 0 : static_cast<size_t>(out_area));
    const size_t pair_count = plan.pairs ? size_t(a.h * a.out_w + slack) : 0;
    std::vector<A> pair_value(pair_count);
    std::vector<int32_t> pair_at(pair_count), pair_best_at(plan.pairs ? size_t(out_area + slack) : 0);
    for (int64_t pl = pl0; pl < pl1; ++pl) {
      const T* plane = in + layout.base(pl, a.h * a.w);
      if (plan.pairs) max_plane_pairs(a, plane, pair_value.data(), pair_at.data(), best.data(), pair_best_at.data());
      else if (plan.whole_plane) max_plane_whole(a, plan, plane, step, best.data(), best_at.data());
      else max_plane_by_rows(a, plan, plane, step, best.data(), best_at.data());
      T* out_plane = out + layout.base(pl, out_area);
      int64_t* indices = a.indices + layout.base(pl, out_area);
      store_plane(out_plane, step, best.data(), out_area);
      if (plan.pairs) store_plane(indices, step, pair_best_at.data(), out_area);
      else store_plane(indices, step, best_at.data(), out_area);
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

// acc[indices[o]] += grad_output[o] for a plane's n outputs (elements
// `step` and `gy_step` apart); indices outside [0, area) add nothing.
template <typename T, typename A>
void max_scatter(const T* gy, int64_t gy_step, const int64_t* indices, int64_t step, int64_t n, int64_t area, A* acc) {
  for (int64_t o = 0; o < n; ++o) {
    const int64_t at = indices[o * step];
    if (at >= 0 && at < area) acc[at] += A(gy[o * gy_step]);
  }
}

template <typename T>
void backward(PoolOp op, const PoolArgs& a) {
  using A = acc_t<T>;
  const T* gy = static_cast<const T*>(a.grad_output);
  T* gx = static_cast<T*>(a.grad_input);
  const PlaneLayout<int64_t> layout = layout_of(a), gy_layout{a.channels, a.grad_output_channels_last};
  const int64_t step = layout.step(), gy_step = gy_layout.step(), area = a.h * a.w, out_area = a.out_h * a.out_w;
  parallel_for(0, a.planes, kCpuGrain / std::max<int64_t>(area, 1) + 1, [&](int64_t pl0, int64_t pl1) {
    std::vector<A> acc(static_cast<size_t>(area));
    for (int64_t pl = pl0; pl < pl1; ++pl) {
      std::fill(acc.begin(), acc.end(), A(0));
      const int64_t out_base = layout.base(pl, out_area), gy_base = gy_layout.base(pl, out_area);
      if (op == PoolOp::Max) {
        max_scatter(gy + gy_base, gy_step, a.indices + out_base, step, out_area, area, acc.data());
      } else {
        for (int64_t oy = 0; oy < a.out_h; ++oy) {
          for (int64_t ox = 0; ox < a.out_w; ++ox) {
            AvgWindow win = op == PoolOp::Avg ? avg_window(a, oy, ox) : adaptive_window(a, oy, ox);
            if (win.divisor == 0) continue;
            A share = A(gy[gy_base + (oy * a.out_w + ox) * gy_step]) / A(win.divisor);
            for (int64_t y = win.y0; y < win.y1; ++y) {
              for (int64_t x = win.x0; x < win.x1; ++x) acc[size_t(y * a.w + x)] += share;
            }
          }
        }
      }
      store_plane(gx + layout.base(pl, area), step, acc.data(), area);
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
