// The allocator interface and the per-device-type registry.
//
// Contract: allocate() returns memory aligned to at least 64 bytes or throws
// (OutOfMemoryError for exhausted memory). The returned DataPtr owns the
// memory; its deleter gives it back to the allocator that made it. The CPU
// allocator is always registered; the CUDA caching allocator registers
// itself when ember is built with CUDA.
#pragma once

#include <cstddef>
#include <memory>

#include "ember/core/device.h"

namespace ember {

using DataPtr = std::unique_ptr<void, void (*)(void*)>;

class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual DataPtr allocate(size_t nbytes, Device device) = 0;
};

// The allocator for a device type; an ember::Error that says how ember was
// built if there is none (e.g. CUDA in a CPU-only build).
Allocator& allocator_for(DeviceType type);
void register_allocator(DeviceType type, Allocator* allocator);

// Debugging aid for kernel tests: while on, every new allocation (CPU and
// CUDA) is filled with 0xFF bytes (NaN for floating types, -1 for integers)
// before it is handed out, so an element no kernel wrote shows up.
void set_allocation_poisoning(bool on);
bool allocation_poisoning();

}  // namespace ember
