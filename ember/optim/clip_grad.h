// clip_grad_norm_ and clip_grad_value_: torch.nn.utils.clip_grad_norm_ and
// torch.nn.utils.clip_grad_value_.
//
// Contract: the total norm is the norm_type-norm of all defined gradients of
// `params` taken together (as if concatenated); norm_type is a positive
// number or infinity (max |g|). Every gradient is then multiplied by
// min(1, max_norm / (total_norm + 1e-6)). Gradients of one dtype are read by
// one fused multi-tensor reduction and scaled by one fused multi-tensor
// kernel (ember/core/ops/optimizer_kernels.h); the factor stays on the device, so
// nothing waits for the GPU (and a CUDA graph can capture the call) unless
// error_if_nonfinite asks for the norm on the host. All gradients must be on
// one device.
//
// Returns the total norm as a 0-dim tensor on the gradients' device, float32
// (float64 when any gradient is float64); 0 on the CPU when no parameter has
// a gradient. With error_if_nonfinite, a NaN or infinite total norm is an
// ember::Error and no gradient is changed.
//
// clip_grad_value_ clamps every defined gradient of `params`, in place, to
// [-clip_value, clip_value] (NaN stays NaN); parameters without a gradient
// are skipped. clip_value must be non-negative (a negative one is an
// ember::Error). Each gradient is clamped by one clamp and one copy_ into
// it, on its own device and in its own dtype: ember has no fused
// multi-tensor clamp, so foreach (PyTorch's choice between its per-tensor
// and fused paths) is accepted for PyTorch's signature and either value
// gives the same result by the same path.
#pragma once

#include <optional>

#include "ember/core/tensor.h"

namespace ember::optim {

Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

void clip_grad_value_(const TensorList& params, double clip_value, std::optional<bool> foreach = std::nullopt);

}  // namespace ember::optim
