// Turns NCCL results into ember::Error messages that say what to do.
#include "ember/core/cuda/nccl_check.h"

#include <string>

#include "ember/core/error.h"

namespace ember::cuda::detail {

void throw_nccl_error(ncclResult_t result, const char* expr, const char* file, int line) {
  std::string message = std::string("NCCL error ") + ncclGetErrorString(result) + " in `" + expr + "`";
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && last[0] != '\0') message += ": " + std::string(last);
  message += ". Rerun with NCCL_DEBUG=INFO for NCCL's own log";
  if (result == ncclSystemError || result == ncclRemoteError) {
    message += "; check that every rank is alive and that the ranks can reach each other (NCCL_SOCKET_IFNAME)";
  }
  ember::detail::throw_error(message + ".", file, line);
}

}  // namespace ember::cuda::detail
