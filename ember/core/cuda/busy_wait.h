// busy_wait: keeps a stream busy for a given time with a one-thread kernel.
// Internal to ember (its tests and benchmarks); includes no CUDA header.
//
// For tests and benchmarks of stream ordering and overlap (record_stream,
// events, communication hidden behind compute): work of a known duration
// that needs no data. It is no way to wait in real code; use Event for that.
#pragma once

#include <cstdint>

#include "ember/core/cuda/stream.h"

namespace ember::cuda {

// Enqueues a kernel on `stream` that spins for `nanoseconds` of GPU time.
void busy_wait(Stream stream, int64_t nanoseconds);

}  // namespace ember::cuda
