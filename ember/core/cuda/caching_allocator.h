// The CUDA caching allocator: the Allocator behind every CUDA Storage, and
// its statistics. Public; includes no CUDA header.
//
// Design (after PyTorch's CUDACachingAllocator):
// - cudaMalloc and cudaFree synchronize the device and cost tens of
//   microseconds, so memory is taken from the driver in segments and never
//   given back while the process runs, except by empty_cache() or to retry a
//   failed cudaMalloc. In steady state (a training loop) no cudaMalloc runs.
// - Sizes round up to a multiple of 512 bytes. Requests of at most 1 MiB come
//   from the small pool, carved out of 2 MiB segments; larger ones from the
//   large pool, whose segments are 20 MiB for requests under 10 MiB and the
//   request rounded up to 2 MiB otherwise. Keeping small blocks apart stops
//   them from fragmenting the large segments.
// - A request takes the smallest free block of its pool that fits (best fit,
//   ordered by stream, size, address) and splits off the rest when that rest
//   is worth keeping (>= 512 bytes in the small pool, > 1 MiB in the large).
//   A freed block merges with free neighbours of its segment.
// - Memory belongs to the stream it was allocated on (the current stream of
//   the device at allocate()) and is only reused on that stream: work queued
//   on one stream runs in order, so a block freed by the host while a kernel
//   on its stream still uses it is safe to hand to the next op of that stream.
//   When memory is also used on another stream, say so with record_stream():
//   its free then records an event on each such stream, and the block returns
//   to the pool only when those events have completed.
// - When cudaMalloc fails, the allocator waits for those events, frees every
//   cached segment that holds no live block, and tries once more. Then it
//   throws ember::OutOfMemoryError with the size asked for, the device's total
//   and free memory, what ember holds, and what to do; the failure is cleared,
//   so the process can go on (with a smaller batch, say).
// - CUDA graphs (ember/core/cuda/graph.h) capture on a stream of the graph's own,
//   so the blocks of that stream are the graph's private pool: replays on
//   any stream reuse them and nothing else does. cudaMalloc during a capture
//   runs in the relaxed capture mode (it is not a stream operation). While
//   a device captures, a freed block of another stream is held live, not
//   reused, until the graph's reset: the replays may still use it.
// - One mutex per device. Blocks are found by pointer on free through a
//   per-device map, and each device has its own deleter function, so a free
//   never searches other devices. allocate() costs a lock, a set lookup and a
//   map insert: a few hundred nanoseconds.
// - The allocator registers itself for DeviceType::CUDA at load time; it is
//   never destroyed, so tensors freed during static destruction are safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "ember/core/cuda/stream.h"

namespace ember {
class Storage;
}

namespace ember::cuda {

struct MemoryStats {
  size_t allocated = 0;            // bytes in live blocks (rounded sizes)
  size_t max_allocated = 0;        // peak of allocated since the last reset
  size_t reserved = 0;             // bytes held from cudaMalloc, live or cached
  size_t max_reserved = 0;         // peak of reserved since the last reset
  size_t active_blocks = 0;        // live allocations
  size_t segments = 0;             // cudaMalloc'ed chunks held
  uint64_t num_device_allocs = 0;  // cudaMalloc calls that succeeded
  uint64_t num_device_frees = 0;   // cudaFree calls
  uint64_t num_alloc_retries = 0;  // failed cudaMallocs retried after freeing the cache
  uint64_t num_ooms = 0;           // OutOfMemoryErrors thrown
};

// Statistics of a device (-1: the current device).
MemoryStats memory_stats(int device = -1);
size_t memory_allocated(int device = -1);
size_t max_memory_allocated(int device = -1);
size_t memory_reserved(int device = -1);
size_t max_memory_reserved(int device = -1);
uint64_t num_device_allocs(int device = -1);
// Sets the peaks to the current values.
void reset_peak_memory_stats(int device = -1);
// A readable table of the statistics, for logs.
std::string memory_summary(int device = -1);

// Waits for pending stream uses and returns every cached segment that holds
// no live block to the driver, on all devices (for other processes or
// libraries; ember itself never needs it).
void empty_cache();

// Declares that the allocation starting at `ptr` (the base of a Storage, not
// a pointer into it) is used by work on `stream`, so that freeing it waits
// for that work before the memory is reused. Needed whenever a tensor is
// used on a stream other than the one it was allocated on.
void record_stream(const void* ptr, Stream stream);
void record_stream(const Storage& storage, Stream stream);

}  // namespace ember::cuda
