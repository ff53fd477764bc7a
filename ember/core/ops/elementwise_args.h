// ElementwiseArgs: the strided description of an elementwise op that every
// elementwise kernel (CPU and CUDA) consumes.
//
// Contract: operand 0 is the output; operands 1.. are inputs already
// broadcast to the output's shape (broadcast dims have stride 0). Strides
// are in elements. Dims are coalesced where the memory layout of every
// operand allows, so a contiguous op has ndim == 1 and `contiguous` set,
// after the dims are put in the output's memory order (outermost first)
// when its strides are all nonzero and not already in row-major order, so
// that an op on channels-last tensors is as flat as a contiguous one;
// which kernels use for a flat (vectorized) fast path. The struct is plain
// data so it can be passed by value to a CUDA kernel.
#pragma once

#include <cstdint>

#include "ember/core/tensor.h"

namespace ember {

inline constexpr int kMaxElementwiseDims = 12;
inline constexpr int kMaxElementwiseOperands = 4;

struct ElementwiseArgs {
  int ndim = 0;
  int noperands = 0;
  int64_t numel = 0;
  int device = 0;                           // the CUDA device index of the operands (0 on the CPU)
  bool contiguous = false;                  // every operand dense and in the same order: index i is element i
  int64_t sizes[kMaxElementwiseDims] = {};  // innermost dim last
  int64_t strides[kMaxElementwiseOperands][kMaxElementwiseDims] = {};  // [operand][dim]
  char* data[kMaxElementwiseOperands] = {};                            // first element of each operand
};

// Builds the args for out = f(inputs...): broadcasts each input to
// out.shape(), coalesces dims. `op` names the caller in errors (too many
// dims, an input that does not broadcast to the output).
ElementwiseArgs make_elementwise_args(const char* op, const Tensor& out, std::initializer_list<const Tensor*> inputs);

// The uninitialized output of an elementwise op of `shape`: laid out as the
// first input of that shape that is not broadcast (no stride 0 in a dim of
// size > 1), as a copy of it would be (MemoryFormat::Preserve: its own
// strides when dense, else its suggested format's), so a channels-last
// input, or a slice of one, gives a channels-last output as in PyTorch;
// contiguous when no input qualifies.
Tensor empty_elementwise_output(const Shape& shape, DType dtype, Device device,
                                std::initializer_list<const Tensor*> inputs);

// The shape a and b broadcast to; an ember::Error naming op and both shapes
// if they do not.
Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b);

}  // namespace ember
