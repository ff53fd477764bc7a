// Kernel signature and stub of embedding's weight gradient: the rows of
// grad_out added into the rows their indices name, in a fixed order, so the
// result is the same bits on every run and on every device.
//
// Contract (what every device's kernel may rely on and must do):
// - The front-end (embedding's backward, ember/core/ops/index.cpp) passes a
//   dense row-major grad_weight (num_embeddings, dim) of a floating dtype,
//   grad_out (num_indices, dim) of the same dtype with any strides (0
//   included), and num_indices dense int64 or int32 indices; any size may
//   be 0.
// - Every element of grad_weight is written (its previous contents do not
//   matter): row r is the sum over positions p with indices[p] == r of
//   grad_out row p, added in increasing p from zero in acc_t of the dtype
//   (float for float32, float16 and bfloat16, double for float64) and
//   rounded once to the dtype. A row no index names is zero. The CPU and
//   CUDA kernels add the same values in the same order, so they agree bit
//   for bit.
// - Indices lie in [0, num_embeddings): embedding's forward has checked them
//   (on CUDA its check may report later, ember/core/cuda/index_error.h). The
//   CPU kernel checks again and throws the forward's message; the CUDA
//   kernel leaves out an index outside the range.
// - CUDA: no host synchronization and scratch memory from the caching
//   allocator only, so the kernel can be captured in a CUDA graph.
// EmbeddingBackwardArgs is plain data; `op` is read on the host only.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

struct EmbeddingBackwardArgs {
  int device = 0;               // the CUDA device index of every operand (0 on the CPU)
  void* grad_weight = nullptr;  // (num_embeddings, dim), dense
  const void* grad_out = nullptr;
  int64_t grad_out_row_stride = 0;  // in elements
  int64_t grad_out_col_stride = 0;  // in elements
  const void* indices = nullptr;    // num_indices dense values of index_dtype
  int64_t num_indices = 0;
  int64_t num_embeddings = 0;
  int64_t dim = 0;
  DType dtype = DType::Float32;
  DType index_dtype = DType::Int64;
  const char* op = "embedding";
};

using EmbeddingBackwardKernelFn = void(const EmbeddingBackwardArgs& args);
extern KernelStub<EmbeddingBackwardKernelFn> embedding_backward_stub;

}  // namespace ember
