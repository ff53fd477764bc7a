// DeviceCache: block pools with best-fit lookup, splitting, merging and
// stream-aware reuse (see ember/core/cuda/caching_allocator.h for the design).
#include "ember/core/cuda/device_cache.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <sstream>
#include <utility>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/event_pool.h"
#include "ember/core/error.h"

namespace ember::cuda::detail {
namespace {

constexpr size_t kMinBlockSize = 512;        // every size rounds up to a multiple of this
constexpr size_t kSmallSize = 1 << 20;       // requests up to this use the small pool
constexpr size_t kSmallBuffer = 2 << 20;     // segment size of the small pool
constexpr size_t kMinLargeAlloc = 10 << 20;  // large requests under this share a segment
constexpr size_t kLargeBuffer = 20 << 20;    // the segment they share
constexpr size_t kRoundLarge = 2 << 20;      // larger requests round up to this

size_t round_size(size_t nbytes) {
  return nbytes < kMinBlockSize ? kMinBlockSize : (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t segment_size(size_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return (size + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

// A small block's rest is kept if it can hold any request; a large block's
// only if it can hold a large one, so that large segments are not nibbled
// away by pieces the small pool would serve.
bool worth_splitting(size_t block_size, size_t size, bool small_pool) {
  const size_t rest = block_size - size;
  return small_pool ? rest >= kMinBlockSize : rest > kSmallSize;
}

bool is_free(const Block* block) { return block != nullptr && !block->allocated && block->pending_events == 0; }

void update_peak(size_t& peak, size_t value) { peak = std::max(peak, value); }

}  // namespace

bool BlockOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return std::less<cudaStream_t>()(a->stream, b->stream);
  if (a->size != b->size) return a->size < b->size;
  return std::less<char*>()(a->ptr, b->ptr);
}

std::string format_bytes(size_t bytes) {
  static const char* const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = double(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f %s", v, units[u]);
  return text;
}

void* DeviceCache::allocate(size_t nbytes, cudaStream_t stream) {
  const size_t size = round_size(nbytes);
  std::lock_guard<std::mutex> lock(mutex_);
  if (pending_count_ != 0) process_events();
  BlockPool& pool = size <= kSmallSize ? small_ : large_;
  Block* block = take_free(pool, stream, size);
  if (block == nullptr) block = new_segment(pool, stream, size, nbytes);
  if (worth_splitting(block->size, size, &pool == &small_)) split(block, size);
  block->allocated = true;
  live_.emplace(block->ptr, block);
  stats_.allocated += block->size;
  stats_.active_blocks += 1;
  update_peak(stats_.max_allocated, stats_.allocated);
  return block->ptr;
}

Block* DeviceCache::take_free(BlockPool& pool, cudaStream_t stream, size_t size) {
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

Block* DeviceCache::new_segment(BlockPool& pool, cudaStream_t stream, size_t size, size_t requested) {
  const size_t bytes = segment_size(size);
  DeviceGuard guard(device_);
  // cudaMalloc is not enqueued on a stream, so CUDA forbids it while this
  // thread captures a graph unless the thread's mode is relaxed: the memory
  // it returns is outside the graph, which is what the graph's pool wants.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  EMBER_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  struct RestoreMode {
    cudaStreamCaptureMode mode;
    ~RestoreMode() { cudaThreadExchangeStreamCaptureMode(&mode); }
  } restore{mode};
  void* ptr = nullptr;
  cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // an allocation failure is not sticky; clear it and go on
    stats_.num_alloc_retries += 1;
    wait_for_events();
    release_cached_segments();
    err = cudaMalloc(&ptr, bytes);
    if (err == cudaErrorMemoryAllocation) {
      cudaGetLastError();
      stats_.num_ooms += 1;
      throw_out_of_memory(requested, bytes);
    }
  }
  if (err != cudaSuccess) throw_cuda_error(err, "cudaMalloc", __FILE__, __LINE__);
  stats_.num_device_allocs += 1;
  stats_.segments += 1;
  stats_.reserved += bytes;
  update_peak(stats_.max_reserved, stats_.reserved);
  auto* block = new Block;
  block->ptr = static_cast<char*>(ptr);
  block->size = bytes;
  block->stream = stream;
  block->pool = &pool;
  return block;
}

void DeviceCache::split(Block* block, size_t size) {
  auto* rest = new Block;
  rest->ptr = block->ptr + size;
  rest->size = block->size - size;
  rest->stream = block->stream;
  rest->pool = block->pool;
  rest->prev = block;
  rest->next = block->next;
  if (rest->next != nullptr) rest->next->prev = rest;
  block->next = rest;
  block->size = size;
  rest->pool->insert(rest);
}

void DeviceCache::free_block(Block* block) {
  BlockPool& pool = *block->pool;
  if (Block* prev = block->prev; is_free(prev)) {
    pool.erase(prev);
    block->ptr = prev->ptr;
    block->size += prev->size;
    block->prev = prev->prev;
    if (block->prev != nullptr) block->prev->next = block;
    delete prev;
  }
  if (Block* next = block->next; is_free(next)) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next != nullptr) block->next->prev = block;
    delete next;
  }
  pool.insert(block);
}

void DeviceCache::free(void* ptr) noexcept {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  if (it == live_.end()) return;  // not reachable through a DataPtr of this allocator
  Block* block = it->second;
  if (capturing_ && block->stream != capture_stream_) {
    held_.push_back(ptr);  // stays live until the graph's reset frees it again
    return;
  }
  live_.erase(it);
  block->allocated = false;
  stats_.allocated -= block->size;
  stats_.active_blocks -= 1;
  if (block->stream_uses.empty()) {
    free_block(block);
    return;
  }
  // Mark the work queued so far on every other stream that used the block;
  // the block is free once all of it is done.
  std::vector<cudaEvent_t> events;
  try {
    DeviceGuard guard(device_);  // a null (legacy) stream means the current device's
    for (cudaStream_t s : block->stream_uses) {
      events.push_back(acquire_event(device_));
      EMBER_CUDA_CHECK(cudaEventRecord(events.back(), s));
    }
  } catch (...) {
    // The context is lost or the runtime is unloading at exit: the block
    // cannot be shown to be idle, so it is never reused.
    return;
  }
  for (size_t i = 0; i < events.size(); ++i) pending_[block->stream_uses[i]].emplace_back(events[i], block);
  block->pending_events = int(events.size());
  pending_count_ += events.size();
  block->stream_uses.clear();
}

void DeviceCache::process_events() {
  for (auto it = pending_.begin(); it != pending_.end();) {
    auto& queue = it->second;
    while (!queue.empty()) {
      auto [event, block] = queue.front();
      const cudaError_t err = cudaEventQuery(event);
      if (err == cudaErrorNotReady) {
        cudaGetLastError();
        break;  // later events of this stream cannot be done either
      }
      if (err != cudaSuccess) throw_cuda_error(err, "cudaEventQuery", __FILE__, __LINE__);
      release_event(device_, event);
      queue.pop_front();
      pending_count_ -= 1;
      if (--block->pending_events == 0) free_block(block);
    }
    it = queue.empty() ? pending_.erase(it) : std::next(it);
  }
}

void DeviceCache::wait_for_events() {
  for (auto& [stream, queue] : pending_) {
    for (auto [event, block] : queue) {
      EMBER_CUDA_CHECK(cudaEventSynchronize(event));
      release_event(device_, event);
      if (--block->pending_events == 0) free_block(block);
    }
  }
  pending_.clear();
  pending_count_ = 0;
}

void DeviceCache::release_cached_segments() {
  for (BlockPool* pool : {&small_, &large_}) {
    for (auto it = pool->begin(); it != pool->end();) {
      Block* block = *it;
      const bool graph_pool =
          std::find(graph_streams_.begin(), graph_streams_.end(), block->stream) != graph_streams_.end();
      if (graph_pool || block->prev != nullptr || block->next != nullptr) {
        ++it;  // a live graph's memory, or part of a segment that still holds other blocks
        continue;
      }
      EMBER_CUDA_CHECK(cudaFree(block->ptr));
      stats_.num_device_frees += 1;
      stats_.segments -= 1;
      stats_.reserved -= block->size;
      it = pool->erase(it);
      delete block;
    }
  }
}

void DeviceCache::throw_out_of_memory(size_t requested, size_t segment) {
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) cudaGetLastError();
  std::ostringstream msg;
  msg << "CUDA out of memory: tried to allocate " << format_bytes(requested) << " (" << requested << " bytes";
  if (segment > round_size(requested)) msg << ", in a new cache segment of " << format_bytes(segment);
  msg << ") on cuda:" << device_ << ". The device has " << format_bytes(total_bytes) << " in total, of which "
      << format_bytes(free_bytes) << " is free; ember has " << format_bytes(stats_.allocated)
      << " allocated to tensors and " << format_bytes(stats_.reserved)
      << " reserved in its cache (already released what it could and retried). ";
  if (requested > total_bytes) {
    msg << "The request alone is larger than the device. ";
  }
  msg << "Lower the batch size, use activation checkpointing, or free tensors you no longer need.";
  throw OutOfMemoryError(msg.str());
}

void DeviceCache::record_stream(const void* ptr, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  EMBER_CHECK(it != live_.end(), "record_stream: " << ptr << " is not the start of a live allocation of ember's CUDA "
                                                   << "allocator on cuda:" << device_
                                                   << "; pass the tensor's storage, not a pointer into it");
  Block* block = it->second;
  if (stream == block->stream) return;  // its own stream needs no event
  auto& uses = block->stream_uses;
  if (std::find(uses.begin(), uses.end(), stream) == uses.end()) uses.push_back(stream);
}

void DeviceCache::begin_capture(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_ = true;
  capture_stream_ = stream;
  graph_streams_.push_back(stream);
}

std::vector<void*> DeviceCache::end_capture() {
  std::lock_guard<std::mutex> lock(mutex_);
  capturing_ = false;
  capture_stream_ = nullptr;
  return std::exchange(held_, {});
}

void DeviceCache::end_graph_pool(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = std::find(graph_streams_.begin(), graph_streams_.end(), stream);
  if (it != graph_streams_.end()) graph_streams_.erase(it);
}

void DeviceCache::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  DeviceGuard guard(device_);
  wait_for_events();
  release_cached_segments();
}

