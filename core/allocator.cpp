// The registry of allocators and the CPU allocator (64-byte aligned, so that
// vectorized loops and Eigen maps never straddle a cache line at the start).
#include "core/allocator.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/error.h"

namespace ember {
namespace {

class CpuAllocator final : public Allocator {
 public:
  DataPtr allocate(size_t nbytes, Device) override {
    size_t rounded = (nbytes + 63) / 64 * 64;
    void* p = rounded == 0 ? nullptr : std::aligned_alloc(64, rounded);
    if (rounded != 0 && p == nullptr) {
      throw OutOfMemoryError("CPU allocator: cannot allocate " + std::to_string(nbytes) +
                             " bytes of host memory; lower the batch size or the model size");
    }
    if (p != nullptr && allocation_poisoning()) std::memset(p, 0xFF, rounded);
    return DataPtr(p, &std::free);
  }
};

std::atomic<bool> poisoning{false};

Allocator*& slot(DeviceType type) {
  static Allocator* table[kNumDeviceTypes] = {nullptr, nullptr};
  return table[int(type)];
}

}  // namespace

Allocator& allocator_for(DeviceType type) {
  if (type == DeviceType::CPU) {
    static CpuAllocator cpu;
    return cpu;
  }
  Allocator* a = slot(type);
  EMBER_CHECK(a != nullptr, "no allocator for device type " << Device(type, 0).str()
                                << ": this ember was built without CUDA (EMBER_WITH_CUDA=OFF)");
  return *a;
}

void register_allocator(DeviceType type, Allocator* allocator) { slot(type) = allocator; }

void set_allocation_poisoning(bool on) { poisoning.store(on, std::memory_order_relaxed); }
bool allocation_poisoning() { return poisoning.load(std::memory_order_relaxed); }

}  // namespace ember
