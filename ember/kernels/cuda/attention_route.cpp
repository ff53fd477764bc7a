// The fused routes of CUDA fused attention and the choice between them
// (contract in ember/kernels/cuda/attention_route.h), and the forced path
// (ember/kernels/cuda/attention_path.h).
#include "ember/kernels/cuda/attention_route.h"

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ember/core/cuda/graph.h"
#include "ember/core/error.h"
#include "ember/kernels/cuda/attention_path.h"
#include "ember/kernels/cuda/attention_tensor_core.h"
#include "ember/kernels/cuda/libraries/cudnn_attention.h"
#include "ember/kernels/cuda/libraries/fastest_candidate.h"

namespace ember::cuda {
namespace {

std::atomic<AttentionPath> forced_path{AttentionPath::Auto};

// What Auto keeps for a key: a route, or none (both declined).
enum class Route { TensorCore, Cudnn, None };

const char* route_name(Route r) {
  return r == Route::TensorCore ? "tensor_core" : r == Route::Cudnn ? "cudnn" : "none";
}

bool launch(Route r, const AttentionArgs& a, cudaStream_t stream, bool backward) {
  if (r == Route::TensorCore) {
    return backward ? attention_tensor_core_backward(a, stream) : attention_tensor_core_forward(a, stream);
  }
  return backward ? cudnn_attention_backward(a, stream) : cudnn_attention_forward(a, stream);
}

std::string call_str(const AttentionArgs& a) {
  std::ostringstream s;
  s << "q [" << a.batch << ", " << a.heads << ", " << a.q_len << ", " << a.head_dim << "], k [" << a.batch << ", "
    << a.heads << ", " << a.kv_len << ", " << a.head_dim << "], v [..., " << a.value_dim << "] " << dtype_name(a.dtype)
    << (a.causal ? " causal" : "") << " on cuda:" << a.device;
  return s.str();
}

constexpr size_t kKeyLength = 11 + 8 * 3;
using ChoiceKey = std::array<int64_t, kKeyLength>;

ChoiceKey choice_key(const AttentionArgs& a, bool backward) {
  ChoiceKey k{int64_t(backward), a.device,   int64_t(a.dtype), a.batch,           a.heads, a.q_len,
              a.kv_len,          a.head_dim, a.value_dim,      int64_t(a.causal), 0};
  size_t i = 11;
  const int64_t(*strides[])[3] = {&a.q_strides,        &a.k_strides,      &a.v_strides,      &a.out_strides,
                                  &a.grad_out_strides, &a.grad_q_strides, &a.grad_k_strides, &a.grad_v_strides};
  for (size_t s = 0; s < (backward ? 8 : 4); ++s) {
    for (int64_t v : *strides[s]) k[i++] = v;
  }
  return k;
}

class Choices {
 public:
  std::optional<Route> find(const ChoiceKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = map_.find(key);
    if (it == map_.end()) return std::nullopt;
    return it->second;
  }
  void keep(const ChoiceKey& key, Route r) {
    std::lock_guard<std::mutex> lock(mutex_);
    map_[key] = r;
  }

