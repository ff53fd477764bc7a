// The NCCL data type of an ember dtype, shared by parallel/'s NCCL code
// (the process group and DataParallel's transport). Internal: it includes
// nccl.h, so only the nccl_*.cpp files (built with CUDA) include it.
#pragma once

#include <nccl.h>

#include "core/dtype.h"
#include "core/error.h"

namespace ember::parallel {

inline ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ncclFloat32;
    case DType::Float64: return ncclFloat64;
    case DType::Float16: return ncclFloat16;
    case DType::BFloat16: return ncclBfloat16;
    case DType::Int32: return ncclInt32;
    case DType::Int64: return ncclInt64;
    case DType::Bool: break;
  }
  EMBER_FAIL("nccl: dtype " << dtype_name(dtype) << " is not supported");
}

}  // namespace ember::parallel
