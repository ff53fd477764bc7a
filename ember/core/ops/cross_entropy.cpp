// Front-end of the fused cross-entropy loss (cross_entropy_loss in
// ember/core/ops.h): checks, dense operands, dispatch through the stubs of
// ember/core/ops/cross_entropy_kernels.h, and its backward through the same
// stubs. Under create_graph (grad mode on while the node runs) the backward
// is composed of recorded ops instead, so higher-order gradients are right.
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "ember/core/autocast_state.h"
#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/cross_entropy_kernels.h"
#include "ember/core/ops/index_kernels.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

KernelStub<CrossEntropyKernelFn> cross_entropy_forward_stub("cross_entropy");
KernelStub<CrossEntropyKernelFn> cross_entropy_backward_stub("cross_entropy_backward");

using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;
using detail::describe;

namespace {

void check(const Tensor& logits, const Tensor& target, double smoothing) {
  EMBER_CHECK(logits.defined() && target.defined(), "cross_entropy: the logits and the target must be defined");
  EMBER_CHECK(logits.dim() == 2 && is_floating(logits.dtype()),
              "cross_entropy: expected floating logits of shape (N, C), got " << describe(logits));
  EMBER_CHECK(logits.size(1) >= 1, "cross_entropy: expected at least one class, got logits " << describe(logits));
  EMBER_CHECK(
      target.dtype() == DType::Int64 || target.dtype() == DType::Int32,
      "cross_entropy: expected class indices as an int64 or int32 tensor, got a target of " << describe(target));
  EMBER_CHECK(target.dim() == 1 && target.size(0) == logits.size(0),
              "cross_entropy: logits of shape " << shape_str(logits.shape()) << " take a target of shape ["
                                                << logits.size(0) << "], got " << shape_str(target.shape()));
  EMBER_CHECK(target.device() == logits.device(), "cross_entropy: the logits are "
                                                      << describe(logits) << " but the target is " << describe(target)
                                                      << "; move one with .to(device)");
  EMBER_CHECK(smoothing >= 0.0 && smoothing <= 1.0,
              "cross_entropy: label_smoothing must be in [0, 1], got " << smoothing);
}

CrossEntropyArgs make_args(const Tensor& x, const Tensor& t, int64_t ignore_index, double smoothing,
                           Reduction reduction, DType out_dtype) {
  CrossEntropyArgs a;
  a.device = x.device().index;
  a.dtype = x.dtype();
  a.out_dtype = out_dtype;
  a.target_dtype = t.dtype();
  a.n = x.size(0);
  a.c = x.size(1);
  a.ignore_index = ignore_index;
  a.smoothing = smoothing;
  a.reduction = int(reduction);
  a.logits = x.data_ptr();
  a.target = t.data_ptr();
  return a;
}

// The gradient the backward kernel computes, from recorded ops on the
// logits as the caller passed them (so it stays connected to them). The row
// weights are float32 or float64 (a count of rows is exact there), and with
// every row ignored the mean's weights are 0, as the kernels give.
Tensor composed_grad(const Tensor& logits, const Tensor& target, int64_t ignore_index, double e, Reduction reduction,
                     const Tensor& grad) {
  const int64_t c = logits.size(1);
  const DType stats = cross_entropy_stats_dtype(logits.dtype());
  Tensor kept = ne(target, ignore_index);
  Tensor safe = where(kept, target, Scalar(int64_t(0)));
  Tensor onehot = eq(arange(c, target.dtype(), logits.device()).unsqueeze(0), safe.unsqueeze(1)).to(stats);
  Tensor w = kept.to(stats) * grad.to(stats);
  if (reduction == Reduction::Mean) w = w / clamp(kept.sum().to(stats), 1.0, std::nullopt);
  return ((softmax(logits.to(stats), 1) - onehot * (1.0 - e) - e / double(c)) * w.unsqueeze(1)).to(logits.dtype());
}

}  // namespace

Tensor cross_entropy_loss(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing,
                          Reduction reduction) {
  check(logits, target, label_smoothing);
  const Device device = logits.device();
  // Losses run in float32 under autocast: 16-bit logits are read as they
  // are (the kernels compute in float32 anyway) and the loss is float32, so
  // no cast of the logits, or of their gradient back, runs.
  DType out_dtype = logits.dtype();
  if (autocast_state::any_enabled() && autocast_state::is_enabled(device.type) &&
      (out_dtype == DType::Float16 || out_dtype == DType::BFloat16)) [[unlikely]] {
    out_dtype = DType::Float32;
  }
  const int64_t n = logits.size(0), c = logits.size(1);
  Tensor x, t;
  {
    NoGradGuard no_grad;
    x = logits.contiguous();
    t = target.contiguous();
  }
  const DType stats = cross_entropy_stats_dtype(x.dtype());
  Tensor lse = empty({n}, stats, device), count = empty({}, stats, device);
  Tensor out = empty(reduction == Reduction::None ? Shape{n} : Shape{}, out_dtype, device);
  if (n > 0) {
    CrossEntropyArgs a = make_args(x, t, ignore_index, label_smoothing, reduction, out_dtype);
    a.lse = lse.data_ptr();
    a.count = count.data_ptr();
    a.out = out.data_ptr();
    IndexErrorContext context("cross_entropy: a target is not a class index for " + std::to_string(c) +
                              " classes (valid targets: 0 to " + std::to_string(c - 1) +
                              ", or ignore_index = " + std::to_string(ignore_index) + "); ");
    cross_entropy_forward_stub(device.type)(a);
  } else if (reduction != Reduction::None) {
    // No rows: the sum is 0 and the mean 0 / 0.
    out.fill_(reduction == Reduction::Sum ? 0.0 : std::numeric_limits<double>::quiet_NaN());
    count.fill_(0.0);
  }
  if (needs_grad(logits)) {
    const SavedTensor sl(logits), st(t), slse(lse), scount(count);
    record("CrossEntropyBackward", {&out}, {logits}, [=](const TensorList& g) {
      const char* node = "CrossEntropyBackward";
      Tensor lv = sl.unpack(node), tv = st.unpack(node);
      if (GradMode::is_enabled()) {
        return TensorList{composed_grad(lv, tv, ignore_index, label_smoothing, reduction, g[0])};
      }
      Tensor xv, grad;
      {
        NoGradGuard no_grad;
        xv = lv.contiguous();  // the very tensor when it is contiguous
        grad = g[0].contiguous();
      }
      Tensor dx = empty({n, c}, xv.dtype(), xv.device());
      if (n > 0) {
        Tensor lse_v = slse.unpack(node), count_v = scount.unpack(node);
        CrossEntropyArgs a = make_args(xv, tv, ignore_index, label_smoothing, reduction, out_dtype);
        a.lse = lse_v.data_ptr();
        a.count = count_v.data_ptr();
        a.grad = grad.data_ptr();
        a.grad_logits = dx.data_ptr();
        cross_entropy_backward_stub(xv.device().type)(a);
      }
      return TensorList{dx};
    });
  }
  return out;
}

}  // namespace ember
