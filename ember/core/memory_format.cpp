// Stride rules of the memory formats; the contract is in ember/core/memory_format.h.
#include "ember/core/memory_format.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "ember/core/grad_mode.h"

namespace ember {

const char* memory_format_name(MemoryFormat format) {
  switch (format) {
    case MemoryFormat::Contiguous: return "contiguous";
    case MemoryFormat::ChannelsLast: return "channels_last";
    case MemoryFormat::Preserve: return "preserve";
  }
  return "?";
}

namespace {

// The dims of a 4-D shape from the innermost in memory outwards.
constexpr std::array<size_t, 4> kChannelsLastOrder{1, 3, 2, 0};

// Strides that lay the dims out densely, dims[0] innermost.
template <typename Dims>
Shape packed_strides(const Shape& sizes, const Dims& inner_to_outer) {
  Shape strides(sizes.size());
  int64_t s = 1;
  for (size_t d : inner_to_outer) {
    strides[d] = s;
    s *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

std::vector<size_t> row_major_inner_to_outer(size_t n) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = n - 1 - i;
  return order;
}

}  // namespace

Shape contiguous_strides(const Shape& sizes) { return packed_strides(sizes, row_major_inner_to_outer(sizes.size())); }

Shape format_strides(const char* op, const Shape& sizes, MemoryFormat format) {
  switch (format) {
    case MemoryFormat::Contiguous: return contiguous_strides(sizes);
    case MemoryFormat::ChannelsLast:
      EMBER_CHECK(sizes.size() == 4, op << ": the channels_last memory format is for 4-D (N, C, H, W) tensors, but "
                                           "the shape is "
                                        << shape_str(sizes));
      return packed_strides(sizes, kChannelsLastOrder);
    case MemoryFormat::Preserve: break;
  }
  EMBER_FAIL(op << ": memory format preserve names no layout of its own (shape " << shape_str(sizes) << ")");
}

bool strides_follow(const Shape& sizes, const Shape& strides, MemoryFormat format) {
  std::vector<size_t> order;
  if (format == MemoryFormat::ChannelsLast) {
    if (sizes.size() != 4) return false;
    order.assign(kChannelsLastOrder.begin(), kChannelsLastOrder.end());
  } else {
    EMBER_CHECK(format == MemoryFormat::Contiguous, "is_contiguous: memory format preserve names no layout to test");
    order = row_major_inner_to_outer(sizes.size());
  }
  // An empty tensor is contiguous (as in PyTorch), but channels-last only
  // when its strides are channels-last's.
  const bool empty = std::find(sizes.begin(), sizes.end(), 0) != sizes.end();
  if (empty && format == MemoryFormat::Contiguous) return true;
  int64_t expected = 1;
  for (size_t d : order) {
    if (sizes[d] == 1) continue;
    if (strides[d] != expected) return false;
    expected *= std::max<int64_t>(sizes[d], 1);
  }
  return true;
}

bool strides_like_channels_last(const Shape& sizes, const Shape& strides) {
  if (sizes.size() != 4 || strides[1] == 0) return false;
  int64_t min = 0;
  for (size_t d : kChannelsLastOrder) {
    if (sizes[d] == 0 || strides[d] < min) return false;
    // N last, with the extent of C, H, W beneath it: an (N, 1, 1, 1) tensor is
    // contiguous, not channels-last.
    if (d == 0 && min == strides[1]) return false;
    min = strides[d] * std::max<int64_t>(sizes[d], 1);
  }
  return true;
}

bool non_overlapping_and_dense(const Shape& sizes, const Shape& strides) {
  std::vector<size_t> dims;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return true;
    if (sizes[d] != 1) dims.push_back(d);
  }
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (strides[d] != expected) return false;
    expected *= sizes[d];
  }
  return true;
}

Shape preserved_strides(const Tensor& t) {
  if (non_overlapping_and_dense(t.sizes(), t.strides())) return t.strides();
  return format_strides("preserve", t.sizes(), t.suggest_memory_format());
}

bool same_layout(const Shape& sizes, const Shape& a, const Shape& b) {
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] != 1 && a[d] != b[d]) return false;
  }
  return true;
}

Tensor dense_block(const Tensor& t) { return t.is_non_overlapping_and_dense() ? t : t.contiguous(); }

Tensor copy_like(const Tensor& t, const Tensor& like) {
  NoGradGuard no_grad;
  Tensor out = empty_strided(like.sizes(), preserved_strides(like), t.dtype(), t.device());
  out.copy_(t);
  return out;
}

}  // namespace ember
