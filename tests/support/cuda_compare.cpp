// CUDA-vs-CPU comparison (see cuda_compare.h).
#include "support/cuda_compare.h"

#include <cmath>
#include <sstream>

#include "ember/core/allocator.h"
#include "ember/core/cuda/device.h"

namespace ember::testing {

bool cuda_available() { return cuda::is_available(); }

Tolerance tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::Float64: return {1e-10, 1e-10};
    case DType::Float32: return {1e-5, 1e-5};
    case DType::Float16: return {2e-3, 2e-3};
    case DType::BFloat16: return {1.6e-2, 1.6e-2};
    default: return {0, 0};
  }
}

::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected) {
  return tensors_close(actual, expected, tolerance_for(expected.dtype()));
}

::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, Tolerance tol) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape " << shape_str(actual.shape()) << " vs expected "
                                         << shape_str(expected.shape());
  }
  if (actual.dtype() != expected.dtype()) {
    return ::testing::AssertionFailure() << "dtype " << dtype_name(actual.dtype()) << " vs expected "
                                         << dtype_name(expected.dtype());
  }
  std::vector<double> a = to_vector<double>(actual), e = to_vector<double>(expected);
  std::ostringstream msg;
  int64_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    bool ok = std::isnan(e[i]) ? std::isnan(a[i])
                               : (a[i] == e[i] || std::fabs(a[i] - e[i]) <= tol.atol + tol.rtol * std::fabs(e[i]));
    if (!ok && ++bad <= 5) msg << "\n  [" << i << "] got " << a[i] << ", expected " << e[i];
  }
  if (bad) {
    return ::testing::AssertionFailure() << bad << " of " << a.size() << " elements differ ("
                                         << dtype_name(expected.dtype()) << ", shape " << shape_str(expected.shape())
                                         << ")" << msg.str();
  }
  return ::testing::AssertionSuccess();
}

namespace {
struct PoisonScope {
  PoisonScope() { set_allocation_poisoning(true); }
  ~PoisonScope() { set_allocation_poisoning(false); }
};

TensorList leaves_on(const TensorList& inputs, Device device) {
  TensorList out;
  for (const Tensor& t : inputs) {
    Tensor c = t.detach().to(device).clone();
    if (t.requires_grad()) c.set_requires_grad();
    out.push_back(c);
  }
  return out;
}
}  // namespace

::testing::AssertionResult cuda_matches_cpu(const std::function<TensorList(const TensorList&)>& fn,
                                            const TensorList& cpu_inputs, bool grads, std::optional<Tolerance> tol,
                                            std::optional<Tolerance> grad_tol) {
  TensorList cpu_in = leaves_on(cpu_inputs, kCPU);
  TensorList cuda_in = leaves_on(cpu_inputs, cuda_device(0));
  TensorList cpu_out = fn(cpu_in);
  TensorList cuda_out;
  {
    PoisonScope poison;
    cuda_out = fn(cuda_in);
  }
  if (cpu_out.size() != cuda_out.size()) return ::testing::AssertionFailure() << "different number of outputs";
  for (size_t i = 0; i < cpu_out.size(); ++i) {
    auto r = tensors_close(cuda_out[i], cpu_out[i], tol.value_or(tolerance_for(cpu_out[i].dtype())));
    if (!r) return ::testing::AssertionFailure() << "output " << i << ": " << r.message();
  }
  if (!grads) return ::testing::AssertionSuccess();

  TensorList roots_cpu, roots_cuda, seeds_cpu, seeds_cuda;
  Generator g(99);
  for (size_t i = 0; i < cpu_out.size(); ++i) {
    if (!cpu_out[i].requires_grad()) continue;
    Tensor seed = randn(cpu_out[i].shape(), cpu_out[i].dtype(), kCPU, &g);
    roots_cpu.push_back(cpu_out[i]);
    roots_cuda.push_back(cuda_out[i]);
    seeds_cpu.push_back(seed);
    seeds_cuda.push_back(seed.to(cuda_device(0)));
  }
  autograd::backward(roots_cpu, seeds_cpu);
  {
    PoisonScope poison;
    autograd::backward(roots_cuda, seeds_cuda);
  }
  for (size_t i = 0; i < cpu_in.size(); ++i) {
    if (!cpu_in[i].requires_grad()) continue;
    if (!cpu_in[i].grad().defined() || !cuda_in[i].grad().defined()) {
      return ::testing::AssertionFailure()
             << "input " << i << ": gradient missing on " << (cpu_in[i].grad().defined() ? "cuda" : "cpu");
    }
    auto r = tensors_close(cuda_in[i].grad(), cpu_in[i].grad(),
                           grad_tol.value_or(tol.value_or(tolerance_for(cpu_in[i].dtype()))));
    if (!r) return ::testing::AssertionFailure() << "gradient of input " << i << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

const std::vector<int64_t>& odd_sizes() {
  static const std::vector<int64_t> sizes = {1, 7, 1023, 1025, 65537};
  return sizes;
}

Tensor random_values(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  Tensor x = randn(shape, DType::Float32, kCPU, &g);
  if (dtype == DType::Bool) return x > 0;
  if (is_integral(dtype)) return (x * 50.0).to(dtype);
  return x.to(dtype);
}

Tensor channels_last_output(const Tensor& y) {
  EXPECT_EQ(y.suggest_memory_format(), MemoryFormat::ChannelsLast) << "on " << y.device();
  return y;
}

}  // namespace ember::testing
