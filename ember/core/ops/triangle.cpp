// triu and tril: the checks, the (batch, rows, cols) view the kernel reads,
// and the backward, which applies the same triangle to the gradient.
#include <algorithm>

#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"
#include "ember/core/ops/triangle_kernels.h"

namespace ember {

KernelStub<TriangleKernelFn> triangle_stub("triu/tril");

namespace {

Tensor triangle(const char* op, bool upper, const Tensor& x, int64_t diagonal) {
  EMBER_CHECK(x.defined(), op << ": got an undefined tensor");
  EMBER_CHECK(x.dim() >= 2, op << ": input tensor must have at least 2 dimensions (the triangle is taken over the "
                                  "last two), got "
                               << detail::describe(x) << "; unsqueeze a 1-D tensor into a row or a column first");
  const int64_t rows = x.size(-2), cols = x.size(-1);
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  if (x.numel() > 0) {
    Tensor in;
    {
      NoGradGuard no_grad;
      // A view when the leading dims merge, else a copy.
      in = x.detach().reshape({x.numel() / (rows * cols), rows, cols});
    }
    TriangleArgs a;
    a.device = x.device().index;
    a.dtype = x.dtype();
    a.in = in.data_ptr();
    a.out = out.data_ptr();
    a.batch = in.size(0);
    a.rows = rows;
    a.cols = cols;
    for (int d = 0; d < 3; ++d) a.in_strides[d] = in.stride(d);
    // Beyond [-rows, cols] every diagonal keeps the same elements; clamped,
    // i + diagonal cannot overflow in a kernel.
    a.diagonal = std::clamp(diagonal, -rows, cols);
    a.upper = upper;
    triangle_stub(x.device().type)(a);
  }
  if (autograd::needs_grad(x)) {
    const char* node = upper ? "TriuBackward" : "TrilBackward";
    autograd::record(node, {&out}, {x}, [op, upper, diagonal](const TensorList& g) {
      return TensorList{triangle(op, upper, g[0], diagonal)};
    });
  }
  return out;
}

}  // namespace

Tensor triu(const Tensor& x, int64_t diagonal) { return triangle("triu", true, x, diagonal); }
Tensor tril(const Tensor& x, int64_t diagonal) { return triangle("tril", false, x, diagonal); }

Tensor Tensor::triu(int64_t diagonal) const { return ember::triu(*this, diagonal); }
Tensor Tensor::tril(int64_t diagonal) const { return ember::tril(*this, diagonal); }

}  // namespace ember
