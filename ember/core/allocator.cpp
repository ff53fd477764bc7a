// The registry of allocators (the CPU's is ember/core/cpu_allocator.cpp) and the
// allocation-poisoning switch.
#include "ember/core/allocator.h"

#include <atomic>

#include "ember/core/cpu_allocator.h"
#include "ember/core/error.h"

namespace ember {
namespace {

std::atomic<bool> poisoning{false};

Allocator*& slot(DeviceType type) {
  static Allocator* table[kNumDeviceTypes] = {nullptr, nullptr};
  return table[int(type)];
}

}  // namespace

Allocator& allocator_for(DeviceType type) {
  if (type == DeviceType::CPU) return cpu_allocator();
  Allocator* a = slot(type);
  EMBER_CHECK(a != nullptr, "no allocator for device type "
                                << Device(type, 0).str()
                                << ": this ember was built without CUDA (EMBER_WITH_CUDA=OFF)");
  return *a;
}

void register_allocator(DeviceType type, Allocator* allocator) { slot(type) = allocator; }

void set_allocation_poisoning(bool on) { poisoning.store(on, std::memory_order_relaxed); }
bool allocation_poisoning() { return poisoning.load(std::memory_order_relaxed); }

}  // namespace ember
