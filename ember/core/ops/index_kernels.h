// Kernel signatures and stubs of the indexing family. Two kernels serve
// every indexing op: gather (index_select, gather, embedding) reads at an
// indexed position, scatter-add (scatter_add, index_add, one_hot) adds at
// one.
//
// Contract: the front-end (ember/core/ops/index.cpp) has checked shapes, dtypes
// and devices and built IndexArgs; the kernel checks the index values.
// - iter walks the iteration shape with three operands:
//     gather:      0 = out, 1 = x restrided,   2 = index   out[p] = x[p; dim <- index[p]]
//     scatter-add: 0 = x restrided, 1 = src,   2 = index   x[p; dim <- index[p]] += src[p]
//   "x restrided" is the indexed tensor seen with the iteration shape and
//   stride 0 along dim, so element p of it plus index[p] * dim_stride is the
//   addressed element. Operand 2 is int64 or int32 (index_dtype); the others
//   are `dtype`.
// - Every index must lie in [0, dim_size). The CPU kernel checks all of
//   `index` (a dense copy of every index value) before it writes anything
//   and throws index_out_of_range(args, value) for the first bad one. On
//   CUDA a check kernel finds the first bad one on the device, without the
//   host waiting for it; the same message is raised later, by the next call
//   that waits for the device or checks indices (ember/core/cuda/index_error.h),
//   and the gather/scatter skip bad indices meanwhile. An indexing op thus
//   does not synchronize (but the first on each device, which makes the
//   device's error record and waits once).
// - Scatter-add accumulates: repeated indices add up. The CPU adds in a
//   fixed order, half types in float rounded once per add. CUDA adds with
//   atomics (16-bit atomics for the half types, rounding each exact sum
//   once), so floating results depend on the order the adds land in and
//   agree with the CPU within rounding, not bit for bit.
// IndexArgs is plain data that a CUDA kernel can take by value; `op` is
// read on the host only.
#pragma once

#include <cstdint>
#include <string>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"
#include "ember/core/ops/elementwise_args.h"

namespace ember {

struct IndexArgs {
  int device = 0;  // the CUDA device index of every operand (0 on the CPU)
  ElementwiseArgs iter;
  int64_t dim_stride = 0;       // stride of the indexed tensor along dim, in elements
  int64_t dim_size = 0;         // valid indices: [0, dim_size)
  int64_t dim = 0;              // for the error message
  const void* index = nullptr;  // index_numel dense values of index_dtype
  int64_t index_numel = 0;
  DType dtype = DType::Float32;
  DType index_dtype = DType::Int64;
  const char* op = "";
};

using IndexKernelFn = void(const IndexArgs& args);

// While one lives, the index errors of the calls this thread makes start
// with its text: cross_entropy says that a target is not a class index,
// before the gather's message. Nestable; the innermost one counts.
class IndexErrorContext {
 public:
  explicit IndexErrorContext(std::string text);
  ~IndexErrorContext();
  IndexErrorContext(const IndexErrorContext&) = delete;
  IndexErrorContext& operator=(const IndexErrorContext&) = delete;

  // The innermost context's text on this thread, or nullptr.
  static const std::string* current();

 private:
  std::string text_;
  const IndexErrorContext* outer_;
};

// The message of an index value outside [0, dim_size) (without the source
// location): the context, then op, the value, dim and dim_size.
std::string index_error_text(const char* op, int64_t dim, int64_t dim_size, int64_t value, const std::string& context);

// Throws the ember::Error of index_error_text with this thread's context.
[[noreturn]] void index_out_of_range(const IndexArgs& a, int64_t value);

// Calls f.template operator()<I>() with I the C++ type of an index dtype
// (int64_t or int32_t); anything else is an error naming op.
template <typename F>
void dispatch_index(DType t, const char* op, F&& f) {
  if (t == DType::Int64) return f.template operator()<int64_t>();
  if (t == DType::Int32) return f.template operator()<int32_t>();
  EMBER_FAIL(op << ": expected an int64 or int32 index, got " << dtype_name(t));
}

extern KernelStub<IndexKernelFn> gather_stub;
extern KernelStub<IndexKernelFn> scatter_add_stub;

}  // namespace ember
