// The CUDA GEMM for int32 and int64, which cuBLAS lacks. Internal to
// kernels/cuda; honours the whole contract of core/ops/gemm_kernels.h (any
// transpose flags, leading dims, batch strides including 0, alpha, beta).
#pragma once

#include "core/ops/gemm_kernels.h"

namespace ember::cuda {

// Enqueues the GEMM on the current stream of args.device; int32 or int64 only.
void integer_gemm(const GemmArgs& args);

}  // namespace ember::cuda
