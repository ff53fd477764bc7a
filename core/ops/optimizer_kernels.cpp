// The stub objects of the fused optimizer kernels (filled by kernels/).
#include "core/ops/optimizer_kernels.h"

namespace ember::optim {

KernelStub<SGDStepFn> sgd_step_stub("optim::SGD step");
KernelStub<AdamStepFn> adam_step_stub("optim::Adam step");
KernelStub<NormPartialsFn> norm_partials_stub("clip_grad_norm_ (norm)");
KernelStub<ScaleFn> scale_stub("clip_grad_norm_ (scale)");

int64_t count_chunks(const FusedTensor* tensors, int64_t count) {
  int64_t chunks = 0;
  for (int64_t t = 0; t < count; ++t) chunks += (tensors[t].numel + kOptimChunk - 1) / kOptimChunk;
  return chunks;
}

}  // namespace ember::optim
