// Helpers every op front-end shares, so that errors read the same everywhere.
#pragma once

#include <string>

#include "ember/core/tensor.h"

namespace ember::detail {

// "[2, 3] float32 on cuda:0": how an error names a tensor.
std::string describe(const Tensor& t);
// "[2, 3] float32": describe() without the device, for tensors whose device
// is already known to the reader (all on the CPU, say).
std::string describe_shape_dtype(const Tensor& t);

// `dim` wrapped into [0, n) for a tensor with `ndim` dims (a 0-dim tensor
// accepts -1 and 0, as in PyTorch); an ember::Error naming op, the shape and
// the valid range otherwise.
int64_t wrap_dim(const char* op, int64_t dim, int64_t ndim, const Shape& shape);

// Points t's TensorImpl at value's storage, sizes, strides, offset and dtype
// (PyTorch's param.data = value): every handle to t sees the new data; t
// keeps its autograd identity (leaf, requires_grad, hooks) and its grad.
void point_at(const Tensor& t, const Tensor& value);

}  // namespace ember::detail
