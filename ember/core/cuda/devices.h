// Which GPUs ember sees, which physical GPUs they are, and picking free ones
// on a shared server. In namespace ember::cuda, beside ember/core/cuda/device.h;
// includes no CUDA or NVML header, and works (reporting no GPU) in an ember
// built without CUDA.
//
// Device ids in ember are logical: CUDA_VISIBLE_DEVICES picks and orders the
// physical GPUs, and cuda:0 is the first one it lists.
//
// - visible_devices() reports the mapping, logical id -> physical GPU, name,
//   memory. "Physical" is nvidia-smi's (NVML's) index when NVML is loadable,
//   matched by PCI bus id, so it is exact whatever form CUDA_VISIBLE_DEVICES
//   takes (indices, GPU-<uuid>, MIG-<uuid>: a MIG instance maps to its
//   parent GPU). Without NVML it is the index CUDA_VISIBLE_DEVICES gives
//   (an integer entry; -1 for a UUID or MIG entry, which cannot be mapped
//   without NVML), or the logical id when the variable is unset. It
//   initializes CUDA.
// - set_visible_devices(ids) sets CUDA_VISIBLE_DEVICES to the physical ids
//   (and CUDA_DEVICE_ORDER=PCI_BUS_ID unless set, so that the ids mean
//   nvidia-smi's). CUDA reads the variable once, when it initializes, so
//   this works only before anything in the process has used CUDA; called
//   later (with a different value) it throws an error saying so and how to
//   set it in the shell instead.
// - physical_devices() lists every physical GPU with its used and total
//   memory and utilization, through NVML (libnvidia-ml.so.1, loaded at run
//   time: ember has no link dependency on it); NVML missing is an error
//   saying so. available_devices(max_used_mib) are the physical ids using at
//   most that much memory; select_free_devices(n, max_used_mib) picks the n
//   of them using the least memory (in index order) and makes them the
//   visible devices with set_visible_devices. When fewer than n qualify, the
//   error lists every GPU and its memory use.
// - check_visible_device(id) throws, for an id outside the visible range,
//   "Invalid device id 2: 2 CUDA devices are visible (CUDA_VISIBLE_DEVICES=1,2
//   maps physical GPUs 1,2 to logical ids 0,1); use ids in [0, 1]"; with no
//   device visible because CUDA_VISIBLE_DEVICES hides every GPU NVML lists,
//   it says so, with the GPUs and the value that would show them.
// - Everything asks the machine through a DeviceSystem: the process's
//   environment, the CUDA runtime and NVML by default; tests install a fake
//   one with set_device_system.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ember::cuda {

// A logical device as the CUDA runtime reports it.
struct RuntimeDevice {
  std::string name;
  size_t total_memory = 0;  // bytes
  int multiprocessor_count = 0;
  std::string pci_bus_id;  // "0000:65:00.0"
  std::string uuid;        // "GPU-8f3e...", or "MIG-..." for a MIG instance
};

// A physical GPU as NVML reports it; index is nvidia-smi's.
struct PhysicalDevice {
  int index = 0;
  std::string name;
  std::string uuid;
  std::string pci_bus_id;     // "00000000:65:00.0"
  uint64_t used_memory = 0;   // bytes
  uint64_t total_memory = 0;  // bytes
  unsigned utilization = 0;   // percent of the last sample period with a kernel running (0: not reported)
};

struct VisibleDevice {
  int logical = 0;
  int physical = -1;  // -1: unknown (see above)
  std::string name;
  size_t total_memory = 0;  // bytes
  int multiprocessor_count = 0;
  std::string pci_bus_id;
  std::string uuid;
};

// One entry of CUDA_VISIBLE_DEVICES, as CUDA reads it.
struct VisibleEntry {
  enum class Kind { Index, GpuUuid, Mig };
  Kind kind = Kind::Index;
  std::string token;  // as written
  int index = -1;     // Kind::Index only
};
// CUDA's reading of the variable: comma-separated entries, each an index, a
// GPU-<uuid> or a MIG-<...>; the list ends at the first entry that is none
// of these (CUDA ignores the rest). An empty value hides every GPU.
std::vector<VisibleEntry> parse_visible_devices(const std::string& value);

class DeviceSystem {
 public:
  virtual ~DeviceSystem() = default;
  virtual std::optional<std::string> getenv(const std::string& name) const = 0;
  virtual void setenv(const std::string& name, const std::string& value) = 0;
  // Whether CUDA has been initialized in this process (by anyone).
  virtual bool cuda_initialized() const = 0;
  // The visible devices in logical order (initializes CUDA).
  virtual std::vector<RuntimeDevice> runtime_devices() const = 0;
  // Every physical GPU; an ember::Error when NVML cannot be used.
  virtual std::vector<PhysicalDevice> physical_devices() const = 0;
};

DeviceSystem& device_system();
// Installs `system` (null: the real one again); returns the previous one
// (null when it was the real one).
std::shared_ptr<DeviceSystem> set_device_system(std::shared_ptr<DeviceSystem> system);

std::vector<VisibleDevice> visible_devices();
void set_visible_devices(const std::vector<int>& physical_ids);

std::vector<PhysicalDevice> physical_devices();
std::vector<int> available_devices(uint64_t max_used_mib);
std::vector<int> select_free_devices(int n, uint64_t max_used_mib);

// "CUDA_VISIBLE_DEVICES=1,2 maps physical GPUs 1,2 to logical ids 0,1", or
// "CUDA_VISIBLE_DEVICES is unset, so logical ids 0,1 are physical GPUs 0,1".
std::string describe_visible_mapping();
void check_visible_device(int logical_id);
// The "Invalid device id" message of check_visible_device and of
// check_device (ember/core/cuda/device.h) for an id outside [0, count): with the
// logical -> physical mapping when some device is visible; when none is and
// CUDA_VISIBLE_DEVICES is set while NVML lists GPUs, that the variable hides
// them, which they are and how to list them; else `why_none`, the CUDA
// runtime's reason.
std::string invalid_device_message(int logical_id, size_t count, const std::string& why_none);

}  // namespace ember::cuda
