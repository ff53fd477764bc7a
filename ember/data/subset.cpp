// Subset: index remapping in front of another dataset.
#include "ember/data/subset.h"

#include <utility>

namespace ember::data {

Subset::Subset(std::shared_ptr<const Dataset> dataset, std::vector<int64_t> indices)
    : dataset_(std::move(dataset)), indices_(std::move(indices)) {
  EMBER_CHECK(dataset_ != nullptr, "Subset: the dataset is null");
  const int64_t n = dataset_->size();
  for (size_t k = 0; k < indices_.size(); ++k) {
    EMBER_CHECK(indices_[k] >= 0 && indices_[k] < n, "Subset: index " << indices_[k] << " (position " << k
                                                                      << ") is out of range for a dataset of " << n
                                                                      << " examples");
  }
}

int64_t Subset::map(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size(),
              "Subset: index " << index << " is out of range for a subset of " << size() << " examples");
  return indices_[size_t(index)];
}

Example Subset::get(int64_t index) const { return dataset_->get(map(index)); }

Batch Subset::get_batch(const std::vector<int64_t>& indices, const HostAllocator& alloc) const {
  std::vector<int64_t> mapped(indices.size());
  for (size_t k = 0; k < indices.size(); ++k) mapped[k] = map(indices[k]);
  return dataset_->get_batch(mapped, alloc);
}

}  // namespace ember::data
