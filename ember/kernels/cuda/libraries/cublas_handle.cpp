// Per-(device, thread) cuBLAS/cublasLt handles, their pool and their
// per-stream workspaces (see ember/kernels/cuda/libraries/cublas_handle.h).
#include "ember/kernels/cuda/libraries/cublas_handle.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "ember/core/allocator.h"
#include "ember/core/cuda/cublas_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/cuda/stream.h"

namespace ember::cuda {
namespace {

// cuBLAS's recommendation: 32 MiB on Hopper and later, 4 MiB before.
size_t workspace_bytes(int device) { return properties(device).major >= 9 ? size_t(32) << 20 : size_t(4) << 20; }

struct Handles {
  cublasHandle_t blas = nullptr;
  cublasLtHandle_t lt = nullptr;
  size_t workspace_size = 0;
  // One workspace per stream the handle has run on: memory of the caching
  // allocator belongs to the stream it was allocated for.
  std::unordered_map<cudaStream_t, DataPtr> workspaces;
};

class HandlePool {
 public:
  Handles* acquire(int device) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      std::vector<Handles*>& free = free_[device];
      if (!free.empty()) {
        Handles* h = free.back();
        free.pop_back();
        return h;
      }
    }
    detail::check_not_capturing(device, "the first GEMM of a thread on a device",
                                "it makes the thread's cuBLAS handles, which allocate and wait for the device; run "
                                "the work once before capturing");
    auto h = std::make_unique<Handles>();
    EMBER_CUBLAS_CHECK(cublasCreate(&h->blas));
    EMBER_CUBLAS_CHECK(cublasSetMathMode(
        h->blas, cublasMath_t(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    EMBER_CUBLAS_CHECK(cublasLtCreate(&h->lt));
    h->workspace_size = workspace_bytes(device);
    return h.release();  // owned by the thread, then by the pool; never destroyed
  }

  void release(int device, Handles* h) {
    std::lock_guard<std::mutex> lock(mutex_);
    free_[device].push_back(h);
  }

 private:
  std::mutex mutex_;
  std::vector<Handles*> free_[kMaxDevices];
};

HandlePool& pool() {
  static HandlePool* const p = new HandlePool;  // never destroyed, see the header
  return *p;
}

struct ThreadHandles {
  Handles* per_device[kMaxDevices] = {};
  ~ThreadHandles() {
    for (int d = 0; d < kMaxDevices; ++d) {
      if (per_device[d] != nullptr) pool().release(d, per_device[d]);
    }
  }
};

thread_local ThreadHandles tls_handles;

Handles& thread_handles(int device) {
  Handles*& h = tls_handles.per_device[device];
  if (h == nullptr) [[unlikely]]
    h = pool().acquire(device);
  return *h;
}

void* workspace(Handles& h, int device, cudaStream_t stream) {
  auto it = h.workspaces.find(stream);
  if (it == h.workspaces.end()) [[unlikely]] {
    // Allocated for the device's current stream, which is `stream`.
    DataPtr memory = allocator_for(DeviceType::CUDA).allocate(h.workspace_size, cuda_device(device));
    it = h.workspaces.emplace(stream, std::move(memory)).first;
  }
  return it->second.get();
}

}  // namespace

cublasHandle_t blas_handle(int device) {
  Handles& h = thread_handles(device);
  cudaStream_t stream = current_stream(device).handle();
  void* ws = workspace(h, device, stream);
  EMBER_CUBLAS_CHECK(cublasSetStream(h.blas, stream));
  EMBER_CUBLAS_CHECK(cublasSetWorkspace(h.blas, ws, h.workspace_size));
  return h.blas;
}

LtContext lt_handle(int device) {
  Handles& h = thread_handles(device);
  return {h.lt, workspace(h, device, current_stream(device).handle()), h.workspace_size};
}

}  // namespace ember::cuda
