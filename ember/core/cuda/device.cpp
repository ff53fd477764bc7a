// Device discovery and selection on top of the CUDA runtime.
#include "ember/core/cuda/device.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/devices.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/cuda/index_error.h"
#include "ember/core/error.h"

namespace ember::cuda {
namespace {

struct DeviceCount {
  int count = 0;
  std::string why_none;  // the runtime's reason when count is 0
};

const DeviceCount& counted() {
  static const DeviceCount c = [] {
    DeviceCount r;
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();  // no driver or no GPU is an answer here, not an error to keep
      r.why_none = std::string("the CUDA runtime reports ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
      return r;
    }
    r.count = std::min(n, kMaxDevices);
    if (n == 0) r.why_none = "the CUDA driver reports no GPU";
    return r;
  }();
  return c;
}

// nvidia-smi's form: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx.
std::string uuid_string(const cudaUUID_t& id) {
  static const char* hex = "0123456789abcdef";
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    const auto byte = static_cast<unsigned char>(id.bytes[i]);
    s += hex[byte >> 4];
    s += hex[byte & 15];
  }
  return s;
}

}  // namespace

int device_count() { return counted().count; }

bool is_available() { return device_count() > 0; }

std::string visible_devices_env() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v == nullptr ? "unset" : v;
}

void check_device(int device) {
  const DeviceCount& c = counted();
  if (device >= 0 && device < c.count) [[likely]]
    return;
  EMBER_FAIL(invalid_device_message(device, size_t(c.count), c.why_none));
}

int current_device() {
  check_device(0);  // the clear "no CUDA device" error rather than the runtime's
  int d = 0;
  EMBER_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

void set_device(int device) {
  check_device(device);
  EMBER_CUDA_CHECK(cudaSetDevice(device));
}

void synchronize(int device) {
  if (device == -1) device = current_device();
  detail::check_not_capturing(device, "cuda::synchronize", "it waits for the device, which a graph cannot record");
  DeviceGuard guard(device);
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  raise_pending_index_error();
}

const DeviceProperties& properties(int device) {
  if (device == -1) device = current_device();
  check_device(device);
  static std::unique_ptr<DeviceProperties> cache[kMaxDevices];
  static std::once_flag once[kMaxDevices];
  std::call_once(once[device], [device] {
    cudaDeviceProp p{};
    EMBER_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
    auto props = std::make_unique<DeviceProperties>();
    props->name = p.name;
    props->total_memory = p.totalGlobalMem;
    props->multiprocessor_count = p.multiProcessorCount;
    props->major = p.major;
    props->minor = p.minor;
    props->l2_cache_size = p.l2CacheSize;
    props->shared_memory_per_block_optin = p.sharedMemPerBlockOptin;
    char pci[32];
    std::snprintf(pci, sizeof(pci), "%04x:%02x:%02x.0", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    props->pci_bus_id = pci;
    props->uuid = uuid_string(p.uuid);
    cache[device] = std::move(props);
  });
  return *cache[device];
}

DeviceGuard::DeviceGuard(int device) : original_(current_device()), device_(device) {
  if (device_ != original_) set_device(device_);
}

DeviceGuard::~DeviceGuard() {
  // A destructor must not throw; restoring a device that was valid a moment
  // ago only fails when the context is already lost.
  if (device_ != original_) cudaSetDevice(original_);
}

}  // namespace ember::cuda
