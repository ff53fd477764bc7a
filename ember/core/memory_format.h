// The stride rules of memory formats (MemoryFormat in ember/core/tensor.h).
//
// Contract: strides are in elements; a size of 0 counts as 1 when strides
// are made (as PyTorch does), so every shape has well-defined strides.
//   Contiguous    row-major: the last dim has stride 1.
//   ChannelsLast  a 4-D (N, C, H, W) shape stored as (N, H, W, C): strides
//                 (H*W*C, 1, W*C, C). Any other rank is an ember::Error.
//   Preserve      the strides of the tensor a copy is made from, when they
//                 are dense and non-overlapping; else its suggested format's.
#pragma once

#include "ember/core/tensor.h"

namespace ember {

Shape contiguous_strides(const Shape& sizes);
// Contiguous or ChannelsLast; `op` names the caller in the error for a
// ChannelsLast shape that is not 4-D (or for Preserve, which has no
// strides of its own).
Shape format_strides(const char* op, const Shape& sizes, MemoryFormat format);
// Whether the elements lie densely in format's order, ignoring the strides
// of size-1 dims (an empty tensor is contiguous whatever its strides, and
// channels-last when its strides are channels-last's, as in PyTorch).
bool strides_follow(const Shape& sizes, const Shape& strides, MemoryFormat format);
// Whether a 4-D layout orders its strides as channels-last does (C
// innermost, then W, H, N; dense or not), PyTorch's
// is_channels_last_strides_2d: the strides of size-1 dims count, so a
// one-channel tensor's strides say which format it was made in.
bool strides_like_channels_last(const Shape& sizes, const Shape& strides);
// Whether some order of the dims makes the strides contiguous.
bool non_overlapping_and_dense(const Shape& sizes, const Shape& strides);
// The strides a copy of t keeps under MemoryFormat::Preserve.
Shape preserved_strides(const Tensor& t);
// Whether a and b lay out `sizes` alike (the strides of size-1 dims aside).
bool same_layout(const Shape& sizes, const Shape& a, const Shape& b);
// t when its elements are one dense block in some order, else a contiguous
// copy: what the multi-tensor kernels, which walk memory flat, take.
Tensor dense_block(const Tensor& t);
// A copy of t (no history) laid out as `like`, whose shape t must have.
Tensor copy_like(const Tensor& t, const Tensor& like);

}  // namespace ember
