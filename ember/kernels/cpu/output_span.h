// Which outputs of a strided window op read inside the input along one dim:
// conv2d's im2col/col2im (per tap) and max pooling (per window) take the
// outputs in the span on their fast paths and the rest at the edges.
//
// Contract: output o reads input o * stride + offset; inside(size, out_size,
// stride, offset) is the span [lo, hi) of outputs in [0, out_size) whose read
// lies in [0, size), with lo <= hi (empty when nothing does). stride >= 1.
#pragma once

#include <algorithm>
#include <cstdint>

namespace ember::cpu {

struct Span {
  int64_t lo, hi;
  bool empty() const { return lo >= hi; }
};

inline Span inside(int64_t size, int64_t out_size, int64_t stride, int64_t offset) {
  const int64_t lo = std::min(offset >= 0 ? 0 : (-offset + stride - 1) / stride, out_size);
  const int64_t last = size - 1 - offset;
  return {lo, std::clamp(last < 0 ? 0 : last / stride + 1, lo, out_size)};
}

}  // namespace ember::cpu
