// Turns cuDNN statuses into ember::Error messages, with cuDNN's own account
// of what went wrong.
#include "ember/core/cuda/cudnn_check.h"

#include <string>

#include "ember/core/cuda/kernel_image.h"
#include "ember/core/error.h"

namespace ember::cuda::detail {

void throw_cudnn_error(cudnnStatus_t status, const char* expr, const char* file, int line) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string message = std::string("cuDNN error ") + cudnnGetErrorString(status) + " in `" + expr + "`";
  if (detail[0] != '\0') message += ": " + std::string(detail);
  if (status == CUDNN_STATUS_NOT_SUPPORTED) {
    message +=
        ". cuDNN has no engine for this configuration (layout, dtype, alignment); fall back to another "
        "algorithm or make the inputs contiguous";
  }
  if (status == CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH) {
    message += ". ";
    message += current_device_description();
    message +=
        " lacks what this call needs; bfloat16 tensor-core math starts at compute capability 8.0 (Ampere): on "
        "older GPUs use float16 (autocast with float16) or float32";
  }
  ember::detail::throw_error(message + ".", file, line);
}

}  // namespace ember::cuda::detail
