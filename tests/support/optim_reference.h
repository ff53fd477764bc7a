// Float64 reference loops of torch.optim.SGD and torch.optim.Adam/AdamW,
// written straight from PyTorch's documented algorithms (independently of
// ember/kernels/optim_math.h), for the optimizer tests to compare against.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace ember::testing {

struct RefSGD {
  double lr, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
  std::vector<double> buf;
  bool has_buf = false;

  void step(std::vector<double>& p, std::vector<double> g) {
    for (size_t i = 0; i < p.size(); ++i) {
      if (weight_decay != 0) g[i] += weight_decay * p[i];
    }
    if (momentum != 0) {
      if (!has_buf) {
        buf = g;
        has_buf = true;
      } else {
        for (size_t i = 0; i < p.size(); ++i) buf[i] = momentum * buf[i] + (1 - dampening) * g[i];
      }
      for (size_t i = 0; i < p.size(); ++i) g[i] = nesterov ? g[i] + momentum * buf[i] : buf[i];
    }
    for (size_t i = 0; i < p.size(); ++i) p[i] -= lr * g[i];
  }
};

struct RefAdam {
  double lr, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0;
  bool amsgrad = false, decoupled = false;
  std::vector<double> m, v, vmax;
  int step_count = 0;

  void step(std::vector<double>& p, std::vector<double> g) {
    if (m.empty()) m = v = vmax = std::vector<double>(p.size(), 0.0);
    ++step_count;
    const double bc1 = 1 - std::pow(beta1, step_count), bc2 = 1 - std::pow(beta2, step_count);
    for (size_t i = 0; i < p.size(); ++i) {
      if (weight_decay != 0) {
        if (decoupled) p[i] *= 1 - lr * weight_decay;
        else g[i] += weight_decay * p[i];
      }
      m[i] = beta1 * m[i] + (1 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1 - beta2) * g[i] * g[i];
      vmax[i] = std::max(vmax[i], v[i]);
      const double second = amsgrad ? vmax[i] : v[i];
      // The textbook form: m_hat = m / bc1, v_hat = v / bc2.
      const double m_hat = m[i] / bc1, v_hat = second / bc2;
      p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
    }
  }
};

}  // namespace ember::testing
