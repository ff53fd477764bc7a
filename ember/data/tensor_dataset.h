// TensorDataset: examples that are the rows of two tensors (torch.utils.data
// .TensorDataset with an input and a target).
//
// Contract:
// - inputs (N, ...) and targets (N, ...) are CPU tensors with the same N.
//   They are detached and made contiguous once, here (a copy only when they
//   are not contiguous already); the dataset shares their storage otherwise.
// - get(i) returns views inputs[i], targets[i] of that storage.
// - get_batch gathers the rows of a batch straight into the (possibly
//   pinned) batch tensors with gather_rows: no per-example tensors.
#pragma once

#include "ember/data/dataset.h"

namespace ember::data {

class TensorDataset : public Dataset {
 public:
  TensorDataset(const Tensor& inputs, const Tensor& targets);

  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices, const HostAllocator& alloc) const override;

  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
};

}  // namespace ember::data
