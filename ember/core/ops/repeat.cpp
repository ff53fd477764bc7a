// repeat and tile, composed from a view and one strided copy.
//
// x.repeat({r0, r1, ...}) is x seen as (1, s0, 1, s1, ...) broadcast into a
// dense (r0, s0, r1, s1, ...) buffer, which is the result viewed as
// (r0 s0, r1 s1, ...). That broadcast copy is copy_'s kernel (cast_stub) on
// the CPU and on CUDA: one read and one write per output element, the
// minimum a repeat kernel needs, so repeat has no kernel of its own (as in
// PyTorch). The backward views the gradient the same way and sums over the
// repeat dims.
#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"

namespace ember {
namespace {

Tensor repeat_impl(const char* op, const Tensor& x, const Shape& repeats) {
  EMBER_CHECK(x.defined(), op << ": got an undefined tensor");
  EMBER_CHECK(int64_t(repeats.size()) >= x.dim(), op << ": number of dimensions of repeat dims " << shape_str(repeats)
                                                     << " can not be smaller than number of dimensions of tensor "
                                                     << detail::describe(x) << "; give one count per dim");
  for (int64_t r : repeats) {
    EMBER_CHECK(r >= 0,
                op << ": repeat counts must be >= 0, got " << shape_str(repeats) << " for " << detail::describe(x));
  }
  const int64_t lead = int64_t(repeats.size()) - x.dim();
  Shape interleaved, spread, out_shape, sum_dims;  // (1, s0, ...), (r0, s0, ...), (r0 s0, ...), {0, 2, ...}
  for (int64_t d = 0; d < int64_t(repeats.size()); ++d) {
    const int64_t size = d < lead ? 1 : x.size(d - lead), r = repeats[size_t(d)];
    interleaved.insert(interleaved.end(), {1, size});
    spread.insert(spread.end(), {r, size});
    out_shape.push_back(r * size);
    sum_dims.push_back(2 * d);
  }
  Tensor out = empty(out_shape, x.dtype(), x.device());
  if (out.numel() > 0) {
    NoGradGuard no_grad;
    out.view(spread).copy_(x.detach().reshape(interleaved));
  }
  if (autograd::needs_grad(x)) {
    Shape x_shape = x.shape();
    autograd::record("RepeatBackward", {&out}, {x}, [=](const TensorList& g) {
      // An empty repeats (a 0-dim x) copied x once: nothing to sum.
      if (sum_dims.empty()) return TensorList{g[0].reshape(x_shape)};
      return TensorList{sum(g[0].reshape(spread), sum_dims).reshape(x_shape)};
    });
  }
  return out;
}

}  // namespace

Tensor repeat(const Tensor& x, const Shape& repeats) { return repeat_impl("repeat", x, repeats); }

Tensor tile(const Tensor& x, const Shape& dims) {
  EMBER_CHECK(x.defined(), "tile: got an undefined tensor");
  Shape repeats = dims;
  if (int64_t(dims.size()) < x.dim()) repeats.insert(repeats.begin(), size_t(x.dim()) - dims.size(), 1);
  return repeat_impl("tile", x, repeats);
}

Tensor Tensor::repeat(const Shape& repeats) const { return ember::repeat(*this, repeats); }
Tensor Tensor::tile(const Shape& dims) const { return ember::tile(*this, dims); }

}  // namespace ember
