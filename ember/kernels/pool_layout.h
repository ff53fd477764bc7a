// Where the planes of pooling's arrays lie, for the CPU and CUDA kernels
// alike (contract in ember/core/ops/pool_kernels.h). An (N, C, H, W) array is
// N * C planes of `area` = H * W elements each:
//   NCHW           plane p starts at p * area; its elements step by 1
//   channels-last  (N, H, W, C) in memory: plane p = (n, c) starts at
//                  n * area * C + c; its elements step by C
// The element at position pos = y * W + x of plane p is at
// base(p, area) + pos * step(). I is the kernel's index type.
#pragma once

#include "ember/core/half.h"

namespace ember {

template <typename I>
struct PlaneLayout {
  I channels;
  bool channels_last;

  EMBER_HOST_DEVICE I base(I plane, I area) const {
    return channels_last ? plane / channels * area * channels + plane % channels : plane * area;
  }
  EMBER_HOST_DEVICE I step() const { return channels_last ? channels : I(1); }
  // The plane and position of the element at memory index i.
  EMBER_HOST_DEVICE void locate(I i, I area, I& plane, I& pos) const {
    if (channels_last) {
      const I rest = i / channels;
      pos = rest % area;
      plane = rest / area * channels + (i - rest * channels);
    } else {
      pos = i % area;
      plane = i / area;
    }
  }
};

}  // namespace ember
