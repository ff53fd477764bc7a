// scatter and gather: how DataParallel splits its inputs across devices and
// joins its replicas' outputs. Device-generic (CUDA devices, or the CPU
// listed several times) and differentiable.
//
// scatter(inputs, devices, dim, chunk_sizes) splits every tensor of `inputs`
// along dim and moves piece k to devices[k]. It returns one Value per piece,
// each with the structure of `inputs` (None goes to every piece).
// - Without chunk_sizes the pieces are torch.chunk's: ceil(n / devices) rows
//   each, the last one smaller, and fewer pieces than devices when n is small
//   (n = 5 over 4 devices gives [2, 2, 1]: three pieces).
// - With chunk_sizes, those sizes: positive, at most one per device, summing
//   to n; piece k goes to devices[k].
// - Every tensor must have the same size along dim. PyTorch zips pieces of
//   differently sized inputs and silently drops the rest; here it is an error
//   naming both sizes. A 0-dim tensor cannot be split, an empty batch neither.
// - A piece that is already on its device is a view of the input (no copy).
// - Backward (ScatterBackward): the pieces' gradients are copied back to the
//   input's device and concatenated; a piece without gradient counts as zeros.
//
// gather(outputs, destination, dim) joins the replicas' outputs on
// `destination`: tensors are concatenated along dim (every other dim and the
// dtype must match), lists elementwise (the structures must be equal), None
// stays None. With several outputs that are all 0-dim tensors (a loss per
// replica), they are stacked into a vector with a one-time warning, as
// PyTorch's gather does. A single output is only moved to destination.
// - Backward (GatherBackward): the gradient is split along dim and each piece
//   copied back to the device of the output it came from.
//
// Both backwards are built from differentiable ops (narrow, to, cat), so
// create_graph sees through them.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/core/tensor.h"
#include "ember/parallel/data_parallel/value.h"

namespace ember::parallel {

// torch.chunk's piece sizes for n rows over `pieces` devices.
std::vector<int64_t> chunk_sizes_for(int64_t n, size_t pieces);

std::vector<Value> scatter(const Value& inputs, const std::vector<Device>& devices, int64_t dim = 0,
                           const std::vector<int64_t>& chunk_sizes = {});
Value gather(const std::vector<Value>& outputs, Device destination, int64_t dim = 0);

// The tensor forms: sizes.size() pieces, piece k to devices[k]
// (sizes.size() <= devices.size(), sizes summing to input.size(dim)).
TensorList scatter_tensor(const Tensor& input, const std::vector<Device>& devices, const std::vector<int64_t>& sizes,
                          int64_t dim);
Tensor gather_tensors(const TensorList& parts, Device destination, int64_t dim);

}  // namespace ember::parallel
