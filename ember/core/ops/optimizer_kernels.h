// Kernel signatures and stubs of the fused multi-tensor optimizer steps, the
// multi-tensor norm (for clip_grad_norm_) and the multi-tensor scale.
//
// Contract (what every device's kernel may rely on and must do):
// - One call covers many tensors of one device and one dtype. Every pointer
//   is dense (contiguous) memory on that device; a FusedTensor's buffers all
//   have `numel` elements. Params and grads have `dtype`; optimizer state
//   has optim_state_dtype(dtype): float32 for the 16-bit float types, the
//   param dtype otherwise. Arithmetic is in that state dtype (float32 for
//   float32, float16 and bfloat16; float64 for float64), and each param is
//   rounded to its dtype once per step.
// - `step` (when not null) is the tensor's int64 step counter, in the same
//   memory as the params. The update uses s = *step + 1 and the kernel
//   leaves *step == s when it returns. On CUDA the update launches only
//   read the counters and a later launch (one per 448 tensors) advances
//   them, so no block races another on a counter.
// - `found_inf` (when not null) is one float in device memory: when it is
//   non-zero the call changes nothing (params, state and step counters stay
//   as they were). `inv_scale` (when not null) is one float in device
//   memory that every gradient is multiplied by before use (the unscale of
//   mixed-precision training, fused into the step). Both are read on the
//   device, so a step that uses them needs no host synchronization.
// - `low_copy` (when not null; only in a float32 step) is numel elements
//   of low_dtype (float16 or bfloat16) that the step leaves equal to the
//   updated param rounded to low_dtype, as Tensor::to rounds: autocast's
//   kept cast of the weight, rewritten in the same pass instead of by a
//   cast launch before the next forward. A skipped step (found_inf) leaves
//   it as it was, like the param.
// - Tensors are split into chunks of kOptimChunk elements; on CUDA a block
//   takes one chunk and a launch takes up to a few hundred chunks, so a step
//   over many tensors is a handful of launches, not one per tensor.
//
// The per-element formulas are those of torch.optim.SGD and
// torch.optim.Adam/AdamW (foreach=False); they live in one place,
// ember/kernels/optim_math.h, used by the CPU and CUDA kernels alike.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember::optim {

// 8192: a model of a few hundred thousand parameters already gives the GPU
// about 50 blocks, of a few million a few hundred (with 65536, a 2M-parameter
// MLP's SGD step ran on 33 blocks at 1.4 TB/s); a launch of a few
// hundred chunks still covers millions of elements.
inline constexpr int64_t kOptimChunk = 8192;

// The dtype optimizer state (momentum buffers, exp_avg, ...) is kept in.
inline DType optim_state_dtype(DType param) {
  return param == DType::Float16 || param == DType::BFloat16 ? DType::Float32 : param;
}

// Plain data: one parameter and its state.
struct FusedTensor {
  void* param = nullptr;       // numel elements of the param dtype
  const void* grad = nullptr;  // numel elements of the param dtype
  void* state[3] = {};         // state dtype; which slots are used depends on the optimizer
  int64_t* step = nullptr;     // one int64 step counter, or null
  int64_t numel = 0;
  void* low_copy = nullptr;  // numel elements of FusedStepArgs::low_dtype, or null
};

struct FusedStepArgs {
  int device = 0;                        // CUDA device index (0 on the CPU)
  DType dtype = DType::Float32;          // of params and grads
  const FusedTensor* tensors = nullptr;  // host array
  int64_t count = 0;
  const float* found_inf = nullptr;  // device memory; null: not used
  const float* inv_scale = nullptr;  // device memory; null: not used
  DType low_dtype = DType::Float16;  // of every low_copy (float16 or bfloat16)
};

// The checks each step kernel makes first (an ember::Error naming `op` when
// the arguments break the contract above: a low_copy outside a float32
// step, or a low_dtype other than float16 and bfloat16); returns whether
// some tensor of the step has a low_copy.
bool check_fused_step(const FusedStepArgs& args, const char* op);

// SGD: state[0] = momentum buffer (when momentum != 0; then step is set and
// a step count of 0 makes the buffer take the gradient itself).
struct SGDHyper {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// Adam/AdamW: state[0] = exp_avg, state[1] = exp_avg_sq, state[2] =
// max_exp_avg_sq (amsgrad only); step is always set.
struct AdamHyper {
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  bool amsgrad = false;
  bool decoupled_weight_decay = false;  // AdamW
};

using SGDStepFn = void(const FusedStepArgs& args, const SGDHyper& hyper);
using AdamStepFn = void(const FusedStepArgs& args, const AdamHyper& hyper);
extern KernelStub<SGDStepFn> sgd_step_stub;
extern KernelStub<AdamStepFn> adam_step_stub;

// Multi-tensor norm and scale over a list of dense tensors of one dtype and
// device (FusedTensor::param is the tensor; other fields unused).
// Norm writes, for chunk c of the list (tensor by tensor, kOptimChunk
// elements each, a tensor's last chunk possibly shorter; empty tensors have
// none), partials[c] = sum |x|^norm_type, or max |x| when norm_type is
// infinite (NaN propagates), in the state dtype.
// Scale multiplies every element by *scale (one value of the state dtype in
// device memory), computing in the state dtype.
struct MultiTensorArgs {
  int device = 0;
  DType dtype = DType::Float32;
  const FusedTensor* tensors = nullptr;
  int64_t count = 0;
};

// The number of chunks Norm writes for these tensors.
int64_t count_chunks(const FusedTensor* tensors, int64_t count);

using NormPartialsFn = void(const MultiTensorArgs& args, double norm_type, void* partials);
using ScaleFn = void(const MultiTensorArgs& args, const void* scale);
extern KernelStub<NormPartialsFn> norm_partials_stub;
extern KernelStub<ScaleFn> scale_stub;

}  // namespace ember::optim
