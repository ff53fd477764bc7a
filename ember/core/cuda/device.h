// CUDA device management: which GPUs exist, which one is current, their
// properties. Public; includes no CUDA header.
//
// Contract:
// - Device ids are logical: after CUDA_VISIBLE_DEVICES has picked and
//   reordered the physical GPUs, id 0 is the first visible one.
// - device_count() and is_available() never throw: without a driver or GPU
//   they report 0 / false. Everything else that takes an id checks it and
//   throws ember::Error naming the id, how many devices are visible, the
//   CUDA_VISIBLE_DEVICES value and the valid range, or that the variable
//   hides every GPU of the machine (ember/core/cuda/devices.h's
//   invalid_device_message).
// - An id of -1 means the calling thread's current device.
// - The current device is per host thread, as in the CUDA runtime.
#pragma once

#include <cstddef>
#include <string>

namespace ember::cuda {

// ember supports at most this many visible devices in one process.
inline constexpr int kMaxDevices = 64;

// The number of visible CUDA devices; 0 when there is no driver or GPU.
// Counted once per process.
int device_count();
bool is_available();

int current_device();
void set_device(int device);
// Blocks the host until all work queued on the device (-1: current) is done;
// then raises an index error a GPU check found (ember/core/cuda/index_error.h).
void synchronize(int device = -1);

struct DeviceProperties {
  std::string name;         // "NVIDIA H200"
  size_t total_memory = 0;  // bytes
  int multiprocessor_count = 0;
  int major = 0;  // compute capability major.minor
  int minor = 0;
  int l2_cache_size = 0;                     // bytes
  size_t shared_memory_per_block_optin = 0;  // bytes a block can opt in to
  std::string pci_bus_id;                    // "0000:65:00.0" (domain:bus:device.function)
  std::string uuid;                          // "GPU-8f3e0c1a-..." (nvidia-smi -L's form; a MIG instance's own)
};
// Read once per device and cached.
const DeviceProperties& properties(int device = -1);

// The CUDA_VISIBLE_DEVICES value, or "unset"; for error messages.
std::string visible_devices_env();

// Throws the "Invalid device id" ember::Error unless 0 <= device < device_count().
void check_device(int device);

// Makes `device` current for its scope and restores the previous current
// device on exit.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int original_;
  int device_;
};

}  // namespace ember::cuda
