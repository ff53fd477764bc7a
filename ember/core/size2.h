// Size2: a (height, width) pair for the NCHW ops' and layers' kernel sizes,
// strides, paddings, dilations and output sizes, as PyTorch's `_size_2_t`.
// One integer means both dims (`kernel_size=3` is (3, 3)), two give
// (h, w), so a bare {1} is (1, 1) as PyTorch's padding=1, never (1, 0) as
// a std::array<int64_t, 2> would read it. It also takes an Int2, which
// already names both dims.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace ember {

using Int2 = std::array<int64_t, 2>;  // (height, width)

struct Size2 {
  Size2(int64_t both) : h(both), w(both) {}
  Size2(int64_t h, int64_t w) : h(h), w(w) {}
  Size2(const Int2& hw) : h(hw[0]), w(hw[1]) {}
  operator Int2() const { return {h, w}; }
  bool operator==(const Size2& o) const { return h == o.h && w == o.w; }
  std::string str() const { return "(" + std::to_string(h) + ", " + std::to_string(w) + ")"; }

  int64_t h;
  int64_t w;
};

// A Size2 that may be left out, as PyTorch's `stride=None` (then the op
// uses its documented default, e.g. the pools' kernel_size). {} and
// std::nullopt leave it out; 2, {2}, {2, 3}, a Size2 or a
// std::optional<Size2> set it. (std::optional<Size2> itself cannot be
// initialized from {2, 3}, hence this type.)
class OptionalSize2 {
 public:
  OptionalSize2() = default;
  OptionalSize2(std::nullopt_t) {}
  OptionalSize2(int64_t both) : value_(Size2(both)) {}
  OptionalSize2(int64_t h, int64_t w) : value_(Size2(h, w)) {}
  OptionalSize2(Size2 value) : value_(value) {}
  OptionalSize2(const Int2& hw) : value_(Size2(hw)) {}
  OptionalSize2(std::optional<Size2> value) : value_(value) {}

  bool has_value() const { return value_.has_value(); }
  Size2 value_or(Size2 fallback) const { return value_.value_or(fallback); }
  const std::optional<Size2>& get() const { return value_; }

 private:
  std::optional<Size2> value_;
};

}  // namespace ember
