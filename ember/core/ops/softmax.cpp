// Front-ends of softmax and log_softmax: dim check, promotion to a floating
// dtype, the dense [outer, dim, inner] layout, dispatch through softmax_stub
// (ember/core/ops/softmax_kernels.h), and backward through the same stub's
// backward kernels.
#include <algorithm>

#include "ember/core/autocast_state.h"
#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/softmax_kernels.h"

namespace ember {

KernelStub<SoftmaxKernelFn> softmax_stub("softmax");

using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

namespace {

// dim wrapped into [0, x.dim()); a 0-dim tensor accepts 0 and -1.
int64_t softmax_dim(const char* op, const Tensor& x, int64_t dim) {
  int64_t n = std::max<int64_t>(x.dim(), 1);
  EMBER_CHECK(dim >= -n && dim < n, op << ": dim " << dim << " is out of range for a tensor of shape "
                                       << shape_str(x.shape()) << " (valid dims: " << -n << " to " << n - 1 << ")");
  return dim < 0 ? dim + n : dim;
}

// args for a contiguous tensor of x's shape, softmax along `dim`.
SoftmaxArgs blocks(const Shape& shape, int64_t dim, DType dtype, Device device) {
  SoftmaxArgs a;
  a.device = device.index;
  a.dtype = dtype;
  if (shape.empty()) return a;  // one element: [1, 1, 1]
  a.outer = a.inner = 1;
  for (int64_t d = 0; d < int64_t(shape.size()); ++d) {
    if (d < dim) a.outer *= shape[size_t(d)];
    else if (d > dim) a.inner *= shape[size_t(d)];
  }
  a.dim = shape[size_t(dim)];
  return a;
}

// dL/dx from dL/dy and y, by the backward kernel of `kind`.
Tensor softmax_backward_call(SoftmaxKind kind, const Tensor& grad, const Tensor& y, int64_t dim) {
  Tensor g;
  {
    NoGradGuard no_grad;
    g = grad.contiguous();  // incoming gradients are often broadcast views
  }
  Tensor dx = empty(y.shape(), y.dtype(), y.device());
  SoftmaxArgs a = blocks(y.shape(), dim, y.dtype(), y.device());
  a.in = y.data_ptr();
  a.grad = g.data_ptr();
  a.out = dx.data_ptr();
  softmax_stub(y.device().type)(kind, a);
  return dx;
}

Tensor softmax_op(const char* op, const char* node, SoftmaxKind forward, SoftmaxKind backward, const Tensor& x,
                  int64_t dim) {
  EMBER_CHECK(x.defined(), op << ": got an undefined tensor");
  int64_t d = softmax_dim(op, x, dim);
  DType dtype = is_floating(x.dtype()) ? x.dtype() : kDefaultFloat;  // integral and bool inputs give float32
  Tensor in;
  {
    NoGradGuard no_grad;
    in = x.to(dtype).contiguous();
  }
  Tensor y = empty(x.shape(), dtype, x.device());
  SoftmaxArgs a = blocks(x.shape(), d, dtype, x.device());
  a.in = in.data_ptr();
  a.out = y.data_ptr();
  softmax_stub(x.device().type)(forward, a);
  if (needs_grad(x)) {
    SavedTensor sy = SavedTensor::output(y);
    record(node, {&y}, {x}, [=](const TensorList& g) {
      Tensor yv = sy.unpack(node);
      if (GradMode::is_enabled()) {
        // create_graph: the same formulas from recorded ops, for higher-order gradients.
        if (backward == SoftmaxKind::SoftmaxBackward) return TensorList{yv * (g[0] - sum(g[0] * yv, {d}, true))};
        return TensorList{g[0] - exp(yv) * sum(g[0], {d}, true)};
      }
      return TensorList{softmax_backward_call(backward, g[0], yv, d)};
    });
  }
  return y;
}

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor cx = x;
    if (autocast_state::float32_inputs({&cx})) return softmax(cx, dim);
  }
  return softmax_op("softmax", "SoftmaxBackward", SoftmaxKind::Softmax, SoftmaxKind::SoftmaxBackward, x, dim);
}

Tensor log_softmax(const Tensor& x, int64_t dim) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor cx = x;
    if (autocast_state::float32_inputs({&cx})) return log_softmax(cx, dim);
  }
  return softmax_op("log_softmax", "LogSoftmaxBackward", SoftmaxKind::LogSoftmax, SoftmaxKind::LogSoftmaxBackward, x,
                    dim);
}

Tensor Tensor::softmax(int64_t dim) const { return ember::softmax(*this, dim); }
Tensor Tensor::log_softmax(int64_t dim) const { return ember::log_softmax(*this, dim); }

}  // namespace ember
