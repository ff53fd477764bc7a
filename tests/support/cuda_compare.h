// The one CUDA-vs-CPU comparison every CUDA kernel's test uses.
//
// cuda_matches_cpu(fn, inputs) runs fn on the CPU inputs and on copies of
// them on cuda:0, and compares every output element with a tolerance per
// dtype. fn should make its own views (t(), narrow, expand...) so the CUDA
// run sees the same strided layouts. Allocations are poisoned (NaN bytes)
// during the CUDA run, so an element a kernel forgot to write fails.
// With grads = true the inputs that require grad are leaves on both devices,
// a random gradient is sent backward from every floating output, and the
// input gradients are compared too.
#pragma once

#include <gtest/gtest.h>

#include <functional>

#include "ember/ember.h"

#define EMBER_REQUIRE_CUDA()                               \
  do {                                                     \
    if (!::ember::testing::cuda_available()) {             \
      GTEST_SKIP() << "no CUDA device: CUDA test skipped"; \
    }                                                      \
  } while (0)

namespace ember::testing {

bool cuda_available();

struct Tolerance {
  double rtol;
  double atol;
};
// float64 1e-10, float32 1e-5, bfloat16 1.6e-2, float16 2e-3 (relative; the
// absolute part is the same number), exact for integers and bool.
Tolerance tolerance_for(DType dtype);

// Element-wise comparison of `actual` (any device) with `expected`; NaN
// positions must agree. The message names the first mismatches and indices.
::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected, Tolerance tol);
::testing::AssertionResult tensors_close(const Tensor& actual, const Tensor& expected);

// grad_tol, when given, is the gradients' tolerance (else tol's).
::testing::AssertionResult cuda_matches_cpu(const std::function<TensorList(const TensorList&)>& fn,
                                            const TensorList& cpu_inputs, bool grads = false,
                                            std::optional<Tolerance> tol = {}, std::optional<Tolerance> grad_tol = {});

// y, after checking that it is channels-last (the format channels-last
// inputs must give back).
Tensor channels_last_output(const Tensor& y);

// Sizes every elementwise kernel is tested at: 1, 7, 1023, 1025, 65537.
const std::vector<int64_t>& odd_sizes();

// The input of a linear layer of `features` inputs at rank 1 to 4 (rank 4
// and above: a size-1 batch dim among them): [features], [65, features],
// [2, 33, features], [2, 1, 17, features].
inline Shape linear_input_shape(int64_t rank, int64_t features) {
  switch (rank) {
    case 1: return {features};
    case 2: return {65, features};
    case 3: return {2, 33, features};
    default: return {2, 1, 17, features};
  }
}

// Every dtype a kernel that moves or selects values must take.
inline constexpr DType kAllDtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16,
                                       DType::Int32,   DType::Int64,   DType::Bool};

// Random CPU data of any dtype from `seed`: randn for floating types, about
// +-100 for integers, half true for bool.
Tensor random_values(const Shape& shape, DType dtype, uint64_t seed);

}  // namespace ember::testing
