// Turns CUDA runtime errors into ember::Error messages that say what to do.
#include "ember/core/cuda/cuda_check.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "ember/core/cuda/graph.h"
#include "ember/core/cuda/kernel_image.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/error.h"

namespace ember::cuda::detail {
namespace {

// Errors after which the CUDA context is lost: every later call fails too.
bool is_sticky(cudaError_t err) {
  switch (err) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorAssert:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorLaunchTimeout: return true;
    default: return false;
  }
}

std::string advice(cudaError_t err) {
  if (is_sticky(err)) {
    std::string s = " The CUDA context is lost: restart the process.";
    if (!launch_blocking()) {
      s += " A kernel's error is reported by a later CUDA call than the kernel that caused it; rerun with "
           "EMBER_LAUNCH_BLOCKING=1 to find the op.";
    }
    return s;
  }
  switch (err) {
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorStubLibrary:
      return " No usable CUDA driver or GPU was found: run on a machine with an NVIDIA GPU and driver, check "
             "CUDA_VISIBLE_DEVICES, or keep tensors on the CPU.";
    case cudaErrorMemoryAllocation: return " Lower the batch size or use activation checkpointing.";
    case cudaErrorStreamCaptureUnsupported:
    case cudaErrorStreamCaptureInvalidated:
    case cudaErrorStreamCaptureImplicit:
    case cudaErrorCapturedEvent:
    case cudaErrorStreamCaptureWrongThread:
    case cudaErrorStreamCaptureIsolation:
    case cudaErrorStreamCaptureUnjoined:
      return " The call cannot be recorded in a CUDA graph (cuda::Graph::capture): run the work once before "
             "capturing, so that one-time setup (cuDNN's algorithm search, a library's first use) happens then, "
             "and keep calls that wait for the device out of the captured work.";
    case cudaErrorInvalidDeviceFunction:
    case cudaErrorNoKernelImageForDevice: {
      int device = 0;
      if (cudaGetDevice(&device) != cudaSuccess) cudaGetLastError();
      std::string s(" ");
      s += no_kernel_image_message_for(device);
      s += '.';
      return s;
    }
    default: return "";
  }
}

}  // namespace

void throw_cuda_error(cudaError_t err, const char* expr, const char* file, int line) {
  // A recoverable error also sits in the runtime's last-error slot; clear it
  // so the next EMBER_CUDA_CHECK_LAUNCH does not report it again.
  if (!is_sticky(err)) cudaGetLastError();
  std::string message =
      std::string("CUDA error ") + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ") in `" + expr + "`.";
  message += advice(err);
  ember::detail::throw_error(message, file, line);
}

bool launch_blocking() {
  static const bool on = [] {
    for (const char* name : {"EMBER_LAUNCH_BLOCKING", "CUDA_LAUNCH_BLOCKING"}) {
      const char* v = std::getenv(name);
      if (v != nullptr && std::strcmp(v, "1") == 0) return true;
    }
    return false;
  }();
  return on;
}

void check_launch(cudaError_t err, const char* file, int line) {
  if (err != cudaSuccess) throw_cuda_error(err, "kernel launch", file, line);
  if (is_capturing()) return;  // nothing runs until a replay, which synchronizes under launch blocking
  err = cudaStreamSynchronize(current_stream().handle());
  if (err != cudaSuccess)
    throw_cuda_error(err, "kernel execution (synchronized by EMBER_LAUNCH_BLOCKING=1)", file, line);
}

}  // namespace ember::cuda::detail
