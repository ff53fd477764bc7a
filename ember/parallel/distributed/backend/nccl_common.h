// What parallel/'s NCCL code shares (the process group and DataParallel's
// transport): the NCCL data type of an ember dtype, and ember's default
// NCCL environment. Internal: it includes nccl.h, so only the nccl_*.cpp
// files (built with CUDA) include it.
#pragma once

#include <nccl.h>
#include <stdlib.h>

#include "ember/core/dtype.h"
#include "ember/core/error.h"

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

// NVLink SHARP (NVLS) off unless the user set NCCL_NVLS_ENABLE: its
// multicast objects are not available on every machine (see the device
// notes); set before the first communicator is created. Sets nothing the
// user has set, so later calls change nothing.
inline void default_nccl_environment() { setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0); }

}  // namespace ember::parallel
