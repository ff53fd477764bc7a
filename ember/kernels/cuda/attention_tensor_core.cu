// Tensor-core fused attention (contract in
// ember/kernels/cuda/attention_tensor_core.h). First version: the path switch
// only; every call is declined, so the SIMT kernels serve it.
#include <atomic>

#include "ember/core/error.h"
#include "ember/kernels/cuda/attention_tensor_core.h"

namespace ember::cuda {
namespace {

std::atomic<AttentionPath> forced_path{AttentionPath::Auto};

bool decline(const AttentionArgs& a, const char* op) {
  EMBER_CHECK(forced_path.load(std::memory_order_relaxed) != AttentionPath::TensorCore,
              op << ": the forced CUDA path 'tensor_core' cannot take q [" << a.batch << ", " << a.heads << ", "
                 << a.q_len << ", " << a.head_dim << "] " << dtype_name(a.dtype)
                 << ": it is not implemented yet; force AttentionPath::Auto or Simt "
                    "(ember/kernels/cuda/attention_tensor_core.h)");
  return false;
}

}  // namespace

const char* attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::Auto: return "auto";
    case AttentionPath::Simt: return "simt";
    case AttentionPath::TensorCore: return "tensor_core";
  }
  return "unknown";
}

AttentionPath force_attention_path(AttentionPath path) { return forced_path.exchange(path); }
AttentionPath forced_attention_path() { return forced_path.load(); }

bool attention_tensor_core_forward(const AttentionArgs& a, cudaStream_t) {
  return decline(a, "scaled_dot_product_attention");
}
bool attention_tensor_core_backward(const AttentionArgs& a, cudaStream_t) {
  return decline(a, "scaled_dot_product_attention_backward");
}

}  // namespace ember::cuda
