// KernelStub: the thin dispatch from an op to its kernel for a device type.
//
// Contract: an op front-end in ember/core/ops calls stub(device.type)(args...);
// ember/kernels/cpu and ember/kernels/cuda fill the table at static-initialization time
// with EMBER_REGISTER_KERNEL. One indirect call is the whole cost. A missing
// kernel is an ember::Error that names the op and the device.
#pragma once

#include "ember/core/device.h"
#include "ember/core/error.h"

namespace ember {

template <typename Fn>
class KernelStub {
 public:
  explicit constexpr KernelStub(const char* name) : name_(name) {}
  Fn* operator()(DeviceType type) const {
    Fn* fn = table_[int(type)];
    if (fn == nullptr) [[unlikely]]
      missing(type);
    return fn;
  }
  bool has(DeviceType type) const { return table_[int(type)] != nullptr; }
  void set(DeviceType type, Fn* fn) { table_[int(type)] = fn; }
  const char* name() const { return name_; }

 private:
  [[noreturn]] void missing(DeviceType type) const {
#if defined(EMBER_WITH_CUDA)
    const char* why = "";
#else
    const char* why = type == DeviceType::CUDA ? " (this ember was built without CUDA)" : "";
#endif
    EMBER_FAIL(name_ << ": no kernel for device type " << (type == DeviceType::CUDA ? "cuda" : "cpu") << why);
  }
  const char* name_;
  Fn* table_[kNumDeviceTypes] = {};
};

}  // namespace ember

#define EMBER_CONCAT_INNER_(a, b) a##b
#define EMBER_CONCAT_(a, b) EMBER_CONCAT_INNER_(a, b)
// EMBER_REGISTER_KERNEL(binary_stub, DeviceType::CPU, binary_cpu);
#define EMBER_REGISTER_KERNEL(stub, device_type, fn) \
  static const bool EMBER_CONCAT_(ember_kernel_registered_, __COUNTER__) = ((stub).set(device_type, fn), true)