MemoryStats DeviceCache::stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void DeviceCache::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.max_allocated = stats_.allocated;
  stats_.max_reserved = stats_.reserved;
}

std::string DeviceCache::summary() {
  const DeviceProperties& props = properties(device_);
  std::lock_guard<std::mutex> lock(mutex_);
  size_t cached = 0, largest = 0, free_blocks = 0;
  for (const BlockPool* pool : {&small_, &large_}) {
    for (const Block* b : *pool) {
      cached += b->size;
      largest = std::max(largest, b->size);
      free_blocks += 1;
    }
  }
  const MemoryStats& s = stats_;
  std::ostringstream out;
  out << "ember CUDA memory, cuda:" << device_ << " (" << props.name << ", " << format_bytes(props.total_memory)
      << ")\n"
      << "  allocated   " << format_bytes(s.allocated) << " in " << s.active_blocks << " blocks (peak "
      << format_bytes(s.max_allocated) << ")\n"
      << "  reserved    " << format_bytes(s.reserved) << " in " << s.segments << " segments (peak "
      << format_bytes(s.max_reserved) << ")\n"
      << "  cached free " << format_bytes(cached) << " in " << free_blocks << " blocks (largest "
      << format_bytes(largest) << "), " << pending_count_ << " waiting for other streams\n"
      << "  cudaMalloc " << s.num_device_allocs << ", cudaFree " << s.num_device_frees
      << ", retries after freeing the cache " << s.num_alloc_retries << ", out-of-memory errors " << s.num_ooms << "\n";
  return out.str();
}

}  // namespace ember::cuda::detail
