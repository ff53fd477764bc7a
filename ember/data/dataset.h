// Datasets: indexable collections of (input, target) examples, the source a
// DataLoader draws its batches from.
//
// Contract:
// - size() examples, numbered 0 .. size() - 1; get(i) returns example i and
//   throws ember::Error for an index outside that range.
// - get() and get_batch() are const and must be safe to call from several
//   threads at once: DataLoader workers call them concurrently.
// - get_batch(indices, alloc) returns the examples at `indices`, in that
//   order, stacked along a new dim 0: input (B, *input shape), target
//   (B, *target shape), B = indices.size(), in host tensors made by alloc
//   (pinned memory when the loader pins, see ember/data/collate.h). The default
//   stacks get(i) one example at a time; a dataset that holds its data in
//   tensors overrides it to gather the rows directly (TensorDataset).
// - Examples and batches carry no autograd history: they are data.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/core/tensor.h"

namespace ember::data {

struct Example {
  Tensor input;
  Tensor target;
};

// B examples stacked along dim 0.
struct Batch {
  Tensor input;   // (B, *input shape)
  Tensor target;  // (B, *target shape)
};

class HostAllocator;

class Dataset {
 public:
  virtual ~Dataset() = default;

  virtual int64_t size() const = 0;
  virtual Example get(int64_t index) const = 0;
  virtual Batch get_batch(const std::vector<int64_t>& indices, const HostAllocator& alloc) const;
};

}  // namespace ember::data
