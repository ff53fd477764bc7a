// A fake machine for the device tests: its environment, CUDA runtime and
// NVML table are plain data the test fills in, installed for a scope.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/cuda/devices.h"
#include "ember/core/error.h"

namespace ember::testing {

struct FakeDeviceSystem : cuda::DeviceSystem {
  std::map<std::string, std::string> env;
  bool initialized = false;
  std::vector<cuda::RuntimeDevice> runtime;               // the visible devices, logical order
  std::optional<std::vector<cuda::PhysicalDevice>> nvml;  // nullopt: NVML cannot be loaded

  std::optional<std::string> getenv(const std::string& name) const override {
    auto it = env.find(name);
    return it == env.end() ? std::nullopt : std::optional<std::string>(it->second);
  }
  void setenv(const std::string& name, const std::string& value) override { env[name] = value; }
  bool cuda_initialized() const override { return initialized; }
  std::vector<cuda::RuntimeDevice> runtime_devices() const override { return runtime; }
  std::vector<cuda::PhysicalDevice> physical_devices() const override {
    if (!nvml) throw Error("physical_devices: NVML is not usable (the fake machine has none)");
    return *nvml;
  }
};

// The fake is the device system while this lives.
class ScopedDeviceSystem {
 public:
  ScopedDeviceSystem() : fake_(std::make_shared<FakeDeviceSystem>()), previous_(cuda::set_device_system(fake_)) {}
  ~ScopedDeviceSystem() { cuda::set_device_system(previous_); }
  ScopedDeviceSystem(const ScopedDeviceSystem&) = delete;
  ScopedDeviceSystem& operator=(const ScopedDeviceSystem&) = delete;
  FakeDeviceSystem* operator->() { return fake_.get(); }
  FakeDeviceSystem& operator*() { return *fake_; }

 private:
  std::shared_ptr<FakeDeviceSystem> fake_;
  std::shared_ptr<cuda::DeviceSystem> previous_;
};

inline constexpr uint64_t kMiB = uint64_t(1) << 20;

// A physical GPU at PCI bus `bus` with `used_mib` of 143771 MiB in use.
inline cuda::PhysicalDevice fake_gpu(int index, int bus, uint64_t used_mib, const std::string& name = "NVIDIA H200") {
  char pci[32];
  std::snprintf(pci, sizeof(pci), "00000000:%02X:00.0", bus);
  return {index,
          name,
          "GPU-0000000" + std::to_string(index) + "-aaaa-bbbb-cccc-dddddddddddd",
          pci,
          used_mib * kMiB,
          143771 * kMiB,
          unsigned(used_mib > 0 ? 50 : 0)};
}

// How the CUDA runtime reports that GPU.
inline cuda::RuntimeDevice fake_runtime(const cuda::PhysicalDevice& gpu, int multiprocessors = 132) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  std::sscanf(gpu.pci_bus_id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function);
  char pci[32];
  std::snprintf(pci, sizeof(pci), "%04x:%02x:%02x.0", domain, bus, device);
  return {gpu.name, size_t(gpu.total_memory), multiprocessors, pci, gpu.uuid};
}

}  // namespace ember::testing
