// Which CUDA kernels run a fused attention call: the tensor-core path
// (ember/kernels/cuda/attention_tensor_core.h) where it takes the call, else
// the SIMT kernels, or one of them forced, so that a benchmark can time the
// paths against one another on one shape and a test can check each against
// the CPU (as ember/kernels/cuda/softmax_path.h does for softmax). Host code;
// includes no CUDA header.
//
// Contract:
// - force_attention_path(path) makes every later CUDA fused attention, forward
//   and backward, in this process take `path` (AttentionPath::Auto: the
//   tensor cores where they take the call, else SIMT) and returns the
//   previous setting. It is a debugging and benchmarking switch, read by
//   every thread, set by one.
// - Forcing TensorCore on a call the path cannot take makes that call an
//   ember::Error naming the path, the shape, the dtype and the reason (the
//   list is in attention_tensor_core.h). Simt takes every call.
#pragma once

namespace ember::cuda {

enum class AttentionPath { Auto, Simt, TensorCore };

const char* attention_path_name(AttentionPath path);
AttentionPath force_attention_path(AttentionPath path);
AttentionPath forced_attention_path();

}  // namespace ember::cuda
