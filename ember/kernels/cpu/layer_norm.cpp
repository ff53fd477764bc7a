// CPU layer-norm kernels (see ember/core/ops/layer_norm_kernels.h): Welford
// statistics per row in the statistics dtype, then the affine transform.
#include <cmath>
#include <vector>

#include "ember/core/ops/layer_norm_kernels.h"
#include "ember/kernels/acc_type.h"

namespace ember::cpu {
namespace {

template <typename T, typename S>
void forward(const LayerNormArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const T* b = static_cast<const T*>(a.bias);
  T* y = static_cast<T*>(a.y);
  S* mean_out = static_cast<S*>(a.mean);
  S* rstd_out = static_cast<S*>(a.rstd);
  for (int64_t r = 0; r < a.rows; ++r) {
    const T* xr = x + r * a.cols;
    S mean = 0, m2 = 0;
    for (int64_t c = 0; c < a.cols; ++c) {
      S v = S(acc_t<T>(xr[c]));
      S delta = v - mean;
      mean += delta / S(c + 1);
      m2 += delta * (v - mean);
    }
    S rstd = S(1) / std::sqrt(m2 / S(a.cols) + S(a.eps));
    mean_out[r] = mean;
    rstd_out[r] = rstd;
    for (int64_t c = 0; c < a.cols; ++c) {
      S v = (S(acc_t<T>(xr[c])) - mean) * rstd;
      if (w) v *= S(acc_t<T>(w[c]));
      if (b) v += S(acc_t<T>(b[c]));
      y[r * a.cols + c] = T(acc_t<T>(v));
    }
  }
}

template <typename T, typename S>
void backward(const LayerNormArgs& a) {
  const T* x = static_cast<const T*>(a.x);
  const T* w = static_cast<const T*>(a.weight);
  const T* gy = static_cast<const T*>(a.grad_y);
  const S* mean = static_cast<const S*>(a.mean);
  const S* rstd = static_cast<const S*>(a.rstd);
  T* gx = static_cast<T*>(a.grad_x);
  std::vector<S> dw(a.grad_weight ? a.cols : 0, S(0)), db(a.grad_bias ? a.cols : 0, S(0));
  for (int64_t r = 0; r < a.rows; ++r) {
    const T* xr = x + r * a.cols;
    const T* gr = gy + r * a.cols;
    S sum_dxhat = 0, sum_dxhat_xhat = 0;
    for (int64_t c = 0; c < a.cols; ++c) {
      S xhat = (S(acc_t<T>(xr[c])) - mean[r]) * rstd[r];
      S g = S(acc_t<T>(gr[c]));
      S dxhat = w ? g * S(acc_t<T>(w[c])) : g;
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
      if (!dw.empty()) dw[c] += g * xhat;
      if (!db.empty()) db[c] += g;
    }
    S inv_n = S(1) / S(a.cols);
    for (int64_t c = 0; c < a.cols; ++c) {
      S xhat = (S(acc_t<T>(xr[c])) - mean[r]) * rstd[r];
      S g = S(acc_t<T>(gr[c]));
      S dxhat = w ? g * S(acc_t<T>(w[c])) : g;
      gx[r * a.cols + c] = T(acc_t<T>(rstd[r] * (dxhat - inv_n * sum_dxhat - xhat * inv_n * sum_dxhat_xhat)));
    }
  }
  for (size_t c = 0; c < dw.size(); ++c) static_cast<T*>(a.grad_weight)[c] = T(acc_t<T>(dw[c]));
  for (size_t c = 0; c < db.size(); ++c) static_cast<T*>(a.grad_bias)[c] = T(acc_t<T>(db[c]));
}

template <bool Forward>
void layer_norm_kernel(const LayerNormArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "layer_norm", [&]<typename T>() {
    using S = std::conditional_t<std::is_same_v<T, double>, double, float>;
    if constexpr (Forward) forward<T, S>(a);
    else backward<T, S>(a);
  });
}

}  // namespace

EMBER_REGISTER_KERNEL(layer_norm_forward_stub, DeviceType::CPU, layer_norm_kernel<true>);
EMBER_REGISTER_KERNEL(layer_norm_backward_stub, DeviceType::CPU, layer_norm_kernel<false>);

}  // namespace ember::cpu
