// Kernel signatures and stubs of batch normalization.
//
// Contract: the front-end (ember/core/ops/batch_norm.cpp) hands input as a dense
// (n, c, inner) array (inner: the product of the dims after C, 1 for 2-D
// input; a channels-last (N, C, H, W) input is (N*H*W, C, 1)),
// n * inner >= 1 (>= 2 when training), c >= 1. weight, bias,
// running_mean and running_var are dense (c) arrays of param_dtype (the
// input's dtype, or float32 beside float16 and bfloat16 input: autocast's
// half activations with float32 parameters) or null, as are grad_weight
// and grad_bias; save_mean and save_invstd are (c) arrays of the statistics
// dtype (float32 for float32 and the half types, float64 for float64).
//
// forward:
// - training: per channel, the mean and biased variance over its n * inner
//   values (CUDA: merged Welford states; CPU: two passes); save_mean = mean, save_invstd = 1 / sqrt(var + eps).
//   When non-null, running_mean = (1 - momentum) * running_mean +
//   momentum * mean and running_var likewise with the unbiased variance
//   var * m / (m - 1), m = n * inner; updated in place by the kernel (no host
//   round trip).
// - eval: save_mean = running_mean, save_invstd = 1 / sqrt(running_var + eps)
//   (both non-null).
// - then output = (input - save_mean) * save_invstd * weight + bias (weight
//   1 and bias 0 when null).
// - num_batches_tracked, when non-null (training only), += 1 on the device,
//   by the same launches: nn::BatchNorm's counter without a kernel of its own.
// backward (from the forward's save_mean and save_invstd), with
// xhat = (input - save_mean) * save_invstd and sums per channel over n, inner:
// - grad_weight = sum(grad_output * xhat), grad_bias = sum(grad_output),
// - grad_input = weight * save_invstd * (grad_output - sum(grad_output) / m -
//   xhat * sum(grad_output * xhat) / m) when training (the statistics depend
//   on the input), weight * save_invstd * grad_output in eval;
// each written only when its pointer is non-null. Arithmetic is in the
// statistics dtype; each result rounds once.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/kernel_stub.h"

namespace ember {

struct BatchNormArgs {
  int device = 0;
  DType dtype = DType::Float32;        // input, output, grad_output, grad_input
  DType param_dtype = DType::Float32;  // weight, bias, running stats, grad_weight, grad_bias
  int64_t n = 0, c = 0, inner = 0;
  bool training = true;
  double momentum = 0.1, eps = 1e-5;
  const void* input = nullptr;
  const void* weight = nullptr;
  const void* bias = nullptr;
  void* running_mean = nullptr;
  void* running_var = nullptr;
  void* output = nullptr;
  void* save_mean = nullptr;               // (c), statistics dtype
  void* save_invstd = nullptr;             // (c), statistics dtype
  int64_t* num_batches_tracked = nullptr;  // () counter, training forward only
  // backward only
  const void* grad_output = nullptr;
  void* grad_input = nullptr;
  void* grad_weight = nullptr;
  void* grad_bias = nullptr;
};

// The dtype of save_mean and save_invstd for an input dtype.
inline DType batch_norm_stats_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

using BatchNormKernelFn = void(const BatchNormArgs& args);
extern KernelStub<BatchNormKernelFn> batch_norm_forward_stub;
extern KernelStub<BatchNormKernelFn> batch_norm_backward_stub;

}  // namespace ember
