// The argument checks masked_fill (ember/core/ops/masked_fill.cpp) and
// masked_fill_ (ember/core/ops/inplace.cpp) share, so both name the same faults.
#pragma once

#include "ember/core/tensor.h"

namespace ember::detail {

// Checks a masked_fill on x (op is "masked_fill" or "masked_fill_"): mask
// is a bool tensor on x's device, value a 0-dim tensor on x's device or the
// CPU. Returns value as a 0-dim tensor of x's dtype on x's device, not
// recorded for backward.
Tensor masked_fill_value(const char* op, const Tensor& x, const Tensor& mask, const Tensor& value);

// value as a 0-dim tensor of x's dtype on x's device; a value the dtype
// cannot hold (NaN or inf for an integer dtype, a finite value beyond its
// range) is an ember::Error, as in PyTorch.
Tensor masked_fill_scalar(const char* op, const Tensor& x, const Scalar& value);

}  // namespace ember::detail
