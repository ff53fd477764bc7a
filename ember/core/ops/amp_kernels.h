// Kernel signatures and stubs of mixed precision: for dynamic loss scaling
// (amp::GradScaler) the fused inf/NaN check and unscale of many gradients
// and the update of the loss scale, and for autocast the batched recast of
// the weight casts it keeps (ember/core/autocast_state.h). All run on their
// tensors' device and read and write only device memory, so a
// mixed-precision step needs no host synchronization.
//
// Contract (what every device's kernel may rely on and must do):
// - unscale_and_check: `args` as for the multi-tensor kernels
//   (ember/core/ops/optimizer_kernels.h): FusedTensor::param is a dense gradient
//   of args.dtype on args.device; tensors are split into kOptimChunk
//   chunks, a few launches for any number of tensors. For every element x,
//   *found_inf (one float32 in device memory) is set to 1 when x is inf or
//   NaN, and never cleared: the caller zeroes it first, so one flag
//   collects several calls (one per dtype of a device). When inv_scale is
//   not null (one float32 in device memory) x becomes x * inv_scale,
//   computed in the state dtype (float32 for float32 and the 16-bit types,
//   float64 for float64) and rounded to the dtype once. The check looks at
//   x before the multiply, as torch._amp_foreach_non_finite_check_and_unscale_.
// - update_scale: `state` points at one float32 scale, one int32 growth
//   tracker (as PyTorch's) and one int64 skipped-step counter in device memory, and at the
//   float32 found-inf flag (non-zero: the step saw an inf or NaN). The rule
//   is update_scale_rule() of ember/kernels/amp_math.h, shared by the CPU and
//   CUDA kernels. It also writes inv_scale (one float32) = 1.0f / the new
//   scale, in float32 as torch.reciprocal would, for the next step's
//   unscale, and resets found_inf to 0, so that the next step's checks can
//   collect into it without zeroing it first.
// - cast_many: `args` as for unscale_and_check, with args.dtype float16 or
//   bfloat16; for every FusedTensor f, f.param (numel elements of
//   args.dtype) receives f.grad (numel float32 elements) rounded to
//   args.dtype exactly as Tensor::to rounds (to nearest, ties to even): the
//   chunker's record carries the destination in param and the source in
//   grad.
#pragma once

#include <cstdint>

#include "ember/core/kernel_stub.h"
#include "ember/core/ops/optimizer_kernels.h"

namespace ember::amp {

struct ScaleState {
  int device = 0;              // CUDA device index (0 on the CPU)
  float* scale = nullptr;      // ()
  float* inv_scale = nullptr;  // (): 1 / scale, written after the update
  int32_t* growth_tracker = nullptr;
  int64_t* skipped = nullptr;
  float* found_inf = nullptr;  // read, then reset to 0
};

struct ScaleRule {
  double growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  double min_scale = 0, max_scale = 0;
};

using UnscaleAndCheckFn = void(const optim::MultiTensorArgs& args, const float* inv_scale, float* found_inf);
using UpdateScaleFn = void(const ScaleState& state, const ScaleRule& rule);
extern KernelStub<UnscaleAndCheckFn> unscale_and_check_stub;
extern KernelStub<UpdateScaleFn> update_scale_stub;
using CastManyFn = void(const optim::MultiTensorArgs& args);
extern KernelStub<CastManyFn> cast_many_stub;

}  // namespace ember::amp
