// Swapping one device type's kernel of a stub (ember/core/kernel_stub.h) for a
// test's wrapper, for a scope: the wrapper counts or records its calls and
// forwards them to the kernel it replaced.
//
//   using Swap = testing::StubSwap<GemmBiasGradKernelFn, &gemm_bias_grad_stub>;
//   bool counting(const GemmArgs& g, DType c, void* bias_grad) {
//     ++calls;
//     return Swap::real()(g, c, bias_grad);
//   }
//   Swap swap(DeviceType::CPU, &counting);   // restored when swap ends
//
// One swap of a stub at a time: the replaced kernel is kept per stub.
#pragma once

#include "ember/core/kernel_stub.h"

namespace ember::testing {

template <typename Fn, KernelStub<Fn>* Stub>
class StubSwap {
 public:
  StubSwap(DeviceType type, Fn* wrapper) : type_(type) {
    real_slot() = (*Stub)(type);
    Stub->set(type, wrapper);
  }
  ~StubSwap() { Stub->set(type_, real_slot()); }
  StubSwap(const StubSwap&) = delete;
  StubSwap& operator=(const StubSwap&) = delete;

  // The kernel the swap replaced.
  static Fn* real() { return real_slot(); }

 private:
  static Fn*& real_slot() {
    static Fn* fn = nullptr;
    return fn;
  }
  DeviceType type_;
};

}  // namespace ember::testing
