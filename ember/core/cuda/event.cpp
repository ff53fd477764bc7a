// Event: a thin RAII wrapper over cudaEvent_t.
#include "ember/core/cuda/event.h"

#include <utility>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/index_error.h"
#include "ember/core/error.h"

namespace ember::cuda {

Event::~Event() {
  if (event_ != nullptr) cudaEventDestroy(event_);  // also fine while work is pending
}

Event::Event(Event&& other) noexcept
    : event_(std::exchange(other.event_, nullptr)), device_(other.device_), enable_timing_(other.enable_timing_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (event_ != nullptr) cudaEventDestroy(event_);
    event_ = std::exchange(other.event_, nullptr);
    device_ = other.device_;
    enable_timing_ = other.enable_timing_;
  }
  return *this;
}

void Event::record() { record(current_stream()); }

void Event::record(Stream stream) {
  DeviceGuard guard(stream.device());
  if (event_ == nullptr) {
    EMBER_CUDA_CHECK(cudaEventCreateWithFlags(&event_, enable_timing_ ? cudaEventDefault : cudaEventDisableTiming));
    device_ = stream.device();
  }
  EMBER_CHECK(stream.device() == device_,
              "Event::record: the event belongs to cuda:" << device_ << " but the stream is on cuda:" << stream.device()
                                                          << "; use one Event per device");
  EMBER_CUDA_CHECK(cudaEventRecord(event_, stream.handle()));
}

void Event::wait(Stream stream) const {
  if (event_ == nullptr) return;
  DeviceGuard guard(stream.device());
  EMBER_CUDA_CHECK(cudaStreamWaitEvent(stream.handle(), event_, 0));
}

bool Event::query() const {
  if (event_ == nullptr) return true;
  const cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) {
    cudaGetLastError();
    return false;
  }
  EMBER_CUDA_CHECK(err);
  return true;
}

void Event::synchronize() const {
  if (event_ == nullptr) return;
  EMBER_CUDA_CHECK(cudaEventSynchronize(event_));
  raise_pending_index_error();
}

float Event::elapsed_time(const Event& end) const {
  EMBER_CHECK(enable_timing_ && end.enable_timing_,
              "Event::elapsed_time: both events must be created with Event(/*enable_timing=*/true)");
  EMBER_CHECK(recorded() && end.recorded(), "Event::elapsed_time: both events must be recorded first (the "
                                                << (recorded() ? "end" : "start") << " event was not)");
  synchronize();
  end.synchronize();
  float ms = 0.0f;
  EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

}  // namespace ember::cuda
