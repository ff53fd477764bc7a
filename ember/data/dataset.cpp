// The default collation of a dataset: stack get(i) of each index.
#include "ember/data/dataset.h"

#include "ember/data/collate.h"

namespace ember::data {

Batch Dataset::get_batch(const std::vector<int64_t>& indices, const HostAllocator& alloc) const {
  return stack_examples(*this, indices, alloc);
}

}  // namespace ember::data
