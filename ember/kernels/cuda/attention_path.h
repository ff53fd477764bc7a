// Which kernels run a CUDA fused attention call: one of the fused routes
// (ember/kernels/cuda/attention_route.h: ember's tensor-core path,
// ember/kernels/cuda/attention_tensor_core.h, or cuDNN's fused attention,
// ember/kernels/cuda/libraries/cudnn_attention.h) where they take the call,
// else the SIMT kernels; or one of them forced, so that a benchmark can time
// the paths against one another on one shape and a test can check each
// against the CPU (as ember/kernels/cuda/softmax_path.h does for softmax).
// Host code; includes no CUDA header.
//
// Contract:
// - force_attention_path(path) makes every later CUDA fused attention, forward
//   and backward, in this process take `path` and returns the previous
//   setting. AttentionPath::Auto: of the fused routes that take the call, the
//   faster for its shape (attention_route.h), else SIMT. It is a debugging
//   and benchmarking switch, read by every thread, set by one.
// - Forcing TensorCore or Cudnn on a call the path cannot take makes that
//   call an ember::Error naming the path, the shape, the dtype and the reason
//   (the lists are in attention_tensor_core.h and cudnn_attention.h). Simt
//   takes every call.
#pragma once

namespace ember::cuda {

enum class AttentionPath { Auto, Simt, TensorCore, Cudnn };

// "auto", "simt", "tensor_core", "cudnn".
const char* attention_path_name(AttentionPath path);
AttentionPath force_attention_path(AttentionPath path);
AttentionPath forced_attention_path();

}  // namespace ember::cuda
