// NVML through dlopen/dlsym. The few structs used are declared here with
// nvml.h's layout (stable since NVML's v2 API; *_v2/_v3 entry points are
// the ones whose argument layouts these match).
#include "ember/core/cuda/nvml.h"

#include <dlfcn.h>

#include <string>

#include "ember/core/error.h"

namespace ember::cuda::detail {
namespace {

using nvmlReturn_t = int;  // an enum in nvml.h; NVML_SUCCESS is 0
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;

struct nvmlMemory_t {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};

struct nvmlUtilization_t {
  unsigned int gpu;
  unsigned int memory;
};

struct nvmlPciInfo_t {
  char busIdLegacy[16];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE
  unsigned int domain;
  unsigned int bus;
  unsigned int device;
  unsigned int pciDeviceId;
  unsigned int pciSubSystemId;
  char busId[32];  // NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE
};

constexpr nvmlReturn_t kSuccess = 0;
constexpr unsigned kNameBufferSize = 96;  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned kUuidBufferSize = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

struct Nvml {
  std::string load_error;  // empty when loaded
  nvmlReturn_t (*init)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  nvmlReturn_t (*device_count)(unsigned int*) = nullptr;
  nvmlReturn_t (*handle_by_index)(unsigned int, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*memory_info)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned int) = nullptr;
  nvmlReturn_t (*pci_info)(nvmlDevice_t, nvmlPciInfo_t*) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned int) = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
};

template <typename F>
bool bind(void* lib, const char* symbol, F& fn, std::string& error) {
  fn = reinterpret_cast<F>(dlsym(lib, symbol));
  if (fn == nullptr && error.empty()) error = std::string("libnvidia-ml.so.1 has no ") + symbol;
  return fn != nullptr;
}

// Loaded once and kept for the life of the process (never dlclose'd: other
// threads may be inside it).
const Nvml& nvml() {
  static const Nvml lib = [] {
    Nvml n;
    void* handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      n.load_error = std::string("cannot load libnvidia-ml.so.1 (") + (why ? why : "unknown reason") + ")";
      return n;
    }
    bind(handle, "nvmlInit_v2", n.init, n.load_error);
    bind(handle, "nvmlShutdown", n.shutdown, n.load_error);
    bind(handle, "nvmlDeviceGetCount_v2", n.device_count, n.load_error);
    bind(handle, "nvmlDeviceGetHandleByIndex_v2", n.handle_by_index, n.load_error);
    bind(handle, "nvmlDeviceGetMemoryInfo", n.memory_info, n.load_error);
    bind(handle, "nvmlDeviceGetUtilizationRates", n.utilization, n.load_error);
    bind(handle, "nvmlDeviceGetName", n.name, n.load_error);
    bind(handle, "nvmlDeviceGetPciInfo_v3", n.pci_info, n.load_error);
    bind(handle, "nvmlDeviceGetUUID", n.uuid, n.load_error);
    bind(handle, "nvmlErrorString", n.error_string, n.load_error);
    return n;
  }();
  return lib;
}

std::string describe(const Nvml& n, nvmlReturn_t r) {
  return (n.error_string ? std::string(n.error_string(r)) : std::string("error")) + " (NVML code " + std::to_string(r) +
         ")";
}

}  // namespace

std::vector<PhysicalDevice> nvml_devices() {
  const Nvml& n = nvml();
  EMBER_CHECK(n.load_error.empty(), "physical_devices: NVML is not usable: "
                                        << n.load_error
                                        << ". NVML comes with the NVIDIA driver; without it ember cannot read the "
                                           "GPUs' memory use. Install the driver, or choose the GPUs yourself with "
                                           "CUDA_VISIBLE_DEVICES");
  nvmlReturn_t r = n.init();
  EMBER_CHECK(r == kSuccess, "physical_devices: nvmlInit_v2 failed: " << describe(n, r)
                                                                      << "; is the NVIDIA driver loaded (nvidia-smi)?");
  // NVML counts its initializations; each query releases its own.
  struct Shutdown {
    const Nvml& n;
    ~Shutdown() { n.shutdown(); }
  } shutdown{n};
  unsigned int count = 0;
  r = n.device_count(&count);
  EMBER_CHECK(r == kSuccess, "physical_devices: nvmlDeviceGetCount_v2 failed: " << describe(n, r));
  std::vector<PhysicalDevice> gpus;
  for (unsigned int i = 0; i < count; ++i) {
    auto check = [&](nvmlReturn_t result, const char* call) {
      EMBER_CHECK(result == kSuccess,
                  "physical_devices: " << call << " failed for GPU " << i << ": " << describe(n, result));
    };
    nvmlDevice_t device = nullptr;
    check(n.handle_by_index(i, &device), "nvmlDeviceGetHandleByIndex_v2");
    PhysicalDevice g;
    g.index = int(i);
    char text[kUuidBufferSize > kNameBufferSize ? kUuidBufferSize : kNameBufferSize] = {};
    check(n.name(device, text, kNameBufferSize), "nvmlDeviceGetName");
    g.name = text;
    text[0] = '\0';
    check(n.uuid(device, text, kUuidBufferSize), "nvmlDeviceGetUUID");
    g.uuid = text;
    nvmlPciInfo_t pci{};
    check(n.pci_info(device, &pci), "nvmlDeviceGetPciInfo_v3");
    g.pci_bus_id = pci.busId;
    nvmlMemory_t memory{};
    check(n.memory_info(device, &memory), "nvmlDeviceGetMemoryInfo");
    g.used_memory = memory.used;
    g.total_memory = memory.total;
    // Informational only, and not reported for MIG or vGPU devices (nor
    // without permission on some systems): 0 then, rather than no table.
    nvmlUtilization_t use{};
    g.utilization = n.utilization(device, &use) == kSuccess ? use.gpu : 0;
    gpus.push_back(std::move(g));
  }
  return gpus;
}

}  // namespace ember::cuda::detail
