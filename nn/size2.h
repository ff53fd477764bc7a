// Size2: a (height, width) pair for the NCHW layers' kernel sizes, strides,
// paddings and dilations. It converts from one integer (used for both
// dims, as PyTorch's `kernel_size=3`) or from two ({3, 5}), so a bare {3}
// can never mean {3, 0} as it would for a std::array.
#pragma once

#include <cstdint>
#include <string>

#include "core/ops.h"

namespace ember::nn {

struct Size2 {
  Size2(int64_t both) : h(both), w(both) {}
  Size2(int64_t h, int64_t w) : h(h), w(w) {}
  operator Int2() const { return {h, w}; }
  bool operator==(const Size2& o) const { return h == o.h && w == o.w; }
  std::string str() const { return "(" + std::to_string(h) + ", " + std::to_string(w) + ")"; }

  int64_t h;
  int64_t w;
};

}  // namespace ember::nn
