// The per-element formulas of the fused optimizer steps, shared by the CPU
// and CUDA kernels so that both compute the same thing (contract in
// ember/core/ops/optimizer_kernels.h).
//
// A is the state/compute type (float for float32 and the 16-bit types,
// double for float64). The scalars are prepared once per tensor, in double
// and then cast to A, exactly where torch.optim (foreach=False) uses Python
// floats; each element then follows PyTorch's in-place op sequence:
//   SGD:  g += wd * p; buf = first ? g : buf * momentum + (1 - dampening) * g;
//         g = nesterov ? g + momentum * buf : buf; p += -lr * g
//   Adam: g += wd * p (Adam) or p *= 1 - lr * wd (AdamW);
//         m = lerp(m, g, 1 - beta1); v = v * beta2 + (1 - beta2) * g * g;
//         vmax = max(vmax, v) (amsgrad);
//         p += -(lr / (1 - beta1^s)) * m / (sqrt(v or vmax) / sqrt(1 - beta2^s) + eps)
#pragma once

#include <cmath>
#include <cstdint>

#include "ember/core/half.h"
#include "ember/core/ops/optimizer_kernels.h"

namespace ember::optim_math {

#if defined(__CUDA_ARCH__)
#define EMBER_OPTIM_FN(name) ::name
#else
#define EMBER_OPTIM_FN(name) std::name
#endif

// torch.lerp: the form depends on the weight, for accuracy near both ends.
template <typename A>
EMBER_HOST_DEVICE inline A lerp(A self, A end, A weight) {
  A w_abs = weight < A(0) ? -weight : weight;
  return w_abs < A(0.5) ? self + weight * (end - self) : end - (end - self) * (A(1) - weight);
}

// torch.maximum: a NaN in either operand propagates.
template <typename A>
EMBER_HOST_DEVICE inline A maximum(A a, A b) {
  return (a > b || a != a) ? a : b;
}

template <typename A>
struct SGDScalars {
  A neg_lr, momentum, one_minus_dampening, weight_decay;
  bool use_momentum, nesterov, use_weight_decay;
};

template <typename A>
EMBER_HOST_DEVICE inline SGDScalars<A> sgd_scalars(const optim::SGDHyper& h) {
  return {A(-h.lr),          A(h.momentum), A(1.0 - h.dampening), A(h.weight_decay),
          h.momentum != 0.0, h.nesterov,    h.weight_decay != 0.0};
}

// One element: p is the param, g its (unscaled) gradient, buf the momentum
// buffer (unused without momentum), first: the buffer takes g.
template <typename A>
EMBER_HOST_DEVICE inline void sgd_element(const SGDScalars<A>& c, A& p, A g, A& buf, bool first) {
  if (c.use_weight_decay) g = g + c.weight_decay * p;
  if (c.use_momentum) {
    buf = first ? g : buf * c.momentum + c.one_minus_dampening * g;
    g = c.nesterov ? g + c.momentum * buf : buf;
  }
  p = p + c.neg_lr * g;
}

template <typename A>
struct AdamScalars {
  A one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay, neg_step_size, bias_correction2_sqrt;
  bool use_weight_decay, decoupled, amsgrad;
};

// The scalars of step number `step` (1 for the first update).
template <typename A>
EMBER_HOST_DEVICE inline AdamScalars<A> adam_scalars(const optim::AdamHyper& h, int64_t step) {
  const double s = double(step);
  const double bias_correction1 = 1.0 - EMBER_OPTIM_FN(pow)(h.beta1, s);
  const double bias_correction2 = 1.0 - EMBER_OPTIM_FN(pow)(h.beta2, s);
  const double step_size = h.lr / bias_correction1;
  return {A(1.0 - h.beta1),
          A(h.beta2),
          A(1.0 - h.beta2),
          A(h.eps),
          A(h.weight_decay),
          A(1.0 - h.lr * h.weight_decay),
          A(-step_size),
          A(EMBER_OPTIM_FN(sqrt)(bias_correction2)),
          h.weight_decay != 0.0,
          h.decoupled_weight_decay,
          h.amsgrad};
}

template <typename A>
EMBER_HOST_DEVICE inline void adam_element(const AdamScalars<A>& c, A& p, A g, A& m, A& v, A& vmax) {
  if (c.use_weight_decay) {
    if (c.decoupled) p = p * c.decay;
    else g = g + c.weight_decay * p;
  }
  m = lerp(m, g, c.one_minus_beta1);
  v = v * c.beta2 + c.one_minus_beta2 * g * g;
  A second = v;
  if (c.amsgrad) {
    vmax = maximum(vmax, v);
    second = vmax;
  }
  const A denom = EMBER_OPTIM_FN(sqrt)(second) / c.bias_correction2_sqrt + c.eps;
  p = p + c.neg_step_size * m / denom;
}

// |x|^p for the norm partials (p finite and > 0).
template <typename A>
EMBER_HOST_DEVICE inline A abs_pow(A x, A p) {
  const A a = x < A(0) ? -x : x;
  if (p == A(2)) return a * a;
  if (p == A(1)) return a;
  return EMBER_OPTIM_FN(pow)(a, p);
}

#undef EMBER_OPTIM_FN

}  // namespace ember::optim_math
