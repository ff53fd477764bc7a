// The loss-scale update of amp::GradScaler, shared by the CPU and CUDA
// kernels so that both follow the same rule (contract in
// ember/core/ops/amp_kernels.h). It is torch._amp_update_scale_ with ember's
// bounds on the scale:
//   found_inf != 0:  scale = max(scale * backoff_factor, min_scale);
//                    tracker = 0; skipped += 1
//   otherwise:       tracker += 1; when tracker >= growth_interval:
//                    grown = min(scale * growth_factor, max_scale), taken
//                    only when finite (the scale never overflows); tracker = 0
// and then inv_scale = 1.0f / scale and found_inf = 0.
// The products are computed in float32, as PyTorch computes them on its
// float32 scale tensor.
#pragma once

#include <cstdint>

#include "ember/core/half.h"
#include "ember/core/ops/amp_kernels.h"

namespace ember::amp_math {

// The new scale; updates the tracker and the skipped-step counter.
EMBER_HOST_DEVICE inline float next_scale(const amp::ScaleState& s, const amp::ScaleRule& r) {
  const float scale = *s.scale;
  if (*s.found_inf != 0.0f) {
    const float backed = scale * float(r.backoff_factor);
    const float floor = float(r.min_scale);
    *s.growth_tracker = 0;
    *s.skipped += 1;
    return backed < floor ? floor : backed;
  }
  const int32_t tracker = *s.growth_tracker + 1;
  if (tracker < r.growth_interval) {
    *s.growth_tracker = tracker;
    return scale;
  }
  float grown = scale * float(r.growth_factor);
  const float ceiling = float(r.max_scale);
  if (grown > ceiling) grown = ceiling;
  *s.growth_tracker = 0;
  // grown * 0 is 0 for a finite value, NaN for inf (no <cmath> on the device side needed).
  return grown * 0.0f == 0.0f ? grown : scale;
}

EMBER_HOST_DEVICE inline void update_scale_rule(const amp::ScaleState& s, const amp::ScaleRule& r) {
  const float scale = next_scale(s, r);
  *s.scale = scale;
  *s.inv_scale = 1.0f / scale;
  *s.found_inf = 0.0f;
}

}  // namespace ember::amp_math
