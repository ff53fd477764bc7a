// The CPU allocator: 64-byte aligned host memory, with a cache of large
// blocks.
//
// Contract:
// - Blocks of at least kCpuCacheMinBytes are rounded up to a size class (a
//   multiple of an eighth of the power of two at or above the request, so
//   at most 12.5% is wasted) and, when freed, kept for the next request of
//   the same class instead of going back to the C library. glibc serves
//   blocks above its mmap threshold with mmap and unmaps them on free, and
//   gives the top of its heap back to the system once enough of it is
//   free, so without the cache every step of a training loop maps some of
//   its activations afresh and takes a page fault on the first touch of
//   each page (with the cache from 1 MiB up, ember-train's CNN still
//   faulted about 84 pages a step on its 64x64x7x7 activations; from
//   64 KiB up, none).
// - The cache holds at most EMBER_CPU_CACHE_MB mebibytes (read once, at the
//   first allocation; default 1024; 0 turns the cache off). A block freed
//   when the cache is full goes back to the C library. Smaller blocks are
//   plain aligned_alloc/free (malloc's own bins already reuse them).
// - Under AddressSanitizer nothing is cached, so that a use after free is
//   still reported.
// - Thread-safe, and safe across fork() (the cache's lock is held over it).
// - An exhausted host memory is an OutOfMemoryError (after emptying the
//   cache and retrying once) naming the size and the advice.
#pragma once

#include <cstddef>

#include "ember/core/allocator.h"

namespace ember {

inline constexpr size_t kCpuCacheMinBytes = size_t(1) << 16;  // 64 KiB

Allocator& cpu_allocator();

// Bytes held in the cache (free, ready for reuse); for tests and logs.
size_t cpu_cached_bytes();
// Gives every cached block back to the C library.
void cpu_empty_cache();

}  // namespace ember
