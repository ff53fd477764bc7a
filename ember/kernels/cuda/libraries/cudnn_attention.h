// cuDNN's fused scaled-dot-product attention (flash attention) as a route of
// CUDA fused attention (contract of the kernels in
// ember/core/ops/attention_kernels.h), driven through cuDNN's graph (backend)
// API. ember/kernels/cuda/attention_route.h decides when it runs. Internal
// header (it includes cuda_runtime_api.h): only .cu/.cpp files of ember
// include it.
//
// Contract:
// - cudnn_attention_forward(a, stream) / _backward(a, stream) launch cuDNN's
//   fused attention on `stream` (the current stream of a.device, which the
//   caller has made current: the workspace comes from that stream) and return
//   true; or launch nothing and return false, setting *why (when given) to
//   the reason, when this route cannot take `a`:
//   - cudnn_attention_cannot_take(a, backward) names a reason: dtype other than
//     float16 or bfloat16; a mask (bool or float) or dropout (not taken yet);
//     head_dim != value_dim, or head_dim not a multiple of 8 or above 128; an
//     empty q or k; q_len == kv_len == 1 in the backward; a broadcast (0)
//     stride; an operand (logsumexp too) not 16-byte aligned or a batch, head
//     or row stride not a multiple of 8 elements; a device of compute
//     capability below 8.0; cuDNN older than 9.10.2 loaded.
//   - cuDNN has no engine for the call here, none whose numerics keep the
//     contract (no engine that down-converts its inputs or reduces in reduced
//     precision), or none whose workspace the caching allocator can provide;
//     or making the plan failed (*why carries cuDNN's error).
//   A failure while running a plan is an ember::Error.
//   - this thread captures a CUDA graph on the device and has no plan for the
//     call's shape yet: plans are made outside captures, at a shape's first
//     call on a thread.
//   Causal (top-left, as the contract's) is taken; scale is passed by value,
//   so calls that differ only in it share a plan.
// - Strides pass through: q, k, v, out, grad_out and the gradients are read
//   and written in their own (batch, head, row) strides, so (B, T, H, E)
//   views need no copy. logsumexp is the contract's dense [batch, heads,
//   q_len] float32 natural-log logsumexp of the scaled scores, so a forward
//   by one route and a backward by another agree.
// - Math: float32 accumulation and softmax; P is rounded to q's dtype before
//   P V (as in every flash attention).
// - The backward is deterministic where cuDNN has a deterministic engine
//   whose workspace fits (dQ written by its own GEMM); otherwise it
//   accumulates dQ in float32 with atomics (cuDNN's default), and the
//   gradients may then differ in their last bits from one run to the next.
// - Neither synchronizes the host, except at a shape's first call on a
//   thread (the plan: cuDNN's heuristics and finalization, and for a backward
//   whose kv_len is not a multiple of 128 on cuDNN up to 9.15, a copy of the
//   sequence lengths its padding-mask workaround reads).
#pragma once

#include <cuda_runtime_api.h>

#include "ember/core/ops/attention_kernels.h"

namespace ember::cuda {

// Why this route cannot take `a` (the list above, before cuDNN is asked), or
// null when it may.
const char* cudnn_attention_cannot_take(const AttentionArgs& a, bool backward);

// Launch cuDNN's fused attention if it takes `a`; false, launching nothing,
// otherwise (*why says why).
bool cudnn_attention_forward(const AttentionArgs& a, cudaStream_t stream, const char** why = nullptr);
bool cudnn_attention_backward(const AttentionArgs& a, cudaStream_t stream, const char** why = nullptr);

}  // namespace ember::cuda
