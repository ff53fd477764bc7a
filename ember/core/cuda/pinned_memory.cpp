// The pinned host memory cache: power-of-two size classes, each block
// reused once the events of the copies that used it have completed.
#include "ember/core/cuda/pinned_memory.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/event_pool.h"
#include "ember/core/error.h"

namespace ember::cuda {
namespace {

constexpr size_t kMinPinnedSize = 4096;

struct PinnedBlock {
  char* ptr = nullptr;
  size_t size = 0;
  bool allocated = false;
  std::vector<std::pair<int, cudaEvent_t>> uses;  // (device, event) of queued work using it
};

class PinnedCache {
 public:
  void* allocate(size_t nbytes) {
    const size_t size = std::bit_ceil(std::max(nbytes, kMinPinnedSize));
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<PinnedBlock*>& list = free_[std::countr_zero(size)];
    for (size_t i = 0; i < list.size(); ++i) {
      PinnedBlock* block = list[i];
      if (!uses_done(block)) continue;
      list.erase(list.begin() + std::ptrdiff_t(i));
      block->allocated = true;
      return block->ptr;
    }
    void* ptr = nullptr;
    const cudaError_t err = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      throw OutOfMemoryError("pinned_empty: cannot pin " + std::to_string(size) +
                             " bytes of host memory (cudaHostAlloc failed); lower the batch size or the number of "
                             "pinned buffers in flight, or raise the locked-memory limit (ulimit -l)");
    }
    if (err != cudaSuccess) detail::throw_cuda_error(err, "cudaHostAlloc", __FILE__, __LINE__);
    auto* block = new PinnedBlock;
    block->ptr = static_cast<char*>(ptr);
    block->size = size;
    block->allocated = true;
    blocks_.emplace(block->ptr, block);
    return ptr;
  }

  void free(void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(static_cast<char*>(ptr));
    if (it == blocks_.end()) return;  // not reachable through a DataPtr of this cache
    PinnedBlock* block = it->second;
    block->allocated = false;
    free_[std::countr_zero(block->size)].push_back(block);
  }

  bool is_pinned(const void* ptr) {
    std::lock_guard<std::mutex> lock(mutex_);
    return live_block_holding(ptr) != nullptr;
  }

  bool record_use(const void* ptr, Stream stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    PinnedBlock* block = live_block_holding(ptr);
    if (block == nullptr) return false;
    DeviceGuard guard(stream.device());
    cudaEvent_t event = detail::acquire_event(stream.device());
    EMBER_CUDA_CHECK(cudaEventRecord(event, stream.handle()));
    block->uses.emplace_back(stream.device(), event);
    return true;
  }

 private:
  PinnedBlock* live_block_holding(const void* ptr) {
    const char* p = static_cast<const char*>(ptr);
    auto it = blocks_.upper_bound(const_cast<char*>(p));
    if (it == blocks_.begin()) return nullptr;
    PinnedBlock* block = std::prev(it)->second;
    return block->allocated && p < block->ptr + block->size ? block : nullptr;
  }

  // Drops the completed uses; true when none is left.
  bool uses_done(PinnedBlock* block) {
    auto& uses = block->uses;
    for (size_t i = 0; i < uses.size();) {
      const cudaError_t err = cudaEventQuery(uses[i].second);
      if (err == cudaErrorNotReady) {
        cudaGetLastError();
        ++i;
        continue;
      }
      if (err != cudaSuccess) detail::throw_cuda_error(err, "cudaEventQuery", __FILE__, __LINE__);
      detail::release_event(uses[i].first, uses[i].second);
      uses.erase(uses.begin() + std::ptrdiff_t(i));
    }
    return uses.empty();
  }

  std::mutex mutex_;
  std::map<char*, PinnedBlock*> blocks_;  // every block by address, live or free
  std::vector<PinnedBlock*> free_[64];    // free blocks by log2 of their size
};

// Never destroyed: pinned tensors freed during static destruction still
// find it.
PinnedCache& pinned_cache() {
  static PinnedCache* const cache = new PinnedCache;
  return *cache;
}

void free_pinned(void* ptr) { pinned_cache().free(ptr); }

void free_nothing(void*) {}

class PinnedAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, Device device) override {
    EMBER_CHECK(device.is_cpu(),
                "pinned_allocator: pinned memory is host memory; allocate it for kCPU, not " << device);
    EMBER_CHECK(is_available(), "pinned memory needs a CUDA device, but none is visible (CUDA_VISIBLE_DEVICES="
                                    << visible_devices_env() << "); use ordinary CPU tensors on this machine");
    if (nbytes == 0) return DataPtr(nullptr, &free_nothing);
    return DataPtr(pinned_cache().allocate(nbytes), &free_pinned);
  }
};

}  // namespace

Allocator& pinned_allocator() {
  static PinnedAllocator* const allocator = new PinnedAllocator;
  return *allocator;
}

Tensor pinned_empty(const Shape& shape, DType dtype) {
  Shape strides(shape.size());  // contiguous, as empty() makes them
  int64_t numel = 1, stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    EMBER_CHECK(shape[i] >= 0, "pinned_empty: negative size in shape " << shape_str(shape));
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
    numel *= shape[i];
  }
  const size_t nbytes = size_t(numel) * dtype_size(dtype);
  auto storage = std::make_shared<Storage>(pinned_allocator().allocate(nbytes, kCPU), nbytes, kCPU);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, std::move(strides), 0, dtype));
}

bool is_pinned(const void* ptr) { return pinned_cache().is_pinned(ptr); }

bool record_host_use(const void* ptr, Stream stream) { return pinned_cache().record_use(ptr, stream); }

}  // namespace ember::cuda
