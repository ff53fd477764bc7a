// CUDA softmax_stub kernel (contract in ember/core/ops/softmax_kernels.h): guards
// the device and sends each kind to the forward or backward launchers of
// ember/kernels/cuda/softmax_forward.cu and softmax_backward.cu; chooses their path
// (which kernel takes which shape: ember/kernels/cuda/softmax_common.cuh; forcing
// one: ember/kernels/cuda/softmax_path.h).
#include <atomic>

#include "ember/core/cuda/device.h"
#include "ember/core/ops/softmax_kernels.h"
#include "ember/kernels/cuda/softmax_common.cuh"
#include "ember/kernels/cuda/softmax_path.h"

namespace ember::cuda {
namespace {

std::atomic<SoftmaxPath> forced_path{SoftmaxPath::Auto};

// Why `path` cannot take the call, or null when it can.
const char* cannot_take(SoftmaxPath path, const SoftmaxArgs& a, const SoftmaxShape& s) {
  const bool rows = a.inner == 1;
  switch (path) {
    case SoftmaxPath::Auto:
    case SoftmaxPath::Strided: return nullptr;
    case SoftmaxPath::Warp:
      if (!rows) return "it takes inner == 1 only";
      return a.dim <= kSoftmaxWarpMaxDim ? nullptr : "it takes rows of at most 1024 elements";
    case SoftmaxPath::Register:
      if (s.backward) return "it is a forward kernel";
      if (!rows || !s.aligned || !s.whole_vectors) {
        return "it takes inner == 1, 16-byte aligned operands and rows of whole 16-byte vectors only";
      }
      return a.dim <= s.register_max_dim ? nullptr : "it takes rows of at most 2048 16-byte vectors";
    case SoftmaxPath::Cached:
      if (!rows || !s.aligned) return "it takes inner == 1 and 16-byte aligned operands only";
      return row_cache_fits(s.cache_bytes, a.device) ? nullptr : "the row does not fit the device's shared memory";
    case SoftmaxPath::Online:
      return rows && s.aligned ? nullptr : "it takes inner == 1 and 16-byte aligned operands only";
  }
  return "it is not a softmax path";
}

SoftmaxPath choose(const SoftmaxArgs& a, const SoftmaxShape& s) {
  if (a.inner != 1) return SoftmaxPath::Strided;
  if (a.dim <= kSoftmaxWarpMaxDim) return SoftmaxPath::Warp;
  if (!cannot_take(SoftmaxPath::Register, a, s)) return SoftmaxPath::Register;
  if (!s.aligned) return SoftmaxPath::Strided;
  return row_cache_fits(s.cache_bytes, a.device) ? SoftmaxPath::Cached : SoftmaxPath::Online;
}

void softmax_cuda(SoftmaxKind kind, const SoftmaxArgs& a) {
  if (a.outer == 0 || a.dim == 0 || a.inner == 0) return;
  DeviceGuard guard(a.device);
  switch (kind) {
    case SoftmaxKind::Softmax: return softmax_forward_cuda(a, false);
    case SoftmaxKind::LogSoftmax: return softmax_forward_cuda(a, true);
    case SoftmaxKind::SoftmaxBackward: return softmax_backward_cuda(a, false);
    case SoftmaxKind::LogSoftmaxBackward: return softmax_backward_cuda(a, true);
  }
  EMBER_FAIL("softmax: unknown kernel kind " << int(kind));
}

}  // namespace

const char* softmax_path_name(SoftmaxPath path) {
  switch (path) {
    case SoftmaxPath::Auto: return "auto";
    case SoftmaxPath::Warp: return "warp";
    case SoftmaxPath::Register: return "register";
    case SoftmaxPath::Cached: return "cached";
    case SoftmaxPath::Online: return "online";
    case SoftmaxPath::Strided: return "strided";
  }
  return "unknown";
}

SoftmaxPath force_softmax_path(SoftmaxPath path) { return forced_path.exchange(path); }
SoftmaxPath forced_softmax_path() { return forced_path.load(); }

SoftmaxPath softmax_path_for(const SoftmaxArgs& a, const SoftmaxShape& s) {
  const SoftmaxPath forced = forced_path.load(std::memory_order_relaxed);
  if (forced == SoftmaxPath::Auto) return choose(a, s);
  const char* why = cannot_take(forced, a, s);
  EMBER_CHECK(!why, (s.backward ? "softmax_backward" : "softmax")
                        << ": the forced CUDA path '" << softmax_path_name(forced) << "' cannot take [outer " << a.outer
                        << ", dim " << a.dim << ", inner " << a.inner << "] " << dtype_name(a.dtype)
                        << (s.aligned ? "" : " (operands not 16-byte aligned)") << ": " << why
                        << "; force another path or SoftmaxPath::Auto (kernels/cuda/softmax_path.h)");
  return forced;
}

EMBER_REGISTER_KERNEL(softmax_stub, DeviceType::CUDA, softmax_cuda);

}  // namespace ember::cuda
