// The stub objects of the loss-scaling kernels; ember/kernels/cpu/amp.cpp and
// ember/kernels/cuda/amp.cu register their implementations in them.
#include "ember/core/ops/amp_kernels.h"

namespace ember::amp {

KernelStub<UnscaleAndCheckFn> unscale_and_check_stub("amp::GradScaler (inf check and unscale)");
KernelStub<UpdateScaleFn> update_scale_stub("amp::GradScaler (scale update)");
KernelStub<CastManyFn> cast_many_stub("amp::autocast (batched weight casts)");

}  // namespace ember::amp
