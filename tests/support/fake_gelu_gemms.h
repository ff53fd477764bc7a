// CPU stand-ins for the CUDA-only GELU GEMMs (gemm_bias_gelu_stub and
// gemm_dgelu_bgrad_stub, ember/core/ops/gemm_kernels.h), so that the fused
// paths of linear_gelu and linear_gelu_linear, their graphs and fallbacks
// run on the CPU.
//
// Each is made of ember's CPU kernels and ops on the same data, in the
// GEMM's dtype: the forward writes pre with the CPU gemm_bias kernel and
// C = gelu(pre, "tanh"); the backward writes the product with the CPU gemm
// kernel and C = gelu_backward(product, pre, "tanh"), and bias_grad = the
// sums of C's columns (in float64, rounded once). So C and pre are the
// composition's values, bit for bit where its GEMMs take the same layouts.
// Each counts its calls, keeps the arguments the tests look at, and
// declines every call while `decline` is set.
//
//   FakeGeluGemms fakes;                 // both installed for the CPU
//   FakeGeluGemms forward_only(false);   // gemm_dgelu_bgrad has no CPU kernel
#pragma once

#include "ember/core/ops/gemm_kernels.h"
#include "ember/ember.h"

namespace ember::testing {

// An m x n matrix of `dtype` at data with leading dim ld, as a CPU tensor.
inline Tensor matrix_at(const void* data, int64_t m, int64_t n, int64_t ld, DType dtype) {
  return from_blob(const_cast<void*>(data), {m, n}, dtype, kCPU, {ld, 1});
}

struct FakeGeluKernel {
  static inline int calls = 0;
  static inline bool decline = false;
  static inline int64_t last_ld_pre = 0;

  static bool run(const GemmArgs& g, const void* bias, void* pre, int64_t ld_pre) {
    ++calls;
    last_ld_pre = ld_pre;
    if (decline) return false;
    GemmArgs to_pre = g;
    to_pre.c = pre;
    to_pre.ldc = ld_pre;
    EMBER_INTERNAL_ASSERT(gemm_bias_stub(DeviceType::CPU)(to_pre, bias), "the CPU gemm_bias kernel never declines");
    matrix_at(g.c, g.m, g.n, g.ldc, g.dtype).copy_(gelu(matrix_at(pre, g.m, g.n, ld_pre, g.dtype), "tanh"));
    return true;
  }
};

struct FakeGeluGradKernel {
  static inline int calls = 0;
  static inline bool decline = false;
  static inline int64_t last_ld_pre = 0;
  static inline bool last_had_bias_grad = false;

  static bool run(const GemmArgs& g, const void* pre, int64_t ld_pre, void* bias_grad) {
    ++calls;
    last_ld_pre = ld_pre;
    last_had_bias_grad = bias_grad != nullptr;
    if (decline) return false;
    gemm_stub(DeviceType::CPU)(g);
    Tensor c = matrix_at(g.c, g.m, g.n, g.ldc, g.dtype);
    const Tensor d_pre = gelu_backward(c.clone(), matrix_at(pre, g.m, g.n, ld_pre, g.dtype), "tanh");
    c.copy_(d_pre);
    if (bias_grad != nullptr) {
      from_blob(bias_grad, {g.n}, g.dtype).copy_(sum_to(d_pre.to(DType::Float64), {g.n}));
    }
    return true;
  }
};

// Installs FakeGeluKernel, and with_grad_kernel FakeGeluGradKernel, as the
// CPU kernels of their stubs for a scope, counts reset (the CPU has none of
// its own, so none are left when the scope ends).
class FakeGeluGemms {
 public:
  explicit FakeGeluGemms(bool with_grad_kernel = true) {
    FakeGeluKernel::calls = FakeGeluGradKernel::calls = 0;
    FakeGeluKernel::decline = FakeGeluGradKernel::decline = false;
    gemm_bias_gelu_stub.set(DeviceType::CPU, &FakeGeluKernel::run);
    if (with_grad_kernel) gemm_dgelu_bgrad_stub.set(DeviceType::CPU, &FakeGeluGradKernel::run);
  }
  ~FakeGeluGemms() {
    gemm_bias_gelu_stub.set(DeviceType::CPU, nullptr);
    gemm_dgelu_bgrad_stub.set(DeviceType::CPU, nullptr);
  }
  FakeGeluGemms(const FakeGeluGemms&) = delete;
  FakeGeluGemms& operator=(const FakeGeluGemms&) = delete;
};

}  // namespace ember::testing
