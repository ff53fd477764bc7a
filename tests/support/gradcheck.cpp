// Central-difference check of vector-Jacobian products (see gradcheck.h).
#include "support/gradcheck.h"

#include <cmath>
#include <sstream>

namespace ember::testing {
namespace {

// Pointer to element `flat` (row-major) of a strided float64 tensor.
double* element(const Tensor& t, int64_t flat) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    int64_t size = t.size(d);
    off += (flat % size) * t.stride(d);
    flat /= size;
  }
  return static_cast<double*>(t.data_ptr()) + off;
}

double weighted_sum(const Tensor& y, const Tensor& v) {
  NoGradGuard no_grad;
  return (y.to(DType::Float64) * v).sum().item<double>();
}

}  // namespace

Tensor random_leaf(const Shape& shape, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::Float64, kCPU, &g).set_requires_grad();
}

::testing::AssertionResult gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                                     GradcheckOptions o) {
  for (const Tensor& x : inputs) {
    if (x.defined() && x.requires_grad() && x.dtype() != DType::Float64) {
      return ::testing::AssertionFailure()
             << "gradcheck: inputs that require grad must be float64, got " << dtype_name(x.dtype());
    }
  }
  Tensor y = fn(inputs);
  if (!y.requires_grad()) return ::testing::AssertionFailure() << "gradcheck: the output does not require grad";
  Generator g(o.seed);
  Tensor v = randn(y.shape(), DType::Float64, kCPU, &g);
  TensorList wrt;
  for (const Tensor& x : inputs) {
    if (x.defined() && x.requires_grad()) wrt.push_back(x);
  }
  TensorList analytic = autograd::grad({y}, wrt, {v.to(y.dtype())}, false, false, true);

  std::ostringstream failures;
  int bad = 0;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const Tensor& x = wrt[k];
    Tensor ga = analytic[k].defined() ? analytic[k] : zeros(x.shape(), DType::Float64);
    std::vector<double> a = to_vector<double>(ga);
    for (int64_t j = 0; j < x.numel(); ++j) {
      double* p = element(x, j);
      double saved = *p;
      *p = saved + o.eps;
      double plus = weighted_sum(fn(inputs), v);
      *p = saved - o.eps;
      double minus = weighted_sum(fn(inputs), v);
      *p = saved;
      double numeric = (plus - minus) / (2 * o.eps);
      if (!(std::fabs(numeric - a[j]) <= o.atol + o.rtol * std::fabs(numeric))) {
        if (++bad <= 5) {
          failures << "\n  input " << k << " (shape " << shape_str(x.shape()) << ") element " << j << ": analytic "
                   << a[j] << " vs numeric " << numeric;
        }
      }
    }
  }
  if (bad) return ::testing::AssertionFailure() << bad << " gradient mismatches" << failures.str();
  return ::testing::AssertionSuccess();
}

}  // namespace ember::testing
