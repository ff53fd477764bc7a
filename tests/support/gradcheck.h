// The one finite-difference gradient check every differentiable op's test
// uses.
//
// gradcheck(fn, inputs) compares the gradient that backward() computes with
// central differences, in float64 on the CPU: for a random weighting v of
// the output it checks d(sum(v * fn(inputs)))/d(input) for every input that
// requires grad, element by element. Inputs may be non-contiguous views of
// float64 leaves (make them with .t(), .narrow(), a permute of a detached
// leaf...); perturbations are written through the view.
#pragma once

#include <gtest/gtest.h>

#include <functional>

#include "ember/ember.h"

namespace ember::testing {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-6;
  double rtol = 1e-4;
  uint64_t seed = 1234;
};

::testing::AssertionResult gradcheck(const std::function<Tensor(const TensorList&)>& fn, const TensorList& inputs,
                                     GradcheckOptions options = {});

// A float64 leaf with values from randn, requiring grad.
Tensor random_leaf(const Shape& shape, uint64_t seed = 7);

}  // namespace ember::testing
