// Subset: the examples of another dataset at a list of indices
// (torch.utils.data.Subset), e.g. a train/validation split.
//
// Contract: example i of the subset is example indices[i] of the dataset;
// every index is checked against dataset->size() here. get_batch maps the
// indices and forwards to the dataset's own get_batch, so the dataset's fast
// collation (TensorDataset's row gather) still applies.
#pragma once

#include <memory>
#include <vector>

#include "ember/data/dataset.h"

namespace ember::data {

class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices);

  int64_t size() const override { return int64_t(indices_.size()); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices, const HostAllocator& alloc) const override;

  const std::vector<int64_t>& indices() const { return indices_; }

 private:
  int64_t map(int64_t index) const;

  std::shared_ptr<const Dataset> dataset_;
  std::vector<int64_t> indices_;
};

}  // namespace ember::data
