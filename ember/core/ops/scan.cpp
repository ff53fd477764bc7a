// Front-end of cumsum: the dim check, the result dtype, the dense
// [outer, dim, inner] layout, dispatch through cumsum_stub
// (ember/core/ops/scan_kernels.h) and the backward.
//
// Contract (torch.cumsum's):
// - The result has x's shape. Its dtype is `dtype` when given (x is cast to
//   it before summing), else int64 for integral and bool inputs, else x's.
// - A 0-dim x takes dim 0 or -1 and gives x.
// - Backward (floating results only): dL/dx is the reverse running sum of
//   dL/dy along dim (the same kernel, run back to front), cast to x's dtype.
//   Its own backward is the forward running sum, so gradients of any order
//   exist.
#include <optional>

#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"
#include "ember/core/ops/scan_kernels.h"

namespace ember {

KernelStub<ScanKernelFn> cumsum_stub("cumsum");

using autograd::needs_grad;
using autograd::record;

namespace {

// The running sum of x along the wrapped dim d, in `dtype`, front to back or
// (reverse) back to front.
Tensor running_sum(const Tensor& x, int64_t d, DType dtype, bool reverse) {
  Tensor in;
  {
    NoGradGuard no_grad;
    in = x.to(dtype).contiguous();
  }
  Tensor y = empty(x.shape(), dtype, x.device());
  ScanArgs a;
  a.device = x.device().index;
  a.in = in.data_ptr();
  a.out = y.data_ptr();
  a.reverse = reverse;
  a.dtype = dtype;
  for (int64_t k = 0; k < x.dim(); ++k) {
    if (k < d) a.outer *= x.size(k);
    else if (k > d) a.inner *= x.size(k);
  }
  a.dim = x.dim() == 0 ? 1 : x.size(d);
  cumsum_stub(x.device().type)(a);
  if (is_floating(dtype) && needs_grad(x)) {
    DType x_dtype = x.dtype();
    record(reverse ? "ReverseCumsumBackward" : "CumsumBackward", {&y}, {x},
           [=](const TensorList& g) { return TensorList{running_sum(g[0], d, g[0].dtype(), !reverse).to(x_dtype)}; });
  }
  return y;
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype) {
  EMBER_CHECK(x.defined(), "cumsum: got an undefined tensor");
  int64_t d = detail::wrap_dim("cumsum", dim, x.dim(), x.shape());
  DType out = dtype ? *dtype : is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  return running_sum(x, d, out, false);
}

Tensor Tensor::cumsum(int64_t dim, std::optional<DType> dtype) const { return ember::cumsum(*this, dim, dtype); }

}  // namespace ember
