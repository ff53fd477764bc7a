// Free lists of cudaEvent_t, one per device.
#include "ember/core/cuda/event_pool.h"

#include <mutex>
#include <vector>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"

namespace ember::cuda::detail {
namespace {

struct EventFreeList {
  std::mutex mutex;
  std::vector<cudaEvent_t> events;
};

EventFreeList& free_list(int device) {
  // Never destroyed: tensors freed during static destruction still return
  // their blocks, and that may take an event.
  static EventFreeList* const lists = new EventFreeList[kMaxDevices];
  return lists[device];
}

}  // namespace

cudaEvent_t acquire_event(int device) {
  EventFreeList& list = free_list(device);
  {
    std::lock_guard<std::mutex> lock(list.mutex);
    if (!list.events.empty()) {
      cudaEvent_t e = list.events.back();
      list.events.pop_back();
      return e;
    }
  }
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void release_event(int device, cudaEvent_t event) {
  EventFreeList& list = free_list(device);
  std::lock_guard<std::mutex> lock(list.mutex);
  list.events.push_back(event);
}

}  // namespace ember::cuda::detail
