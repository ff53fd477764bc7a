// DeviceCache: the caching allocator's state for one device, its block
// pools, pending stream uses and statistics. Internal to ember (CUDA-typed);
// the design is described at the top of ember/core/cuda/caching_allocator.h.
//
// Contract: every method is thread-safe (one mutex per device). allocate()
// returns at least nbytes for use on `stream` or throws OutOfMemoryError;
// free() takes back a pointer allocate() returned and never throws.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <deque>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/core/cuda/caching_allocator.h"

namespace ember::cuda::detail {

struct Block;

// Best-fit order: by stream, then size, then address.
struct BlockOrder {
  bool operator()(const Block* a, const Block* b) const;
};
using BlockPool = std::set<Block*, BlockOrder>;

// A piece of a cudaMalloc'ed segment: live, free in its pool, or freed and
// waiting for the events of other streams that used it.
struct Block {
  char* ptr = nullptr;
  size_t size = 0;
  cudaStream_t stream = nullptr;  // the stream of its segment; reused only there
  BlockPool* pool = nullptr;      // small or large
  Block* prev = nullptr;          // neighbours in the same segment
  Block* next = nullptr;
  bool allocated = false;
  int pending_events = 0;                 // uses on other streams not yet complete
  std::vector<cudaStream_t> stream_uses;  // other streams named by record_stream
};

class DeviceCache {
 public:
  explicit DeviceCache(int device) : device_(device) {}
  DeviceCache(const DeviceCache&) = delete;
  DeviceCache& operator=(const DeviceCache&) = delete;

  void* allocate(size_t nbytes, cudaStream_t stream);
  void free(void* ptr) noexcept;
  void record_stream(const void* ptr, cudaStream_t stream);
  // CUDA graph capture (ember/core/cuda/graph.h) on `stream`, a stream only the
  // graph uses, so the blocks of that stream are the graph's pool. Between
  // begin_capture and end_capture, a freed block of any other stream stays
  // live and is held instead of reused: the graph's replays may use it.
  // end_capture returns the held pointers; the graph frees them at reset.
  // One capture per device at a time. From begin_capture until
  // end_graph_pool, the free blocks of `stream` are addresses the graph's
  // kernels use: neither empty_cache nor the retry after a failed cudaMalloc
  // releases them (releasing them made a replay write to freed memory).
  void begin_capture(cudaStream_t stream);
  std::vector<void*> end_capture();
  void end_graph_pool(cudaStream_t stream);
  void empty_cache();
  MemoryStats stats();
  void reset_peak();
  std::string summary();

 private:
  // Takes the best-fitting free block of `pool` for `stream` out of the pool.
  Block* take_free(BlockPool& pool, cudaStream_t stream, size_t size);
  Block* new_segment(BlockPool& pool, cudaStream_t stream, size_t size, size_t requested);
  void split(Block* block, size_t size);
  // Merges a block that just became free with its free neighbours and puts
  // the result in its pool.
  void free_block(Block* block);
  // Returns the blocks whose pending events have completed to their pools.
  void process_events();
  void wait_for_events();
  void release_cached_segments();
  [[noreturn]] void throw_out_of_memory(size_t requested, size_t segment);

  std::mutex mutex_;
  const int device_;
  BlockPool small_;
  BlockPool large_;
  std::unordered_map<const void*, Block*> live_;
  // Per stream, the events recorded at free for blocks it used, in order.
  std::unordered_map<cudaStream_t, std::deque<std::pair<cudaEvent_t, Block*>>> pending_;
  size_t pending_count_ = 0;
  bool capturing_ = false;
  cudaStream_t capture_stream_ = nullptr;
  std::vector<void*> held_;                  // freed during the capture, blocks of other streams
  std::vector<cudaStream_t> graph_streams_;  // pools of live graphs, never released
  MemoryStats stats_;
};

// The device's cache (ember/core/cuda/caching_allocator.cpp owns them).
DeviceCache& device_cache(int device);

// "1.50 GiB", "512.00 KiB", "300 B".
std::string format_bytes(size_t bytes);

}  // namespace ember::cuda::detail
