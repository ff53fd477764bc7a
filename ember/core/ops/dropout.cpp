// dropout: a fused mask-and-scale whose mask is regenerated in backward.
#include "ember/core/autograd/function.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/ops.h"
#include "ember/core/ops/dropout_kernels.h"

namespace ember {

KernelStub<DropoutKernelFn> dropout_stub("dropout");

namespace {
// The mask is drawn in memory order, so the forward and the backward lay
// their tensors out in one format (the input's suggested one).
Tensor apply_mask(const Tensor& in, const DropoutArgs& base, MemoryFormat format) {
  Tensor src = in.detach().contiguous(format);
  Tensor out = empty(src.shape(), src.dtype(), src.device(), format);
  DropoutArgs a = base;
  a.n = src.numel();
  a.in = src.data_ptr();
  a.out = out.data_ptr();
  if (a.n > 0) dropout_stub(src.device().type)(a);
  return out;
}
}  // namespace

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability has to be between 0 and 1, but got " << p);
  EMBER_CHECK(is_floating(x.dtype()), "dropout: expected a floating tensor, got " << dtype_name(x.dtype()));
  if (!training || p == 0.0) return x;
  if (p == 1.0) return x * 0.0;
  Generator& g = gen ? *gen : default_generator(x.device());
  DropoutArgs a;
  a.device = x.device().index;
  a.dtype = x.dtype();
  a.state = g.reserve(uint64_t(x.numel()));
  if (x.device().is_cuda())
    a.offset_shift = cuda::detail::captured_random_shift(a.device, g, a.state, uint64_t(x.numel()));
  a.p = p;
  a.scale = 1.0 / (1.0 - p);
  const MemoryFormat format = x.suggest_memory_format();
  Tensor y = apply_mask(x, a, format);
  if (autograd::needs_grad(x)) {
    autograd::record("DropoutBackward", {&y}, {x}, [a, format](const TensorList& grads) {
      EMBER_CHECK(!GradMode::is_enabled(), "dropout: double backward (create_graph=true) is not supported");
      return TensorList{apply_mask(grads[0], a, format)};
    });
  }
  return y;
}

}  // namespace ember
