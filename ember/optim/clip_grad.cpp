// clip_grad_norm_ and clip_grad_value_ (see ember/optim/clip_grad.h).
#include "ember/optim/clip_grad.h"

#include <cmath>
#include <limits>
#include <map>

#include "ember/core/grad_mode.h"
#include "ember/core/memory_format.h"
#include "ember/core/ops.h"
#include "ember/core/ops/optimizer_kernels.h"

namespace ember::optim {

Tensor clip_grad_norm_(const TensorList& params, double max_norm, double norm_type, bool error_if_nonfinite) {
  NoGradGuard no_grad;
  const bool inf = std::isinf(norm_type) && norm_type > 0;
  EMBER_CHECK(inf || norm_type > 0, "clip_grad_norm_: norm_type must be positive or infinity, but is " << norm_type);
  // Gradients by dtype (fused calls take one dtype), kept alive as dense tensors.
  std::map<DType, TensorList> by_dtype;
  Tensor first;
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    if (!first.defined()) first = g;
    EMBER_CHECK(g.device() == first.device(), "clip_grad_norm_: all gradients must be on one device, but found "
                                                  << first.device().str() << " and " << g.device().str()
                                                  << " (parameter " << i << ")");
    EMBER_CHECK(is_floating(g.dtype()),
                "clip_grad_norm_: gradient of parameter " << i << " has dtype " << dtype_name(g.dtype()));
    by_dtype[g.dtype()].push_back(g);
  }
  if (!first.defined()) return zeros({});
  const Device device = first.device();
  const DType result_dtype = by_dtype.count(DType::Float64) ? DType::Float64 : DType::Float32;

  auto fused_list = [](const TensorList& ts) {
    std::vector<FusedTensor> fused;
    for (const Tensor& t : ts) {
      FusedTensor f;
      f.param = t.data_ptr();
      f.numel = t.numel();
      fused.push_back(f);
    }
    return fused;
  };
  // Gradients that are not one dense block are reduced from a contiguous
  // copy (and scaled through copy_ below).
  std::map<DType, TensorList> dense;
  TensorList totals;  // per dtype: sum of |g|^p (or max |g|), in result_dtype
  for (const auto& [dtype, grads] : by_dtype) {
    TensorList& d = dense[dtype];
    for (const Tensor& g : grads) d.push_back(dense_block(g));
    std::vector<FusedTensor> fused = fused_list(d);
    const int64_t chunks = count_chunks(fused.data(), int64_t(fused.size()));
    Tensor partials = zeros({std::max<int64_t>(chunks, 1)}, optim_state_dtype(dtype), device);
    MultiTensorArgs args{device.is_cuda() ? device.index : 0, dtype, fused.data(), int64_t(fused.size())};
    norm_partials_stub(device.type)(args, norm_type, partials.data_ptr());
    totals.push_back((inf ? amax(partials) : sum(partials)).to(result_dtype));
  }
  Tensor combined = inf ? amax(stack(totals)) : sum(stack(totals));
  Tensor total_norm = inf ? combined : norm_type == 2.0 ? sqrt(combined) : pow(combined, 1.0 / norm_type);
  if (error_if_nonfinite) {
    const double v = total_norm.item<double>();
    EMBER_CHECK(std::isfinite(v), "clip_grad_norm_: the total norm of order "
                                      << norm_type << " for gradients from `parameters` is non-finite (" << v
                                      << "), so it cannot be clipped; pass error_if_nonfinite = false to clip anyway");
  }
  Tensor coef = clamp(rdiv(total_norm + 1e-6, max_norm), std::nullopt, Scalar(1.0));
  for (auto& [dtype, grads] : by_dtype) {
    TensorList& d = dense[dtype];
    std::vector<FusedTensor> fused = fused_list(d);
    Tensor factor = coef.to(optim_state_dtype(dtype)).contiguous();
    MultiTensorArgs args{device.is_cuda() ? device.index : 0, dtype, fused.data(), int64_t(fused.size())};
    scale_stub(device.type)(args, factor.data_ptr());
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!d[i].is_same(grads[i])) grads[i].copy_(d[i]);
      else grads[i].storage()->bump_version();
    }
  }
  return total_norm;
}

void clip_grad_value_(const TensorList& params, double clip_value, std::optional<bool> /*foreach*/) {
  EMBER_CHECK(clip_value >= 0,
              "clip_grad_value_: clip_value must be non-negative (gradients are clamped to "
              "[-clip_value, clip_value]), but is "
                  << clip_value);
  NoGradGuard no_grad;
  for (const Tensor& p : params) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    g.copy_(clamp(g, Scalar(-clip_value), Scalar(clip_value)));
  }
}

}  // namespace ember::optim
