// CUDA streams: the handle type, the current stream of each device, and a
// pool of side streams. Public; includes no CUDA header.
//
// Contract:
// - Stream is a (cudaStream_t, device) pair, passed by value. handle() is
//   the cudaStream_t itself (struct CUstream_st* is what cuda_runtime_api.h
//   calls cudaStream_t), so a .cu file launches with
//     kernel<<<grid, block, 0, ember::cuda::current_stream(device).handle()>>>
//   with no cast.
// - Every op enqueues its work on the current stream of the device it runs
//   on, and the caching allocator hands out memory for that stream.
// - The current stream is per host thread and per device. Until a thread
//   sets one, it is the device's legacy default stream (handle nullptr).
//   We choose the legacy stream, as PyTorch does, because it is ordered with
//   every CUDA call that names no stream: a library call or cudaMemcpy made
//   by code outside ember, or by a kernel file that forgot its stream, is then
//   still correctly ordered with ember's ops. A dedicated non-blocking stream
//   would race with all of those silently. The cost is that the legacy
//   stream waits for blocking streams, which is why the pool's streams are
//   non-blocking: overlap is always asked for explicitly, with a side stream
//   and an Event (ember/core/cuda/event.h).
// - Pool streams live as long as the process, so a Stream held anywhere
//   (by the allocator, in a cached block) never dangles.
#pragma once

struct CUstream_st;

namespace ember::cuda {

class Stream {
 public:
  Stream(CUstream_st* handle, int device) : handle_(handle), device_(device) {}

  CUstream_st* handle() const { return handle_; }  // the cudaStream_t
  int device() const { return device_; }
  bool is_default() const { return handle_ == nullptr; }
  // True when all work queued on the stream has finished.
  bool query() const;
  // Blocks the host until all work queued on the stream has finished; then
  // raises an index error a GPU check found (ember/core/cuda/index_error.h).
  void synchronize() const;

  bool operator==(const Stream& other) const = default;

 private:
  CUstream_st* handle_;
  int device_;
};

// The legacy default stream of a device (-1: the current device).
Stream default_stream(int device = -1);
// This thread's current stream on a device (-1: the current device).
Stream current_stream(int device = -1);
// Makes `stream` this thread's current stream on stream.device().
void set_current_stream(Stream stream);
// A non-blocking stream from a per-device pool of 32 per priority, handed
// out round robin: callers that want overlap take one, they need not free it.
Stream stream_from_pool(int device = -1, bool high_priority = false);

// Makes stream.device() the current device and `stream` its current stream
// for the scope; restores both on exit.
class StreamGuard {
 public:
  explicit StreamGuard(Stream stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  int original_device_;
  Stream previous_;  // the current stream of stream.device() before the guard
};

}  // namespace ember::cuda
