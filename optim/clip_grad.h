// clip_grad_norm_: torch.nn.utils.clip_grad_norm_.
//
// Contract: the total norm is the norm_type-norm of all defined gradients of
// `params` taken together (as if concatenated); norm_type is a positive
// number or infinity (max |g|). Every gradient is then multiplied by
// min(1, max_norm / (total_norm + 1e-6)). Gradients of one dtype are read by
// one fused multi-tensor reduction and scaled by one fused multi-tensor
// kernel (core/ops/optimizer_kernels.h); the factor stays on the device, so
// nothing waits for the GPU unless error_if_nonfinite asks for the norm on
// the host. All gradients must be on one device.
//
// Returns the total norm as a 0-dim tensor on the gradients' device, float32
// (float64 when any gradient is float64); 0 on the CPU when no parameter has
// a gradient. With error_if_nonfinite, a NaN or infinite total norm is an
// ember::Error and no gradient is changed.
#pragma once

#include "core/tensor.h"

namespace ember::optim {

Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace ember::optim
