// Parsing and printing of device names.
#include "ember/core/device.h"

#include <cstdlib>
#include <cstring>
#include <ostream>

#include "ember/core/error.h"

namespace ember {

Device::Device(const char* spec) {
  std::string s = spec;
  if (s == "cpu") {
    type = DeviceType::CPU;
    index = 0;
    return;
  }
  if (s.rfind("cuda", 0) == 0) {
    type = DeviceType::CUDA;
    index = 0;
    if (s.size() == 4) return;
    if (s[4] == ':' && s.size() > 5) {
      char* end = nullptr;
      long v = std::strtol(s.c_str() + 5, &end, 10);
      if (*end == '\0' && v >= 0 && v < 1024) {
        index = int(v);
        return;
      }
    }
  }
  EMBER_FAIL("Device: cannot parse '" << s << "'; expected 'cpu', 'cuda' or 'cuda:N' with N >= 0");
}

std::string Device::str() const {
  if (type == DeviceType::CPU) return "cpu";
  return "cuda:" + std::to_string(index);
}

std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace ember
