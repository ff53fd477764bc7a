// CUDA events: mark a point in a stream's work, make another stream wait
// for it, or time the work between two marks. Public; includes no CUDA
// header.
//
// Contract:
// - An Event is created lazily by its first record(), on that stream's
//   device; it may only be recorded on streams of that device afterwards.
// - query(), synchronize() and wait() on an event that was never recorded
//   return at once, as nothing is pending.
// - elapsed_time() needs two events made with enable_timing = true, both
//   recorded; it waits for both and returns milliseconds.
// - Move-only; the destructor releases the CUDA event.
#pragma once

#include "ember/core/cuda/stream.h"

struct CUevent_st;

namespace ember::cuda {

class Event {
 public:
  explicit Event(bool enable_timing = false) : enable_timing_(enable_timing) {}
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  // Marks the work queued so far on `stream` (default: the current stream
  // of the current device).
  void record();
  void record(Stream stream);
  // Makes `stream` wait, on the GPU, until the recorded work is done; the
  // host does not block.
  void wait(Stream stream) const;
  // True when the recorded work has finished.
  bool query() const;
  // Blocks the host until the recorded work has finished; then raises an
  // index error a GPU check found (ember/core/cuda/index_error.h).
  void synchronize() const;
  // Milliseconds between this event and `end`.
  float elapsed_time(const Event& end) const;

  bool recorded() const { return event_ != nullptr; }
  CUevent_st* handle() const { return event_; }  // the cudaEvent_t; null until recorded
  int device() const { return device_; }

 private:
  CUevent_st* event_ = nullptr;
  int device_ = -1;
  bool enable_timing_;
};

}  // namespace ember::cuda
