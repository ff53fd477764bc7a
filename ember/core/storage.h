// Storage: one allocation on one device, shared by every view of it.
//
// The version counter lives here because views share it with their base, as
// in PyTorch: an in-place write through any view bumps the counter that the
// autograd engine checks for every tensor saved for backward.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "ember/core/allocator.h"
#include "ember/core/device.h"
#include "ember/core/inference_mode.h"

namespace ember {

class Storage {
 public:
  Storage(size_t nbytes, Device device)
      : data_(allocator_for(device.type).allocate(nbytes, device)), nbytes_(nbytes), device_(device) {}
  // Wraps memory ember does not own (from_blob); the deleter may be a no-op.
  Storage(DataPtr data, size_t nbytes, Device device) : data_(std::move(data)), nbytes_(nbytes), device_(device) {}

  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_.get(); }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  uint32_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }
  // Allocated under InferenceMode (ember/core/inference_mode.h): every tensor on
  // it is an inference tensor.
  bool is_inference() const { return inference_; }

 private:
  DataPtr data_;
  size_t nbytes_;
  Device device_;
  std::atomic<uint32_t> version_{0};
  bool inference_ = InferenceMode::is_enabled();
};

}  // namespace ember
