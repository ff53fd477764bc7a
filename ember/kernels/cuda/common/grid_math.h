// Host-side integer helpers for sizing CUDA launches.
#pragma once

#include <algorithm>
#include <climits>
#include <cstdint>

namespace ember::cuda {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The smallest power of two >= n (1 for n <= 1).
inline int64_t pow2_ceil(int64_t n) {
  int64_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

// A grid dimension for `blocks` blocks of work: at least 1, and capped at
// the x-dimension limit (kernels that take it loop over their grid).
inline unsigned grid_size(int64_t blocks) { return unsigned(std::clamp<int64_t>(blocks, 1, INT_MAX)); }

}  // namespace ember::cuda
