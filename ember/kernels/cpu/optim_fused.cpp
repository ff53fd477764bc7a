// CPU kernels of the fused optimizer steps, multi-tensor norm and scale
// (contract in ember/core/ops/optimizer_kernels.h): plain loops over each tensor, with
// the formulas of ember/kernels/optim_math.h. The element loops of the steps and
// of scale split over threads (ember/core/parallel_for.h), all of a call's
// tensors in one region; each element's update is the same as on one thread.
// The norm's partials are per kOptimChunk and stay on one thread, so their
// order is fixed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "ember/core/ops/optimizer_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"
#include "ember/kernels/optim_math.h"

namespace ember::cpu {
namespace {

// An optimizer's per-element update costs tens of operations: a smaller
// grain than an elementwise op's.
constexpr int64_t kStepGrain = kCpuGrain / 4;

using optim::AdamHyper;
using optim::FusedStepArgs;
using optim::FusedTensor;
using optim::MultiTensorArgs;
using optim::SGDHyper;

bool skip_step(const FusedStepArgs& a) { return a.found_inf != nullptr && *a.found_inf != 0.0f; }

template <typename A>
A grad_factor(const FusedStepArgs& a) {
  return a.inv_scale != nullptr ? A(*a.inv_scale) : A(1);
}

// Elements [begin, end) of the step's low-precision copy of a float32
// param, after their update.
void write_low_copy(const FusedStepArgs& a, const FusedTensor& f, int64_t begin, int64_t end) {
  if (f.low_copy == nullptr) return;
  const float* p = static_cast<const float*>(f.param);
  auto write = [&]<typename C>() {
    C* out = static_cast<C*>(f.low_copy);
    for (int64_t i = begin; i < end; ++i) out[i] = C(p[i]);
  };
  if (a.low_dtype == DType::Float16) write.template operator()<Half>();
  else write.template operator()<BFloat16>();
}

// Calls range(t, begin, end) on elements [begin, end) of tensor t, for
// every element of every tensor, in one parallel region: the tensors'
// elements laid end to end and cut as parallel_for cuts one range. So a
// call wakes the threads once, not once a tensor, and its small tensors
// (biases) share chunks instead of each running alone. Each element's
// update is the same whatever the cut.
template <typename Range>
void for_each_element_range(const FusedTensor* tensors, int64_t count, int64_t grain, Range&& range) {
  std::vector<int64_t> starts(size_t(count) + 1, 0);
  for (int64_t t = 0; t < count; ++t) starts[size_t(t) + 1] = starts[size_t(t)] + tensors[t].numel;
  parallel_for(0, starts.back(), grain, [&](int64_t begin, int64_t end) {
    // The last tensor starting at or before `begin`, then each one overlapping [begin, end).
    int64_t t = std::upper_bound(starts.begin(), starts.end(), begin) - starts.begin() - 1;
    for (; t < count && starts[size_t(t)] < end; ++t) {
      const int64_t lo = std::max(begin, starts[size_t(t)]), hi = std::min(end, starts[size_t(t) + 1]);
      if (lo < hi) range(t, lo - starts[size_t(t)], hi - starts[size_t(t)]);
    }
  });
}

template <typename T>
void sgd_typed(const FusedStepArgs& a, const SGDHyper& h) {
  using A = acc_t<T>;
  if (skip_step(a)) return;
  const A factor = grad_factor<A>(a);
  const auto c = optim_math::sgd_scalars<A>(h);
  for_each_element_range(a.tensors, a.count, kStepGrain, [&](int64_t t, int64_t begin, int64_t end) {
    const FusedTensor& f = a.tensors[t];
    T* p = static_cast<T*>(f.param);
    const T* g = static_cast<const T*>(f.grad);
    A* buf = static_cast<A*>(f.state[0]);
    const bool first = f.step != nullptr && *f.step == 0;
    A unused = 0;
    for (int64_t i = begin; i < end; ++i) {
      A pv = A(acc_t<T>(p[i]));
      optim_math::sgd_element<A>(c, pv, A(acc_t<T>(g[i])) * factor, buf ? buf[i] : unused, first);
      p[i] = T(pv);
    }
    write_low_copy(a, f, begin, end);
  });
  for (int64_t t = 0; t < a.count; ++t) {
    if (a.tensors[t].step != nullptr) ++*a.tensors[t].step;
  }
}

// One tensor's Adam update over [begin, end). The flags are template
// parameters and every array a restrict pointer, so the loop has no branch
// and vectorizes; the arithmetic is optim_math::adam_element's.
template <bool WeightDecay, bool Decoupled, bool Amsgrad, typename T, typename A>
void adam_range(const optim_math::AdamScalars<A>& c, A factor, T* __restrict p, const T* __restrict g, A* __restrict m,
                A* __restrict v, A* __restrict vmax, int64_t begin, int64_t end) {
  optim_math::AdamScalars<A> fixed = c;
  fixed.use_weight_decay = WeightDecay;
  fixed.decoupled = Decoupled;
  fixed.amsgrad = Amsgrad;
  for (int64_t i = begin; i < end; ++i) {
    A pv = A(acc_t<T>(p[i]));
    A unused = 0;
    optim_math::adam_element<A>(fixed, pv, A(acc_t<T>(g[i])) * factor, m[i], v[i], Amsgrad ? vmax[i] : unused);
    p[i] = T(pv);
  }
}

template <typename T>
void adam_typed(const FusedStepArgs& a, const AdamHyper& h) {
  using A = acc_t<T>;
  if (skip_step(a)) return;
  const A factor = grad_factor<A>(a);
  std::vector<optim_math::AdamScalars<A>> scalars;
  for (int64_t t = 0; t < a.count; ++t) scalars.push_back(optim_math::adam_scalars<A>(h, *a.tensors[t].step + 1));
  for_each_element_range(a.tensors, a.count, kStepGrain, [&](int64_t t, int64_t begin, int64_t end) {
    const FusedTensor& f = a.tensors[t];
    const optim_math::AdamScalars<A>& c = scalars[size_t(t)];
    T* p = static_cast<T*>(f.param);
    const T* g = static_cast<const T*>(f.grad);
    A* m = static_cast<A*>(f.state[0]);
    A* v = static_cast<A*>(f.state[1]);
    A* vmax = static_cast<A*>(f.state[2]);
    auto run = [&]<bool WeightDecay, bool Decoupled, bool Amsgrad>() {
      adam_range<WeightDecay, Decoupled, Amsgrad>(c, factor, p, g, m, v, vmax, begin, end);
    };
    const bool amsgrad = c.amsgrad && vmax != nullptr;
    if (!c.use_weight_decay) {
      if (amsgrad) run.template operator()<false, false, true>();
      else run.template operator()<false, false, false>();
    } else if (c.decoupled) {
      if (amsgrad) run.template operator()<true, true, true>();
      else run.template operator()<true, true, false>();
    } else {
      if (amsgrad) run.template operator()<true, false, true>();
      else run.template operator()<true, false, false>();
    }
    write_low_copy(a, f, begin, end);
  });
  for (int64_t t = 0; t < a.count; ++t) ++*a.tensors[t].step;
}

void sgd_step(const FusedStepArgs& a, const SGDHyper& h) {
  optim::check_fused_step(a, "optim::SGD step");
  EMBER_DISPATCH_FLOAT(a.dtype, "optim::SGD step", [&]<typename T>() { sgd_typed<T>(a, h); });
}

void adam_step(const FusedStepArgs& a, const AdamHyper& h) {
  optim::check_fused_step(a, "optim::Adam step");
  EMBER_DISPATCH_FLOAT(a.dtype, "optim::Adam step", [&]<typename T>() { adam_typed<T>(a, h); });
}

template <typename T>
void norm_typed(const MultiTensorArgs& a, double norm_type, void* partials) {
  using A = acc_t<T>;
  A* out = static_cast<A*>(partials);
  const bool inf = std::isinf(norm_type);
  const A p = A(norm_type);
  for (int64_t t = 0; t < a.count; ++t) {
    const T* x = static_cast<const T*>(a.tensors[t].param);
    const int64_t n = a.tensors[t].numel;
    for (int64_t begin = 0; begin < n; begin += optim::kOptimChunk) {
      const int64_t end = std::min(n, begin + optim::kOptimChunk);
      A acc = 0;
      for (int64_t i = begin; i < end; ++i) {
        const A v = A(acc_t<T>(x[i]));
        acc = inf ? optim_math::maximum(acc, v < A(0) ? -v : v) : acc + optim_math::abs_pow(v, p);
      }
      *out++ = acc;
    }
  }
}

void norm_partials(const MultiTensorArgs& a, double norm_type, void* partials) {
  EMBER_DISPATCH_FLOAT(a.dtype, "clip_grad_norm_", [&]<typename T>() { norm_typed<T>(a, norm_type, partials); });
}

void scale(const MultiTensorArgs& a, const void* scale_ptr) {
  EMBER_DISPATCH_FLOAT(a.dtype, "clip_grad_norm_", [&]<typename T>() {
    using A = acc_t<T>;
    const A s = *static_cast<const A*>(scale_ptr);
    for_each_element_range(a.tensors, a.count, kCpuGrain, [&](int64_t t, int64_t begin, int64_t end) {
      T* x = static_cast<T*>(a.tensors[t].param);
      for (int64_t i = begin; i < end; ++i) x[i] = T(A(acc_t<T>(x[i])) * s);
    });
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(optim::sgd_step_stub, DeviceType::CPU, sgd_step);
EMBER_REGISTER_KERNEL(optim::adam_step_stub, DeviceType::CPU, adam_step);
EMBER_REGISTER_KERNEL(optim::norm_partials_stub, DeviceType::CPU, norm_partials);
EMBER_REGISTER_KERNEL(optim::scale_stub, DeviceType::CPU, scale);

}  // namespace ember::cpu
