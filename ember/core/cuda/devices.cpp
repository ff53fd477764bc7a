// The visible-device mapping, CUDA_VISIBLE_DEVICES, and free-GPU selection
// (see devices.h).
#include "ember/core/cuda/devices.h"

#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <set>
#include <sstream>
#include <tuple>

#include "ember/core/cuda/device.h"
#include "ember/core/cuda/nvml.h"
#include "ember/core/error.h"

namespace ember::cuda {
namespace {

constexpr uint64_t kMiB = uint64_t(1) << 20;

class RealSystem final : public DeviceSystem {
 public:
  std::optional<std::string> getenv(const std::string& name) const override {
    const char* v = std::getenv(name.c_str());
    return v == nullptr ? std::nullopt : std::optional<std::string>(v);
  }

  void setenv(const std::string& name, const std::string& value) override {
    EMBER_CHECK(::setenv(name.c_str(), value.c_str(), 1) == 0, "setenv " << name << "=" << value << " failed");
  }

  // The driver library is loaded by the first CUDA call (the runtime loads
  // it lazily). Before cuInit, driver calls answer CUDA_ERROR_NOT_INITIALIZED.
  bool cuda_initialized() const override {
    void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
    if (driver == nullptr) return false;
    using DeviceGetCount = int (*)(int*);
    auto get_count = reinterpret_cast<DeviceGetCount>(dlsym(driver, "cuDeviceGetCount"));
    constexpr int kNotInitialized = 3;  // CUDA_ERROR_NOT_INITIALIZED
    int count = 0;
    const bool initialized = get_count != nullptr && get_count(&count) != kNotInitialized;
    dlclose(driver);
    return initialized;
  }

  std::vector<RuntimeDevice> runtime_devices() const override {
    std::vector<RuntimeDevice> out;
    for (int i = 0; i < device_count(); ++i) {
      const DeviceProperties& p = properties(i);
      out.push_back({p.name, p.total_memory, p.multiprocessor_count, p.pci_bus_id, p.uuid});
    }
    return out;
  }

  std::vector<PhysicalDevice> physical_devices() const override { return detail::nvml_devices(); }
};

struct Installed {
  std::mutex mutex;
  std::shared_ptr<DeviceSystem> system;  // null: the real one
};

Installed& installed() {
  static Installed i;
  return i;
}

// (domain, bus, device, function) of "0000:65:00.0" or "00000000:65:00.0".
std::optional<std::tuple<unsigned, unsigned, unsigned, unsigned>> parse_pci(const std::string& id) {
  unsigned domain = 0, bus = 0, device = 0, function = 0;
  if (std::sscanf(id.c_str(), "%x:%x:%x.%x", &domain, &bus, &device, &function) != 4) return std::nullopt;
  return std::make_tuple(domain, bus, device, function);
}

bool parse_index(const std::string& token, int& index) {
  if (token.empty() || token.size() > 6) return false;
  for (char c : token) {
    if (c < '0' || c > '9') return false;
  }
  index = std::stoi(token);
  return true;
}

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string join(const std::vector<int>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) s += ',';
    s += std::to_string(ids[i]);
  }
  return s;
}

std::string gpu_table(const std::vector<PhysicalDevice>& gpus) {
  std::ostringstream s;
  for (const PhysicalDevice& g : gpus) {
    s << "\n  GPU " << g.index << " (" << g.name << "): " << g.used_memory / kMiB << " MiB used of "
      << g.total_memory / kMiB << " MiB, " << g.utilization << "% utilization";
  }
  return s.str();
}

std::vector<PhysicalDevice> physical_or_empty(const DeviceSystem& sys) {
  try {
    return sys.physical_devices();
  } catch (const Error&) {
    return {};
  }
}

}  // namespace

std::vector<VisibleEntry> parse_visible_devices(const std::string& value) {
  std::vector<VisibleEntry> entries;
  std::stringstream in(value);
  for (std::string raw; std::getline(in, raw, ',');) {
    VisibleEntry e;
    e.token = trim(raw);
    if (parse_index(e.token, e.index)) {
      e.kind = VisibleEntry::Kind::Index;
    } else if (e.token.rfind("GPU-", 0) == 0 && e.token.size() > 4) {
      e.kind = VisibleEntry::Kind::GpuUuid;
    } else if (e.token.rfind("MIG-", 0) == 0 && e.token.size() > 4) {
      e.kind = VisibleEntry::Kind::Mig;
    } else {
      break;  // CUDA stops at the first entry it cannot read
    }
    entries.push_back(std::move(e));
  }
  return entries;
}

