// The stub objects of the fused optimizer kernels (filled by kernels/).
#include "ember/core/ops/optimizer_kernels.h"

#include "ember/core/error.h"

namespace ember::optim {

KernelStub<SGDStepFn> sgd_step_stub("optim::SGD step");
KernelStub<AdamStepFn> adam_step_stub("optim::Adam step");
KernelStub<NormPartialsFn> norm_partials_stub("clip_grad_norm_ (norm)");
KernelStub<ScaleFn> scale_stub("clip_grad_norm_ (scale)");

bool check_fused_step(const FusedStepArgs& a, const char* op) {
  bool copies = false;
  for (int64_t t = 0; t < a.count; ++t) copies = copies || a.tensors[t].low_copy != nullptr;
  if (!copies) return false;
  EMBER_CHECK(a.dtype == DType::Float32 && (a.low_dtype == DType::Float16 || a.low_dtype == DType::BFloat16),
              op << ": low-precision copies are written by float32 steps into float16 or bfloat16, but the step is "
                 << dtype_name(a.dtype) << " and the copies " << dtype_name(a.low_dtype));
  return true;
}

int64_t count_chunks(const FusedTensor* tensors, int64_t count) {
  int64_t chunks = 0;
  for (int64_t t = 0; t < count; ++t) chunks += (tensors[t].numel + kOptimChunk - 1) / kOptimChunk;
  return chunks;
}

}  // namespace ember::optim
