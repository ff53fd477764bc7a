// The tensor-core path of CUDA fused attention (contract of the kernels in
// ember/core/ops/attention_kernels.h): FlashAttention-2 kernels on
// mma.sync for float16 and bfloat16 with float32 accumulation, on sm_80 and
// newer. ember/kernels/cuda/attention_route.h calls these (or cuDNN's fused
// attention, where it is faster), and ember/kernels/cuda/attention.cu runs its
// SIMT kernels when the fused routes decline. Internal header (it includes
// cuda_runtime_api.h): only .cu/.cpp files of ember include it.
//
// Contract:
// - attention_tensor_core_forward(a, stream) / _backward(a, stream) launch
//   the path on `stream` (the current stream of a.device, which the caller
//   has made current: the backward's workspace comes from that stream) and
//   return true when it takes `a`: dtype Float16 or BFloat16,
//   head_dim == value_dim in {32, 64, 96, 128, 256} (backward: up to 128),
//   no mask or a Bool mask or one of q's dtype, a device of compute
//   capability 8.0 or newer, 16-byte aligned base pointers and strides that
//   are multiples of 8 elements for every operand. Otherwise they launch
//   nothing and return false. Causal, masks and dropout are all taken. The
//   backward is deterministic (no atomics). Neither synchronizes the host.
// - force_attention_path (ember/kernels/cuda/attention_path.h): with
//   AttentionPath::Simt or Cudnn both functions return false; with
//   TensorCore, a call they cannot take is an ember::Error naming the path,
//   the shape and why.
#pragma once

#include <cuda_runtime_api.h>

#include "ember/core/ops/attention_kernels.h"
#include "ember/kernels/cuda/attention_path.h"

namespace ember::cuda {

// Launch the tensor-core path if it takes `a`; returns false, launching
// nothing, otherwise (or throws when TensorCore is forced, as above).
bool attention_tensor_core_forward(const AttentionArgs& a, cudaStream_t stream);
bool attention_tensor_core_backward(const AttentionArgs& a, cudaStream_t stream);

}  // namespace ember::cuda
