// Kernel signatures and stubs of the ordering family: the stable order of
// each row (sort, argsort, topk) and the insertion points of values in
// sorted rows (searchsorted).
//
// Contract (what every device's kernel may rely on and must do):
// - The front-end (ember/core/ops/sort.cpp) has checked dims, k and devices and
//   made every operand dense row-major (rows, length) of one dtype; any size
//   may be 0 (then nothing is done).
// - The order: NaN is larger than every number (all NaNs equal), -0.0 equals
//   0.0, false < true. Ties keep their input order, ascending and descending
//   alike (a stable sort), so the order of a row is a function of its values
//   alone and every device gives the same indices.
// - sort writes, for each of `rows` rows of `n` values, the int64 indices
//   (in [0, n)) of the row's first k values in that order (descending: the
//   reverse order of values, ties still by input position) into the dense
//   (rows, k) `out`.
// - searchsorted writes, for each of the m values of row r, the number of
//   entries of sorted row r (row 0 when `rows_sorted` is 1) that are less
//   than the value (with `right`: not greater than it), as int64. The sorted
//   rows are taken to be ascending in the order above; the result for an
//   unsorted row is some index in [0, n].
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

// Plain data, passable by value to a CUDA kernel.
struct SortArgs {
  int device = 0;            // CUDA device index (ignored on CPU)
  const void* in = nullptr;  // (rows, n) of dtype
  int64_t* out = nullptr;    // (rows, k) indices
  int64_t rows = 0, n = 0, k = 0;
  bool descending = false;
  DType dtype = DType::Float32;
};

struct SearchSortedArgs {
  int device = 0;                // CUDA device index (ignored on CPU)
  const void* sorted = nullptr;  // (rows_sorted, n) of dtype
  const void* values = nullptr;  // (rows, m) of dtype
  int64_t* out = nullptr;        // (rows, m) insertion points
  int64_t rows_sorted = 1, n = 0, rows = 0, m = 0;
  bool right = false;
  DType dtype = DType::Float32;
};

using SortKernelFn = void(const SortArgs& args);
using SearchSortedKernelFn = void(const SearchSortedArgs& args);
extern KernelStub<SortKernelFn> sort_stub;
extern KernelStub<SearchSortedKernelFn> searchsorted_stub;

}  // namespace ember
