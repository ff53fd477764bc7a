// Where a tensor lives: the CPU or a CUDA device by its logical index.
//
// CUDA indices are logical: after CUDA_VISIBLE_DEVICES has remapped the
// physical GPUs, cuda:0 is the first visible one.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace ember {

enum class DeviceType : uint8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;  // always 0 for the CPU

  Device() = default;
  Device(DeviceType t, int i = 0) : type(t), index(t == DeviceType::CPU ? 0 : i) {}
  // "cpu", "cuda", "cuda:1"; anything else is an ember::Error.
  Device(const char* spec);
  Device(const std::string& spec) : Device(spec.c_str()) {}

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const;
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
};

std::ostream& operator<<(std::ostream& os, const Device& d);

inline Device kCPU{DeviceType::CPU, 0};
inline Device cuda_device(int index = 0) { return Device(DeviceType::CUDA, index); }

}  // namespace ember
