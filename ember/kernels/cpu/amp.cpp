// CPU kernels of mixed precision (contract in ember/core/ops/amp_kernels.h): one
// loop over each gradient that checks and unscales it, the scale update of
// ember/kernels/amp_math.h, and one loop over each tensor of a batched cast (the
// conversion cast_kernel of ember/kernels/cpu/elementwise.cpp makes).
#include <cmath>

#include "ember/core/ops/amp_kernels.h"
#include "ember/kernels/acc_type.h"
#include "ember/kernels/amp_math.h"

namespace ember::cpu {
namespace {

template <typename T>
void unscale_and_check_typed(const optim::MultiTensorArgs& a, const float* inv_scale, float* found_inf) {
  using A = acc_t<T>;
  bool found = false;
  for (int64_t t = 0; t < a.count; ++t) {
    T* x = static_cast<T*>(a.tensors[t].param);
    const int64_t n = a.tensors[t].numel;
    if (inv_scale == nullptr) {
      for (int64_t i = 0; i < n; ++i) found |= !std::isfinite(A(x[i]));
      continue;
    }
    const A factor = A(*inv_scale);
    for (int64_t i = 0; i < n; ++i) {
      const A v = A(x[i]);
      found |= !std::isfinite(v);
      x[i] = T(v * factor);
    }
  }
  if (found) *found_inf = 1.0f;
}

void unscale_and_check(const optim::MultiTensorArgs& a, const float* inv_scale, float* found_inf) {
  EMBER_DISPATCH_FLOAT(a.dtype, "amp::GradScaler unscale",
                       [&]<typename T>() { unscale_and_check_typed<T>(a, inv_scale, found_inf); });
}

void update_scale(const amp::ScaleState& s, const amp::ScaleRule& r) { amp_math::update_scale_rule(s, r); }

void cast_many(const optim::MultiTensorArgs& a) {
  auto run = [&]<typename O>() {
    for (int64_t t = 0; t < a.count; ++t) {
      const float* src = static_cast<const float*>(a.tensors[t].grad);
      O* dst = static_cast<O*>(a.tensors[t].param);
      for (int64_t i = 0; i < a.tensors[t].numel; ++i) dst[i] = O(acc_t<O>(src[i]));
    }
  };
  if (a.dtype == DType::Float16) return run.template operator()<Half>();
  EMBER_CHECK(a.dtype == DType::BFloat16,
              "amp::autocast: the batched cast makes float16 or bfloat16, not " << dtype_name(a.dtype));
  run.template operator()<BFloat16>();
}

}  // namespace

EMBER_REGISTER_KERNEL(amp::unscale_and_check_stub, DeviceType::CPU, unscale_and_check);
EMBER_REGISTER_KERNEL(amp::update_scale_stub, DeviceType::CPU, update_scale);
EMBER_REGISTER_KERNEL(amp::cast_many_stub, DeviceType::CPU, cast_many);

}  // namespace ember::cpu
