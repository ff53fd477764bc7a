// The fused routes of CUDA fused attention (contract of the kernels in
// ember/core/ops/attention_kernels.h): ember's tensor-core kernels
// (ember/kernels/cuda/attention_tensor_core.h) and cuDNN's fused attention
// (ember/kernels/cuda/libraries/cudnn_attention.h), and which of them runs a
// call, as conv2d keeps the fastest of its timed plans. Internal header (it
// includes cuda_runtime_api.h): only .cu/.cpp files of ember include it.
//
// Contract:
// - attention_route_forward(a, stream) / _backward(a, stream) launch `a` on
//   one fused route, on `stream` (the current stream of a.device, made
//   current by the caller), and return true; or launch nothing and return
//   false when no fused route takes it (ember/kernels/cuda/attention.cu then
//   runs its SIMT kernels).
// - The route follows force_attention_path (ember/kernels/cuda/attention_path.h):
//   Simt: none (false). TensorCore: the tensor-core path, or its error. Cudnn:
//   cuDNN's, or an ember::Error naming the path, the shapes, the dtype, the
//   device and cuDNN's reason.
// - Auto: a call of fewer than 2^20 scores (batch * heads * q_len * kv_len)
//   runs the tensor-core path where it takes it: cuDNN's plans take long to
//   make (its kernels compile at run time). A larger call only one route
//   takes runs on it. A call both take is keyed by (direction, device,
//   dtype, shapes, every operand's strides, causal); at the key's first call
//   outside a CUDA graph capture both routes run on the call's own tensors
//   (ember/kernels/cuda/libraries/fastest_candidate.h: a warm-up, which makes
//   cuDNN's plan, then three timed runs each), and the faster is kept for the
//   key for the life of the process; the call's results are the kept
//   route's. The forward's runs rewrite out and logsumexp and the backward's
//   the gradients, so the timing changes nothing else. While a capture runs,
//   a key with no choice yet runs the tensor-core path (cuDNN's where the
//   tensor cores decline and this thread already has its plan). The timing
//   waits for the device (once per key).
// - With EMBER_ATTENTION_ROUTE_LOG=1 each choice prints one line on stderr:
//   the call, each route's milliseconds for the timed runs, the one kept.
#pragma once

#include <cuda_runtime_api.h>

#include "ember/core/ops/attention_kernels.h"

namespace ember::cuda {

bool attention_route_forward(const AttentionArgs& a, cudaStream_t stream);
bool attention_route_backward(const AttentionArgs& a, cudaStream_t stream);

}  // namespace ember::cuda
