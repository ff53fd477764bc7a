// Kernel signature and stub of dropout.
//
// Contract: in and out are dense arrays of n elements of dtype; element i is
// kept when philox::uniform(generate(seed, offset + i).x) >= p, and then
// multiplied by scale, else written as 0. Running the kernel on the
// incoming gradient with the same state applies the same mask (backward).
// On CUDA, offset is state.offset plus *offset_shift when offset_shift is
// set: a kernel captured in a CUDA graph reads there the shift each replay
// stores (ember/core/cuda/graph.h). The CPU never has one.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/generator.h"
#include "ember/core/kernel_stub.h"

namespace ember {

struct DropoutArgs {
  int device = 0;
  int64_t n = 0;
  DType dtype = DType::Float32;
  const void* in = nullptr;
  void* out = nullptr;
  GeneratorState state;
  const uint64_t* offset_shift = nullptr;  // device memory, or null
  double p = 0.5;
  double scale = 2.0;  // applied in the element's compute type (float64 for float64)
};

using DropoutKernelFn = void(const DropoutArgs& args);
extern KernelStub<DropoutKernelFn> dropout_stub;

}  // namespace ember
