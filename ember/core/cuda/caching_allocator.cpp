// The CUDA Allocator registered for DeviceType::CUDA, its per-device
// deleters, and the public statistics functions.
#include "ember/core/cuda/caching_allocator.h"

#include <array>
#include <utility>

#include "ember/core/allocator.h"
#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/device_cache.h"
#include "ember/core/cuda/kernel_image.h"
#include "ember/core/error.h"
#include "ember/core/storage.h"

namespace ember::cuda {
namespace {

using detail::device_cache;
using detail::DeviceCache;

// DataPtr's deleter is a plain function pointer, so each device gets its own:
// a free goes straight to its device's cache.
template <int D>
void free_on_device(void* ptr) {
  device_cache(D).free(ptr);
}

template <int... D>
constexpr std::array<void (*)(void*), sizeof...(D)> make_deleters(std::integer_sequence<int, D...>) {
  return {&free_on_device<D>...};
}

constexpr auto kDeleters = make_deleters(std::make_integer_sequence<int, kMaxDevices>{});

void free_nothing(void*) {}

class CudaCachingAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, Device device) override {
    const int d = device.index;
    check_device(d);
    if (nbytes == 0) return DataPtr(nullptr, &free_nothing);
    detail::check_kernel_image(d);  // a GPU this build has no kernels for fails here, with the fix
    cudaStream_t stream = current_stream(d).handle();
    void* p = device_cache(d).allocate(nbytes, stream);
    if (allocation_poisoning()) {
      DeviceGuard guard(d);
      EMBER_CUDA_CHECK(cudaMemsetAsync(p, 0xFF, nbytes, stream));
    }
    return DataPtr(p, kDeleters[d]);
  }
};

int resolve(int device) {
  if (device == -1) return current_device();
  check_device(device);
  return device;
}

[[maybe_unused]] const bool registered = [] {
  register_allocator(DeviceType::CUDA, new CudaCachingAllocator);  // never destroyed, see the header
  return true;
}();

}  // namespace

// One cache per visible device, made on first use and never destroyed.
DeviceCache& detail::device_cache(int device) {
  static DeviceCache** const caches = [] {
    auto** c = new DeviceCache*[kMaxDevices]();
    for (int d = 0; d < device_count(); ++d) c[d] = new DeviceCache(d);
    return c;
  }();
  return *caches[device];
}

MemoryStats memory_stats(int device) { return device_cache(resolve(device)).stats(); }
size_t memory_allocated(int device) { return memory_stats(device).allocated; }
size_t max_memory_allocated(int device) { return memory_stats(device).max_allocated; }
size_t memory_reserved(int device) { return memory_stats(device).reserved; }
size_t max_memory_reserved(int device) { return memory_stats(device).max_reserved; }
uint64_t num_device_allocs(int device) { return memory_stats(device).num_device_allocs; }
void reset_peak_memory_stats(int device) { device_cache(resolve(device)).reset_peak(); }
std::string memory_summary(int device) { return device_cache(resolve(device)).summary(); }

void empty_cache() {
  for (int d = 0; d < device_count(); ++d) device_cache(d).empty_cache();
}

void record_stream(const void* ptr, Stream stream) {
  check_device(stream.device());
  device_cache(stream.device()).record_stream(ptr, stream.handle());
}

void record_stream(const Storage& storage, Stream stream) {
  EMBER_CHECK(storage.device().is_cuda() && storage.device().index == stream.device(),
              "record_stream: the storage is on " << storage.device()
                                                  << " but the stream is on cuda:" << stream.device()
                                                  << "; a stream can only use memory of its own device");
  if (storage.data() != nullptr) record_stream(storage.data(), stream);
}

}  // namespace ember::cuda