 private:
  std::mutex mutex_;
  std::map<ChoiceKey, Route> map_;
};

// Never destroyed: attention may run during static destruction.
Choices& choices() {
  static Choices* c = new Choices;
  return *c;
}

void log_choice(const AttentionArgs& a, bool backward, const std::vector<CandidateTime>& t, Route kept) {
  const char* on = std::getenv("EMBER_ATTENTION_ROUTE_LOG");  // read at each choice: choices are rare
  if (on == nullptr || std::string(on) != "1") return;
  std::fprintf(stderr, "ember attention route: %s %s: tensor_core %.4f ms, cudnn %.4f ms (%d runs each): kept %s\n",
               backward ? "backward" : "forward", call_str(a).c_str(), double(t[0].ms), double(t[1].ms), kTimedRuns,
               route_name(kept));
}

// Both routes timed on the call's tensors; the faster kept for the key, and
// its results left in the call's outputs.
Route choose(const AttentionArgs& a, cudaStream_t stream, bool backward, const ChoiceKey& key) {
  std::vector<CandidateTime> t;
  const size_t best = fastest_candidate(
      a.device, 2, [&](size_t i) { return launch(i == 0 ? Route::TensorCore : Route::Cudnn, a, stream, backward); },
      &t);
  const bool tensor_cores_ran = std::isfinite(t[0].ms), cudnn_ran = std::isfinite(t[1].ms);
  const Route kept = !tensor_cores_ran && !cudnn_ran ? Route::None : best == 0 ? Route::TensorCore : Route::Cudnn;
  // cuDNN ran last: its results are the call's unless the tensor cores won.
  if (kept == Route::TensorCore && cudnn_ran) launch(Route::TensorCore, a, stream, backward);
  choices().keep(key, kept);
  log_choice(a, backward, t, kept);
  return kept;
}

// Auto asks cuDNN only for calls of at least this many scores (batch * heads
// * q_len * kv_len, 1024 x 1024 for one head): below it, building a cuDNN
// plan (its fused-attention kernels compile at run time, up to seconds a
// shape) costs more than cuDNN could save.
constexpr int64_t kMinCudnnScores = int64_t(1) << 20;

bool run_auto(const AttentionArgs& a, cudaStream_t stream, bool backward) {
  if (a.batch * a.heads * a.q_len * a.kv_len < kMinCudnnScores || cudnn_attention_cannot_take(a, backward) != nullptr) {
    return launch(Route::TensorCore, a, stream, backward);
  }
  const ChoiceKey key = choice_key(a, backward);
  if (const std::optional<Route> kept = choices().find(key)) {
    if (*kept == Route::None) return false;
    const Route other = *kept == Route::TensorCore ? Route::Cudnn : Route::TensorCore;
    return launch(*kept, a, stream, backward) || launch(other, a, stream, backward);
  }
  if (is_capturing(a.device)) {
    return launch(Route::TensorCore, a, stream, backward) || launch(Route::Cudnn, a, stream, backward);
  }
  return choose(a, stream, backward, key) != Route::None;
}

bool run(const AttentionArgs& a, cudaStream_t stream, bool backward) {
  switch (forced_path.load(std::memory_order_relaxed)) {
    case AttentionPath::Simt: return false;
    case AttentionPath::TensorCore: return launch(Route::TensorCore, a, stream, backward);
    case AttentionPath::Cudnn: {
      const char* why = "";
      const bool ran = backward ? cudnn_attention_backward(a, stream, &why) : cudnn_attention_forward(a, stream, &why);
      EMBER_CHECK(ran, (backward ? "scaled_dot_product_attention backward" : "scaled_dot_product_attention")
                           << ": the forced CUDA path 'cudnn' cannot take " << call_str(a) << ": " << why
                           << "; force AttentionPath::TensorCore, Simt or Auto "
                              "(ember/kernels/cuda/libraries/cudnn_attention.h)");
      return true;
    }
    case AttentionPath::Auto: break;
  }
  return run_auto(a, stream, backward);
}

}  // namespace

const char* attention_path_name(AttentionPath path) {
  switch (path) {
    case AttentionPath::Auto: return "auto";
    case AttentionPath::Simt: return "simt";
    case AttentionPath::TensorCore: return "tensor_core";
    case AttentionPath::Cudnn: return "cudnn";
  }
  return "unknown";
}

AttentionPath force_attention_path(AttentionPath path) { return forced_path.exchange(path); }
AttentionPath forced_attention_path() { return forced_path.load(); }

bool attention_route_forward(const AttentionArgs& a, cudaStream_t stream) { return run(a, stream, false); }
bool attention_route_backward(const AttentionArgs& a, cudaStream_t stream) { return run(a, stream, true); }

}  // namespace ember::cuda
