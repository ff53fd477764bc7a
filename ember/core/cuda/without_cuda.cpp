// The device API of ember/core/cuda/device.h and ember/core/cuda/graph.h in an ember
// built without CUDA (EMBER_WITH_CUDA=OFF): no device is visible, so
// device_count() is 0 and is_available() false, nothing is ever captured,
// and anything that needs a device says how ember was built. Compiled only into CPU-only builds (see CMakeLists.txt).
#include <cstdlib>

#include "ember/core/cuda/device.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/error.h"

namespace ember::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  EMBER_FAIL(what << ": this ember was built without CUDA (EMBER_WITH_CUDA=OFF); rebuild with CUDA to use GPUs");
}
}  // namespace

int device_count() { return 0; }
bool is_available() { return false; }
int current_device() { no_cuda("current_device"); }
void set_device(int) { no_cuda("set_device"); }
void synchronize(int) { no_cuda("synchronize"); }
const DeviceProperties& properties(int) { no_cuda("properties"); }

std::string visible_devices_env() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? v : "unset";
}

void check_device(int device) {
  EMBER_FAIL("Invalid device id " << device
                                  << ": 0 CUDA devices are visible because this ember was built without "
                                     "CUDA (EMBER_WITH_CUDA=OFF)");
}

DeviceGuard::DeviceGuard(int device) : original_(0), device_(device) { check_device(device); }
DeviceGuard::~DeviceGuard() = default;

// No graph can be made (the constructor throws), so nothing is ever captured.
struct Graph::Impl {};
Graph::Graph(int device) { check_device(device); }
Graph::~Graph() = default;
void Graph::capture(const std::function<void()>&) { no_cuda("Graph::capture"); }
void Graph::replay() { no_cuda("Graph::replay"); }
void Graph::reset() { no_cuda("Graph::reset"); }
bool Graph::captured() const { return false; }
int Graph::device() const { no_cuda("Graph::device"); }
size_t Graph::num_nodes() const { return 0; }
bool is_capturing(int) { return false; }

namespace detail {
void check_not_capturing(int, const char*, const char*) {}
void add_replay_check(int, std::function<void()>) {}
const uint64_t* captured_random_shift(int, Generator&, const GeneratorState&, uint64_t) { return nullptr; }
}  // namespace detail

}  // namespace ember::cuda
