// The CUDA GEMM for int32 and int64, which cuBLAS lacks. Internal to
// ember/kernels/cuda; honours the whole contract of ember/core/ops/gemm_kernels.h (any
// transpose flags, leading dims, batch strides including 0, alpha, beta).
#pragma once

#include "ember/core/ops/gemm_kernels.h"

namespace ember::cuda {

// Enqueues the GEMM on the current stream of args.device; int32 or int64 only.
void integer_gemm(const GemmArgs& args);

}  // namespace ember::cuda
