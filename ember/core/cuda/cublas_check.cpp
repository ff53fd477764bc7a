// Turns cuBLAS statuses into ember::Error messages that say what to do.
#include "ember/core/cuda/cublas_check.h"

#include <string>

#include "ember/core/cuda/kernel_image.h"
#include "ember/core/error.h"

namespace ember::cuda::detail {

void throw_cublas_error(cublasStatus_t status, const char* expr, const char* file, int line) {
  std::string hint;
  switch (status) {
    case CUBLAS_STATUS_NOT_INITIALIZED:
    case CUBLAS_STATUS_ALLOC_FAILED:
      hint = " cuBLAS could not get the memory it needs: the GPU is probably full; lower the batch size.";
      break;
    case CUBLAS_STATUS_ARCH_MISMATCH:
    case CUBLAS_STATUS_NOT_SUPPORTED: {
      hint = " This GPU or dtype combination is not supported by this cuBLAS call on ";
      hint += current_device_description();
      hint +=
          ". bfloat16 tensor-core math starts at compute capability 8.0 (Ampere): on older GPUs use float16 "
          "(autocast with float16) or float32.";
      break;
    }
    case CUBLAS_STATUS_EXECUTION_FAILED:
      hint = " A GPU kernel failed; rerun with EMBER_LAUNCH_BLOCKING=1 to find the op.";
      break;
    default: break;
  }
  ember::detail::throw_error(std::string("cuBLAS error ") + cublasGetStatusName(status) + " (" +
                                 cublasGetStatusString(status) + ") in `" + expr + "`." + hint,
                             file, line);
}

}  // namespace ember::cuda::detail
