// Kernel signatures and stubs of the indexing family. Two kernels serve
// every indexing op: gather (index_select, gather, embedding) reads at an
// indexed position, scatter-add (scatter_add, index_add, one_hot) adds at
// one.
//
// Contract: the front-end (core/ops/index.cpp) has checked shapes, dtypes
// and devices and built IndexArgs; the kernel checks the index values.
// - iter walks the iteration shape with three operands:
//     gather:      0 = out, 1 = x restrided,   2 = index   out[p] = x[p; dim <- index[p]]
//     scatter-add: 0 = x restrided, 1 = src,   2 = index   x[p; dim <- index[p]] += src[p]
//   "x restrided" is the indexed tensor seen with the iteration shape and
//   stride 0 along dim, so element p of it plus index[p] * dim_stride is the
//   addressed element. Operand 2 is int64 or int32 (index_dtype); the others
//   are `dtype`.
// - Every index must lie in [0, dim_size). The kernel checks all of
//   `index` (a dense copy of every index value) before it writes anything,
//   and throws an ember::Error naming `op`, the bad value, `dim` and
//   dim_size. (A CUDA kernel will raise a device-side flag instead and the
//   launcher throw the same error.)
// - Scatter-add accumulates: repeated indices add up (CUDA: atomics).
//   Half types add in float and round once.
// IndexArgs is plain data that a CUDA kernel can take by value; `op` is
// read on the host only.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "core/kernel_stub.h"
#include "core/ops/elementwise_args.h"

namespace ember {

struct IndexArgs {
  ElementwiseArgs iter;
  int64_t dim_stride = 0;  // stride of the indexed tensor along dim, in elements
  int64_t dim_size = 0;    // valid indices: [0, dim_size)
  int64_t dim = 0;         // for the error message
  const void* index = nullptr;  // index_numel dense values of index_dtype
  int64_t index_numel = 0;
  DType dtype = DType::Float32;
  DType index_dtype = DType::Int64;
  const char* op = "";
};

using IndexKernelFn = void(const IndexArgs& args);

extern KernelStub<IndexKernelFn> gather_stub;
extern KernelStub<IndexKernelFn> scatter_add_stub;

}  // namespace ember
