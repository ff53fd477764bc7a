// Kernel signatures and stubs of fused scaled dot-product attention: the
// flash-attention algorithm (online softmax over blocks of keys), which
// never holds a (q_len, kv_len) matrix in memory.
//
// Contract:
// - q is [batch, heads, q_len, head_dim], k [batch, heads, kv_len, head_dim],
//   v [batch, heads, kv_len, value_dim], out [batch, heads, q_len, value_dim],
//   each given by its strides in elements over (batch, head, row); the last
//   (feature) dim is dense (stride 1). A stride may be 0 (a broadcast batch
//   or head), so views of a fused QKV projection need no copy.
// - scores s_ij = scale * q_i . k_j, then:
//   - causal blocks j > i (top-left aligned, as PyTorch's is_causal);
//   - a Bool mask keeps the positions where it is true; a floating mask (of
//     the same dtype as q) is added to the scores. The mask is read as
//     [batch, heads, q_len, kv_len] through mask_strides (0 where broadcast).
// - forward writes out = softmax(s) v (after dropout) and, per row,
//   logsumexp = log(sum_j exp(s_ij)) over the kept positions, dense
//   [batch, heads, q_len] in the statistics dtype (float32; float64 for
//   float64). A row with every position blocked has logsumexp -inf and an
//   output of zeros (as PyTorch's SDPA kernels); its gradients are zeros.
// - dropout (dropout_p > 0) keeps probability p_ij when
//   attention_dropout_keep(seed, offset, index, dropout_p) is true, index
//   being ((b * heads + h) * q_len + i) * kv_len + j, and scales the kept ones
//   by 1 / (1 - dropout_p). The op reserves attention_dropout_blocks(...)
//   Philox blocks. On CUDA, offset is dropout_state.offset plus
//   *dropout_offset_shift when that is set (a kernel captured in a CUDA
//   graph, ember/core/cuda/graph.h); the CPU never has one.
// - backward takes q, k, v, out, grad_out and the saved logsumexp (and the
//   same mask, causal, scale and dropout state) and writes grad_q, grad_k,
//   grad_v in their own strides (each dense in the last dim, no 0 strides:
//   the front-end sums over broadcast dims). It computes the per-row
//   D_i = sum_c grad_out_ic * out_ic itself.
// - Accumulation is in float32 for the half types and float32, float64 for
//   float64.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"
#include "ember/core/generator.h"
#include "ember/core/half.h"
#include "ember/core/kernel_stub.h"
#include "ember/core/philox.h"

namespace ember {

struct AttentionArgs {
  int device = 0;
  DType dtype = DType::Float32;  // q, k, v, out and the gradients
  int64_t batch = 0, heads = 0, q_len = 0, kv_len = 0, head_dim = 0, value_dim = 0;
  // strides in elements over (batch, head, row)
  const void* q = nullptr;
  int64_t q_strides[3] = {0, 0, 0};
  const void* k = nullptr;
  int64_t k_strides[3] = {0, 0, 0};
  const void* v = nullptr;
  int64_t v_strides[3] = {0, 0, 0};
  void* out = nullptr;  // written by forward, read by backward
  int64_t out_strides[3] = {0, 0, 0};
  void* logsumexp = nullptr;  // dense [batch, heads, q_len], statistics dtype

  const void* mask = nullptr;  // or null
  DType mask_dtype = DType::Bool;
  int64_t mask_strides[4] = {0, 0, 0, 0};  // over (batch, head, query row, key column)
  bool causal = false;
  double scale = 1.0;

  double dropout_p = 0.0;
  GeneratorState dropout_state;
  const uint64_t* dropout_offset_shift = nullptr;  // device memory, or null

  // backward only
  const void* grad_out = nullptr;
  int64_t grad_out_strides[3] = {0, 0, 0};
  void* grad_q = nullptr;
  int64_t grad_q_strides[3] = {0, 0, 0};
  void* grad_k = nullptr;
  int64_t grad_k_strides[3] = {0, 0, 0};
  void* grad_v = nullptr;
  int64_t grad_v_strides[3] = {0, 0, 0};
};

// The dtype of logsumexp for an input dtype.
inline DType attention_stats_dtype(DType t) { return t == DType::Float64 ? DType::Float64 : DType::Float32; }

// Philox blocks one dropout draw over [batch, heads, q_len, kv_len] uses
// (four probabilities per block).
inline uint64_t attention_dropout_blocks(int64_t batch, int64_t heads, int64_t q_len, int64_t kv_len) {
  return (uint64_t(batch) * uint64_t(heads) * uint64_t(q_len) * uint64_t(kv_len) + 3) / 4;
}

// Whether dropout keeps the probability at `index` (the contract's).
EMBER_HOST_DEVICE inline bool attention_dropout_keep(uint64_t seed, uint64_t offset, uint64_t index, float p) {
  philox::Uint4 r = philox::generate(seed, offset + index / 4);
  uint32_t word = (index & 3) == 0 ? r.x : (index & 3) == 1 ? r.y : (index & 3) == 2 ? r.z : r.w;
  return philox::uniform(word) >= p;
}

using AttentionKernelFn = void(const AttentionArgs& args);
extern KernelStub<AttentionKernelFn> attention_forward_stub;
extern KernelStub<AttentionKernelFn> attention_backward_stub;

}  // namespace ember
