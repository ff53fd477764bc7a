// TensorDataset: rows of an input tensor and a target tensor.
#include "ember/data/tensor_dataset.h"

#include "ember/data/collate.h"

namespace ember::data {
namespace {

Tensor checked(const char* name, const Tensor& t) {
  EMBER_CHECK(t.defined(), "TensorDataset: the " << name << " tensor is undefined");
  EMBER_CHECK(t.dim() >= 1, "TensorDataset: the " << name << " tensor has shape " << shape_str(t.shape())
                                                  << "; it needs a dim 0 of examples");
  EMBER_CHECK(t.device().is_cpu(), "TensorDataset: the " << name << " tensor is on " << t.device()
                                                         << "; a dataset holds host tensors (the DataLoader's device "
                                                            "option moves batches to the GPU), so pass ."
                                                         << "cpu() of it");
  return t.detach().contiguous();
}

}  // namespace

TensorDataset::TensorDataset(const Tensor& inputs, const Tensor& targets)
    : inputs_(checked("inputs", inputs)), targets_(checked("targets", targets)) {
  EMBER_CHECK(inputs_.size(0) == targets_.size(0), "TensorDataset: inputs of shape "
                                                       << shape_str(inputs_.shape()) << " and targets of shape "
                                                       << shape_str(targets_.shape())
                                                       << " differ in dim 0; both need one row per example");
}

Example TensorDataset::get(int64_t index) const {
  EMBER_CHECK(index >= 0 && index < size(),
              "TensorDataset::get: index " << index << " is out of range for a dataset of " << size() << " examples");
  return {inputs_.select(0, index), targets_.select(0, index)};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices, const HostAllocator& alloc) const {
  return {gather_rows(inputs_, indices, alloc), gather_rows(targets_, indices, alloc)};
}

}  // namespace ember::data
