// The tensor-core path of CUDA fused attention (contract of the kernels in
// ember/core/ops/attention_kernels.h): FlashAttention-2 kernels on
// mma.sync for float16 and bfloat16 with float32 accumulation, on sm_80 and
// newer. ember/kernels/cuda/attention.cu calls these first and runs its SIMT
// kernels when they decline. Internal header (it includes
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
// - force_attention_path(path) makes every later CUDA fused attention in this
//   process take `path` (AttentionPath::Auto: the tensor cores where they take
//   the call, else SIMT) and returns the previous setting; a debugging and
//   benchmarking switch, read by every thread, set by one. Forcing TensorCore
//   on a call the path cannot take is an ember::Error naming the path, the
//   shape and why (thrown by attention_tensor_core_forward/_backward).
//   Forcing Simt makes both functions return false.
#pragma once

#include <cuda_runtime_api.h>

#include "ember/core/ops/attention_kernels.h"

namespace ember::cuda {

enum class AttentionPath { Auto, Simt, TensorCore };

const char* attention_path_name(AttentionPath path);
AttentionPath force_attention_path(AttentionPath path);
AttentionPath forced_attention_path();

// Launch the tensor-core path if it takes `a`; returns false, launching
// nothing, otherwise (or throws when TensorCore is forced, as above).
bool attention_tensor_core_forward(const AttentionArgs& a, cudaStream_t stream);
bool attention_tensor_core_backward(const AttentionArgs& a, cudaStream_t stream);

}  // namespace ember::cuda
