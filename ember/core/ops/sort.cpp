// Front-ends of the ordering family: sort, argsort, topk and searchsorted.
// Dispatch through sort_stub and searchsorted_stub
// (ember/core/ops/sort_kernels.h).
//
// Contract (PyTorch's, with the order of sort_kernels.h):
// - sort, argsort and topk order x along dim: the dim is moved last and the
//   tensor made dense, the kernel writes int64 indices with no history, and
//   the values are gather(x, dim, indices), so gradients flow through
//   gather's backward (GatherBackward: dL/dx is dL/dvalues scattered back to
//   the picked positions). The order is always stable; `stable` is accepted
//   for PyTorch's signature and changes nothing.
// - topk takes 0 <= k <= size of dim and gives the first k of sort's order
//   (largest: descending). It sorts whole rows on CUDA (see
//   ember/kernels/cuda/sort.cu); `sorted` = false gives them sorted as well.
// - A 0-dim x acts as one element: dim 0 or -1, indices 0, k 0 or 1.
// - searchsorted(sorted_sequence, values, right): sorted_sequence is 1-D
//   (every value searches it) or N-D with the first N-1 dims of values
//   (values' row r searches its row r); both are promoted to one dtype
//   (torch.result_type) and must share a device. The result has values'
//   shape, int64, and no history.
#include <algorithm>
#include <utility>

#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"
#include "ember/core/ops/sort_kernels.h"

namespace ember {

KernelStub<SortKernelFn> sort_stub("sort");
KernelStub<SearchSortedKernelFn> searchsorted_stub("searchsorted");

using detail::describe;
using detail::wrap_dim;

namespace {

// The indices of the first k of x's stable order along the wrapped dim d,
// with x's shape but k along d; no history.
Tensor order_indices(const Tensor& x, int64_t d, int64_t k, bool descending) {
  Tensor rows;
  {
    NoGradGuard no_grad;
    rows = x.dim() == 0 ? x.reshape({1}) : x.transpose(d, -1).contiguous();
  }
  Shape shape = rows.shape();
  const int64_t n = shape.back();
  shape.back() = k;
  Tensor out = empty(shape, DType::Int64, x.device());
  SortArgs a;
  a.device = x.device().index;
  a.in = rows.data_ptr();
  a.out = static_cast<int64_t*>(out.data_ptr());
  a.n = n;
  a.rows = n == 0 ? 0 : rows.numel() / n;
  a.k = k;
  a.descending = descending;
  a.dtype = x.dtype();
  sort_stub(x.device().type)(a);
  if (x.dim() == 0) return out.reshape({});
  return out.transpose(d, -1).contiguous();
}

void check_defined(const char* op, const Tensor& x) { EMBER_CHECK(x.defined(), op << ": got an undefined tensor"); }

}  // namespace

std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim, bool descending, bool /*stable*/) {
  check_defined("sort", x);
  int64_t d = wrap_dim("sort", dim, x.dim(), x.shape());
  Tensor indices = order_indices(x, d, x.dim() == 0 ? 1 : x.size(d), descending);
  return {gather(x, d, indices), indices};
}

Tensor argsort(const Tensor& x, int64_t dim, bool descending, bool /*stable*/) {
  check_defined("argsort", x);
  int64_t d = wrap_dim("argsort", dim, x.dim(), x.shape());
  return order_indices(x, d, x.dim() == 0 ? 1 : x.size(d), descending);
}

std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim, bool largest, bool /*sorted*/) {
  check_defined("topk", x);
  int64_t d = wrap_dim("topk", dim, x.dim(), x.shape());
  const int64_t n = x.dim() == 0 ? 1 : x.size(d);
  EMBER_CHECK(k >= 0 && k <= n, "topk: k = " << k << " is out of range for dim " << d << " of size " << n << " (input "
                                             << describe(x) << "); k must lie in [0, " << n << "]");
  if (x.dim() == 0) {
    Tensor indices = zeros({}, DType::Int64, x.device());
    return {gather(x, 0, indices), indices};
  }
  Tensor indices = order_indices(x, d, k, largest);
  return {gather(x, d, indices), indices};
}

Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool right) {
  check_defined("searchsorted", sorted_sequence);
  check_defined("searchsorted", values);
  const Tensor& s = sorted_sequence;
  EMBER_CHECK(s.device() == values.device(), "searchsorted: expected sorted_sequence and values on one device, but got "
                                                 << describe(s) << " and " << describe(values)
                                                 << "; move one with .to(device)");
  EMBER_CHECK(s.dim() >= 1,
              "searchsorted: sorted_sequence must have at least 1 dim, got a 0-dim tensor; reshape it to [1]");
  bool leading_match = s.dim() == values.dim();
  for (int64_t i = 0; leading_match && i + 1 < s.dim(); ++i) leading_match = s.size(i) == values.size(i);
  EMBER_CHECK(
      s.dim() == 1 || leading_match,
      "searchsorted: sorted_sequence must be 1-D or share the first N-1 dims of values, but got sorted_sequence "
          << describe(s) << " and values " << describe(values)
          << "; search a 1-D sequence or give one sorted row per row of values");
  DType dtype = promote_types(s.dtype(), values.dtype());
  Tensor seq, vals;
  {
    NoGradGuard no_grad;
    seq = s.to(dtype).contiguous();
    vals = values.to(dtype).contiguous();
  }
  Tensor out = empty(values.shape(), DType::Int64, values.device());
  SearchSortedArgs a;
  a.device = values.device().index;
  a.sorted = seq.data_ptr();
  a.values = vals.data_ptr();
  a.out = static_cast<int64_t*>(out.data_ptr());
  a.n = s.size(-1);
  a.rows_sorted = s.dim() == 1 ? 1 : s.numel() / std::max<int64_t>(a.n, 1);
  a.m = s.dim() == 1 ? values.numel() : values.size(-1);
  a.rows = s.dim() == 1 ? 1 : values.numel() / std::max<int64_t>(a.m, 1);
  if (s.dim() > 1 && a.m == 0) a.rows = 0;
  a.right = right;
  a.dtype = dtype;
  searchsorted_stub(values.device().type)(a);
  return out;
}

std::pair<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending, bool stable) const {
  return ember::sort(*this, dim, descending, stable);
}
Tensor Tensor::argsort(int64_t dim, bool descending, bool stable) const {
  return ember::argsort(*this, dim, descending, stable);
}
std::pair<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  return ember::topk(*this, k, dim, largest, sorted);
}

}  // namespace ember