DeviceSystem& device_system() {
  static RealSystem real;
  Installed& i = installed();
  std::lock_guard<std::mutex> lock(i.mutex);
  return i.system ? *i.system : real;
}

std::shared_ptr<DeviceSystem> set_device_system(std::shared_ptr<DeviceSystem> system) {
  Installed& i = installed();
  std::lock_guard<std::mutex> lock(i.mutex);
  std::swap(i.system, system);
  return system;
}

std::vector<VisibleDevice> visible_devices() {
  DeviceSystem& sys = device_system();
  const std::vector<RuntimeDevice> runtime = sys.runtime_devices();
  const std::optional<std::string> env = sys.getenv("CUDA_VISIBLE_DEVICES");
  const std::vector<VisibleEntry> entries = env ? parse_visible_devices(*env) : std::vector<VisibleEntry>{};
  const std::vector<PhysicalDevice> gpus = runtime.empty() ? std::vector<PhysicalDevice>{} : physical_or_empty(sys);
  std::vector<VisibleDevice> out;
  for (size_t i = 0; i < runtime.size(); ++i) {
    const RuntimeDevice& r = runtime[i];
    VisibleDevice v{int(i), -1, r.name, r.total_memory, r.multiprocessor_count, r.pci_bus_id, r.uuid};
    const auto pci = parse_pci(r.pci_bus_id);
    for (const PhysicalDevice& g : gpus) {
      if ((pci && pci == parse_pci(g.pci_bus_id)) || (!r.uuid.empty() && r.uuid == g.uuid)) {
        v.physical = g.index;
        break;
      }
    }
    if (v.physical < 0) {
      if (!env) v.physical = int(i);
      else if (i < entries.size() && entries[i].kind == VisibleEntry::Kind::Index) v.physical = entries[i].index;
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::string describe_visible_mapping() {
  DeviceSystem& sys = device_system();
  const std::optional<std::string> env = sys.getenv("CUDA_VISIBLE_DEVICES");
  const std::vector<VisibleDevice> visible = visible_devices();
  const std::vector<VisibleEntry> entries = env ? parse_visible_devices(*env) : std::vector<VisibleEntry>{};
  std::string logical, physical;
  for (size_t i = 0; i < visible.size(); ++i) {
    if (i) {
      logical += ',';
      physical += ',';
    }
    logical += std::to_string(i);
    std::string p = visible[i].physical >= 0 ? std::to_string(visible[i].physical)
                    : i < entries.size()     ? entries[i].token
                                             : "?";
    physical += p;
  }
  if (!env) {
    if (visible.empty()) return "CUDA_VISIBLE_DEVICES is unset";
    return "CUDA_VISIBLE_DEVICES is unset, so logical ids " + logical + " are physical GPUs " + physical;
  }
  if (visible.empty()) return "CUDA_VISIBLE_DEVICES=" + *env + " leaves no GPU visible";
  return "CUDA_VISIBLE_DEVICES=" + *env + " maps physical GPUs " + physical + " to logical ids " + logical;
}

std::string invalid_device_message(int logical_id, size_t count, const std::string& why_none) {
  std::ostringstream s;
  s << "Invalid device id " << logical_id << ": ";
  if (count > 0) {
    s << count << " CUDA device" << (count == 1 ? " is" : "s are") << " visible (" << describe_visible_mapping()
      << "); use " << (count == 1 ? "id 0" : "ids in [0, " + std::to_string(count - 1) + "]");
    return s.str();
  }
  DeviceSystem& sys = device_system();
  const std::optional<std::string> env = sys.getenv("CUDA_VISIBLE_DEVICES");
  const std::vector<PhysicalDevice> gpus = env ? physical_or_empty(sys) : std::vector<PhysicalDevice>{};
  if (gpus.empty()) {
    s << "no CUDA device is visible (CUDA_VISIBLE_DEVICES=" << env.value_or("unset") << "; " << why_none
      << "). Run on a machine with an NVIDIA GPU and driver, or keep tensors on the CPU";
    return s.str();
  }
  std::vector<int> ids;
  for (const PhysicalDevice& g : gpus) ids.push_back(g.index);
  s << "no CUDA device is visible: CUDA_VISIBLE_DEVICES=\"" << *env << "\" hides "
    << (gpus.size() == 1 ? "the only GPU" : "all " + std::to_string(gpus.size()) + " GPUs")
    << " of this machine, which NVML (nvidia-smi) lists:" << gpu_table(gpus) << "\n(the CUDA runtime: " << why_none
    << "). Unset CUDA_VISIBLE_DEVICES, or set it to GPUs of this machine (CUDA_VISIBLE_DEVICES=" << join(ids)
    << " for all of them), or keep tensors on the CPU";
  return s.str();
}

void check_visible_device(int logical_id) {
  const size_t count = device_system().runtime_devices().size();
  if (logical_id >= 0 && size_t(logical_id) < count) return;
#if EMBER_WITH_CUDA
  EMBER_FAIL(invalid_device_message(logical_id, count, "no GPU or driver was found"));
#else
  EMBER_CHECK(count > 0, "Invalid device id " << logical_id << ": no CUDA device is visible (CUDA_VISIBLE_DEVICES="
                                              << device_system().getenv("CUDA_VISIBLE_DEVICES").value_or("unset")
                                              << "; this ember was built without CUDA (EMBER_WITH_CUDA=OFF)). Run on "
                                                 "a machine with a GPU, or use CPU devices");
  EMBER_FAIL(invalid_device_message(logical_id, count, ""));
#endif
}

void set_visible_devices(const std::vector<int>& physical_ids) {
  std::set<int> seen;
  for (int id : physical_ids) {
    EMBER_CHECK(id >= 0, "set_visible_devices: physical GPU ids are non-negative, got " << id);
    EMBER_CHECK(seen.insert(id).second,
                "set_visible_devices: GPU " << id << " is listed twice in [" << join(physical_ids) << "]");
  }
  DeviceSystem& sys = device_system();
  const std::string value = join(physical_ids);
  const std::optional<std::string> current = sys.getenv("CUDA_VISIBLE_DEVICES");
  if (sys.cuda_initialized()) {
    if (current == value) return;  // already in effect
    EMBER_FAIL("set_visible_devices: CUDA was already initialized in this process, so CUDA_VISIBLE_DEVICES="
               << value << " would be ignored (CUDA reads the variable once, when it initializes; it is "
               << (current ? "'" + *current + "'" : "unset")
               << " for this process). Call set_visible_devices before anything uses CUDA (a tensor on a GPU, a "
                  "device query, a DataParallel), or set the variable in the shell: CUDA_VISIBLE_DEVICES="
               << value << " ./your_program");
  }
  const std::vector<PhysicalDevice> gpus = physical_or_empty(sys);
  for (int id : physical_ids) {
    EMBER_CHECK(gpus.empty() || size_t(id) < gpus.size(), "set_visible_devices: there is no GPU "
                                                              << id << "; the " << gpus.size()
                                                              << " GPUs are:" << gpu_table(gpus));
  }
  sys.setenv("CUDA_VISIBLE_DEVICES", value);
  if (!sys.getenv("CUDA_DEVICE_ORDER")) sys.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID");
}

std::vector<PhysicalDevice> physical_devices() { return device_system().physical_devices(); }

std::vector<int> available_devices(uint64_t max_used_mib) {
  std::vector<int> ids;
  for (const PhysicalDevice& g : physical_devices()) {
    if (g.used_memory <= max_used_mib * kMiB) ids.push_back(g.index);
  }
  return ids;
}

std::vector<int> select_free_devices(int n, uint64_t max_used_mib) {
  EMBER_CHECK(n > 0, "select_free_devices: asked for " << n << " GPUs; ask for at least one");
  const std::vector<PhysicalDevice> gpus = physical_devices();
  std::vector<PhysicalDevice> free;
  for (const PhysicalDevice& g : gpus) {
    if (g.used_memory <= max_used_mib * kMiB) free.push_back(g);
  }
  EMBER_CHECK(free.size() >= size_t(n),
              "select_free_devices: asked for "
                  << n << " GPU" << (n == 1 ? "" : "s") << " using at most " << max_used_mib << " MiB each, but "
                  << (free.empty() ? "none" : "only " + std::to_string(free.size())) << " of the " << gpus.size()
                  << " GPUs qualif" << (free.size() == 1 ? "ies" : "y") << ":" << gpu_table(gpus)
                  << "\nWait for GPUs to free up, ask for fewer, or raise max_used_mib");
  std::stable_sort(free.begin(), free.end(),
                   [](const PhysicalDevice& a, const PhysicalDevice& b) { return a.used_memory < b.used_memory; });
  std::vector<int> chosen;
  for (int i = 0; i < n; ++i) chosen.push_back(free[size_t(i)].index);
  std::sort(chosen.begin(), chosen.end());
  set_visible_devices(chosen);
  return chosen;
}

}  // namespace ember::cuda
