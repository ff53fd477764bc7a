// Current streams (thread-local, one slot per device) and the stream pool.
#include "ember/core/cuda/stream.h"

#include <atomic>
#include <cstdint>
#include <mutex>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/cuda/index_error.h"
#include "ember/core/error.h"

namespace ember::cuda {
namespace {

// nullptr, the legacy default stream, until the thread sets a stream.
thread_local CUstream_st* tls_current[kMaxDevices] = {};

constexpr int kPoolSize = 32;

struct StreamPool {
  std::once_flag created;
  CUstream_st* streams[kPoolSize] = {};
  std::atomic<uint32_t> next{0};
};

StreamPool& pool(int device, bool high_priority) {
  static StreamPool pools[kMaxDevices][2];
  StreamPool& p = pools[device][high_priority ? 1 : 0];
  std::call_once(p.created, [&p, device, high_priority] {
    DeviceGuard guard(device);
    int least = 0, greatest = 0;
    EMBER_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    for (CUstream_st*& s : p.streams) {
      EMBER_CUDA_CHECK(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? greatest : least));
    }
  });
  return p;
}

int resolve(int device) {
  if (device == -1) return current_device();
  check_device(device);
  return device;
}

}  // namespace

bool Stream::query() const {
  DeviceGuard guard(device_);  // the legacy stream's handle means "the current device's"
  const cudaError_t err = cudaStreamQuery(handle_);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

void Stream::synchronize() const {
  detail::check_not_capturing(device_, "Stream::synchronize", "it waits for the device, which a graph cannot record");
  DeviceGuard guard(device_);
  EMBER_CUDA_CHECK(cudaStreamSynchronize(handle_));
  raise_pending_index_error();
}

Stream default_stream(int device) { return Stream(nullptr, resolve(device)); }

Stream current_stream(int device) {
  device = resolve(device);
  return Stream(tls_current[device], device);
}

void set_current_stream(Stream stream) {
  check_device(stream.device());
  tls_current[stream.device()] = stream.handle();
}

Stream stream_from_pool(int device, bool high_priority) {
  device = resolve(device);
  StreamPool& p = pool(device, high_priority);
  const uint32_t i = p.next.fetch_add(1, std::memory_order_relaxed) % kPoolSize;
  return Stream(p.streams[i], device);
}

StreamGuard::StreamGuard(Stream stream)
    : original_device_(current_device()), previous_(current_stream(stream.device())) {
  if (stream.device() != original_device_) set_device(stream.device());
  set_current_stream(stream);
}

StreamGuard::~StreamGuard() {
  tls_current[previous_.device()] = previous_.handle();
  if (previous_.device() != original_device_) cudaSetDevice(original_device_);
}

}  // namespace ember::cuda
