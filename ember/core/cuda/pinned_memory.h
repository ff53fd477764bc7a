// Pinned (page-locked) host memory, for fast and asynchronous copies
// between host and GPU. Public; includes no CUDA header.
//
// Contract:
// - pinned_empty() returns a CPU tensor whose memory comes from a cache of
//   cudaHostAlloc'ed blocks (cudaHostAlloc costs milliseconds; the cache
//   makes a pinned buffer per batch cheap). Sizes round up to a power of two
//   (at least 4 KiB); blocks are kept for the life of the process.
// - A copy from pinned memory to the GPU (Tensor::copy_, Tensor::to) is
//   asynchronous on the current stream: it returns before the bytes have
//   moved. Do not write into the pinned tensor again until that stream has
//   passed the copy (synchronize it, or wait on an Event). Dropping the
//   tensor is always safe: the copy recorded its use (record_host_use), and
//   the cache does not hand the block out again before the copy is done.
//   The simple pattern is one pinned_empty() per batch.
// - Copies from the GPU into host memory, pinned or not, are synchronous.
#pragma once

#include "ember/core/allocator.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/tensor.h"

namespace ember::cuda {

// A contiguous CPU tensor in pinned memory; needs a CUDA device.
Tensor pinned_empty(const Shape& shape, DType dtype = kDefaultFloat);
// The allocator behind pinned_empty (device: kCPU), for code that makes a
// Storage directly.
Allocator& pinned_allocator();
// True when ptr points into a live block of the pinned cache.
bool is_pinned(const void* ptr);
// Declares that the work queued so far on `stream` reads or writes the
// pinned block holding ptr, so the block is not reused before that work has
// finished. Returns false, doing nothing, when ptr is not pinned memory of
// this cache.
bool record_host_use(const void* ptr, Stream stream);

}  // namespace ember::cuda
