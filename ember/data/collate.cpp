// Host allocation (pinned or not) and the two ways a batch is collated.
#include "ember/data/collate.h"

#include <cstring>

#include "ember/core/cuda/device.h"
#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"
#if EMBER_WITH_CUDA
#include "ember/core/cuda/pinned_memory.h"
#endif

namespace ember::data {
namespace {

using ember::detail::describe;
using ember::detail::describe_shape_dtype;

// Checks one part (input or target) of example `index`, at `position` in
// the batch, against the first example's.
void check_part(const char* part, const Tensor& t, const Tensor& first, int64_t index, size_t position,
                int64_t first_index) {
  EMBER_CHECK(t.defined(), "stack_examples: example " << index << " (position " << position
                                                      << " in the batch) has an undefined " << part);
  EMBER_CHECK(t.device().is_cpu(), "stack_examples: example " << index << " has its " << part << " on " << t.device()
                                                              << "; a dataset returns host tensors (the DataLoader's "
                                                                 "device option moves batches to the GPU)");
  if (!first.defined()) return;
  EMBER_CHECK(t.shape() == first.shape() && t.dtype() == first.dtype(),
              "stack_examples: example " << index << " (position " << position << " in the batch) has " << part << " "
                                         << describe_shape_dtype(t) << " but example " << first_index
                                         << " (position 0) has " << describe_shape_dtype(first)
                                         << "; every example of a batch must have the same shape and dtype");
}

}  // namespace

HostAllocator::HostAllocator(bool pinned) : pinned_(pinned) {
  EMBER_CHECK(!pinned || cuda::is_available(),
              "HostAllocator: pinned memory needs a visible CUDA device, but none is (CUDA_VISIBLE_DEVICES="
                  << cuda::visible_devices_env() << "); use ordinary host memory (pinned = false)");
}

Tensor HostAllocator::empty(const Shape& shape, DType dtype) const {
#if EMBER_WITH_CUDA
  if (pinned_) return cuda::pinned_empty(shape, dtype);
#endif
  return ember::empty(shape, dtype, kCPU);
}

Batch stack_examples(const Dataset& dataset, const std::vector<int64_t>& indices, const HostAllocator& alloc) {
  EMBER_CHECK(!indices.empty(), "stack_examples: no indices; a batch holds at least one example");
  NoGradGuard no_grad;
  const int64_t batch_size = int64_t(indices.size());
  Batch batch;
  Tensor first_input, first_target;
  for (size_t k = 0; k < indices.size(); ++k) {
    Example ex = dataset.get(indices[k]);
    check_part("input", ex.input, first_input, indices[k], k, indices[0]);
    check_part("target", ex.target, first_target, indices[k], k, indices[0]);
    if (k == 0) {
      first_input = ex.input;
      first_target = ex.target;
      Shape in_shape = ex.input.shape(), target_shape = ex.target.shape();
      in_shape.insert(in_shape.begin(), batch_size);
      target_shape.insert(target_shape.begin(), batch_size);
      batch.input = alloc.empty(in_shape, ex.input.dtype());
      batch.target = alloc.empty(target_shape, ex.target.dtype());
    }
    batch.input.select(0, int64_t(k)).copy_(ex.input);
    batch.target.select(0, int64_t(k)).copy_(ex.target);
  }
  return batch;
}

Tensor gather_rows(const Tensor& source, const std::vector<int64_t>& indices, const HostAllocator& alloc) {
  EMBER_CHECK(source.defined() && source.dim() >= 1,
              "gather_rows: the source must be a tensor of at least one dim (rows along dim 0)");
  EMBER_CHECK(source.device().is_cpu() && source.is_contiguous(),
              "gather_rows: the source " << describe(source)
                                         << " must be a contiguous CPU tensor; call .contiguous().cpu() once first");
  Shape shape = source.shape();
  const int64_t rows = shape[0];
  shape[0] = int64_t(indices.size());
  int64_t row_numel = 1;
  for (size_t d = 1; d < shape.size(); ++d) row_numel *= shape[d];
  const size_t row_bytes = size_t(row_numel) * source.element_size();
  Tensor out = alloc.empty(shape, source.dtype());
  const char* src = static_cast<const char*>(source.data_ptr());
  char* dst = static_cast<char*>(out.data_ptr());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    EMBER_CHECK(i >= 0 && i < rows, "gather_rows: index " << i << " (position " << k << " in the batch) is out of "
                                                          << "range for a source of " << rows << " rows (shape "
                                                          << shape_str(source.shape()) << ")");
    if (row_bytes != 0) std::memcpy(dst + k * row_bytes, src + size_t(i) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace ember::data
