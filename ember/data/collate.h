// Collation: how the examples of a batch become one pair of host tensors.
//
// Contract:
// - HostAllocator::empty(shape, dtype) makes a contiguous CPU tensor, in
//   pinned memory (ember/core/cuda/pinned_memory.h) when the allocator was made
//   with pinned = true. Pinned memory needs a visible CUDA device: making a
//   pinned HostAllocator without one is an ember::Error (DataLoader only
//   asks for one when a device is visible, see ember/data/data_loader.h).
// - stack_examples(dataset, indices, alloc) calls dataset.get(i) for each
//   index and copies the examples into out[k]; every example must be a pair
//   of host tensors with the shapes and dtypes of the first.
// - gather_rows(source, indices, alloc) copies rows source[indices[k]] of a
//   contiguous CPU tensor straight into out[k], one memcpy a row and no
//   per-example tensor: the fast path for datasets held in memory.
// - Both run without recording autograd history, and name the offending
//   index (and its position in the batch) in their errors.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/core/tensor.h"
#include "ember/data/dataset.h"

namespace ember::data {

class HostAllocator {
 public:
  explicit HostAllocator(bool pinned = false);
  bool pinned() const { return pinned_; }
  Tensor empty(const Shape& shape, DType dtype) const;

 private:
  bool pinned_;
};

Batch stack_examples(const Dataset& dataset, const std::vector<int64_t>& indices, const HostAllocator& alloc);
Tensor gather_rows(const Tensor& source, const std::vector<int64_t>& indices, const HostAllocator& alloc);

}  // namespace ember::data
