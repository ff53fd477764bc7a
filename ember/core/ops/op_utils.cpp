// Shared front-end helpers (see op_utils.h).
#include "ember/core/ops/op_utils.h"

#include <algorithm>

namespace ember::detail {

std::string describe(const Tensor& t) { return describe_shape_dtype(t) + " on " + t.device().str(); }

std::string describe_shape_dtype(const Tensor& t) { return shape_str(t.shape()) + " " + dtype_name(t.dtype()); }

int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim, const Shape& shape) {
  int64_t n = std::max<int64_t>(ndim, 1);
  EMBER_CHECK(dim >= -n && dim < n, op << ": dim " << dim << " is out of range for a tensor of shape "
                                       << shape_str(shape) << " (valid dims: " << -n << " to " << n - 1 << ")");
  return dim < 0 ? dim + n : dim;
}

void point_at(const Tensor& t, const Tensor& value) {
  TensorImpl* impl = t.impl();
  impl->storage = value.storage();
  impl->sizes = value.sizes();
  impl->strides = value.strides();
  impl->offset = value.storage_offset();
  impl->dtype = value.dtype();
  impl->is_view = false;
}

}  // namespace ember::detail
