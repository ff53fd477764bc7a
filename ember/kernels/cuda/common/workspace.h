// Scratch device memory that a launch sequence needs for its intermediate
// results: per-block partial sums, a library's workspace. Host code; includes
// no CUDA header.
//
// Contract:
// - Workspace(bytes, device) takes `bytes` from the caching allocator
//   (ember/core/cuda/caching_allocator.h) on the current stream of `device`, or
//   nothing for 0 bytes (data() is null). The memory is uninitialized
//   (poisoned while allocation poisoning is on) and belongs to that stream.
// - Destroying the Workspace gives the memory back to the allocator. Kernels
//   queued on the same stream that still use it are safe (the allocator
//   reuses memory in stream order), so a launcher may let its workspace go
//   out of scope right after its launches. Another stream that uses it must
//   be recorded on the allocator first, as for any tensor.
// - An exhausted device is an OutOfMemoryError, as for a tensor.
#pragma once

#include <cstddef>
#include <cstdint>

#include "ember/core/allocator.h"

namespace ember::cuda {

class Workspace {
 public:
  Workspace() = default;  // none
  Workspace(size_t bytes, int device);

  void* data() const { return memory_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data());
  }
  size_t bytes() const { return bytes_; }

 private:
  DataPtr memory_{nullptr, [](void*) {}};
  size_t bytes_ = 0;
};

// Room for `count` values of T.
template <typename T>
Workspace workspace_for(int64_t count, int device) {
  return Workspace(size_t(count) * sizeof(T), device);
}

}  // namespace ember::cuda
