// The thread-local state of automatic mixed precision (autocast) and the
// cast policy the op front-ends apply. The public guard is
// ember::amp::autocast (ember/parallel/amp/autocast.h); this is the part the ops
// need, so it lives in core.
//
// Contract:
// - Each thread has, per device type, an enabled flag and a lower-precision
//   dtype (float16 or bfloat16; by default float16 for CUDA and bfloat16 for
//   the CPU, as PyTorch). Nothing is enabled on a new thread: code that runs
//   work on other threads (DataParallel's workers) copies the state over
//   with get_state()/set_state().
// - Op front-ends call cast_inputs() at entry when any_enabled(). An input
//   is cast only when it is a defined floating tensor other than float64 on
//   a device type whose autocast is enabled; everything else (integer
//   tensors, float64, tensors of other device types, every tensor when
//   autocast is off) is left as it is.
//   * LowerPrecision (matmul, linear, conv2d, scaled_dot_product_attention):
//     cast to that device type's autocast dtype.
//   * Float32 (softmax, log_softmax, layer_norm, sum, mean, var, std,
//     logsumexp and the losses of ember/nn/loss.h): cast to float32.
//   batch_norm is on neither list (as in PyTorch): it takes a half input
//   with float32 parameters and statistics, computes the statistics in
//   float32 and returns the input's dtype (ember/core/ops.h).
// - The cast is an ordinary differentiable Tensor::to, so gradients reach
//   the float32 originals in float32. linear instead multiplies by casts of
//   its weight and bias made without history (cast_without_history) and
//   gives their gradients in float32 itself (ember/core/ops/linear.cpp), with no
//   cast of them back.
// - Caches, for a float32 leaf that requires grad and is no view (a
//   weight), while grad mode is on and the cache is enabled (under no_grad
//   nothing is cached, so a cast without history is never reused by a
//   forward that needs gradients):
//   * cast(): within the outermost autocast region, the lower-precision
//     cast is made once and reused (PyTorch's autocast cache) as long as
//     the leaf holds the same data, unmodified in place since (the same
//     storage, offset, shape and strides, still float32: a leaf that
//     Module::to points at other data is cast anew); emptied when the outermost
//     region ends (exit_region() bringing the nesting depth to 0). Its data
//     is the kept cast below, under a cast node of the region's own.
//   * cast_without_history(): the cast is kept from region to region, so a
//     weight the optimizer did not change is not cast again. When a kept
//     cast is found stale (its leaf's version moved: an optimizer step),
//     every stale kept cast of the thread to that dtype on that device is
//     made anew in one batched launch (amp::cast_many_stub), into fresh
//     tensors (a graph that saved the old cast keeps it). This holds a
//     half-precision copy of each such weight between steps (half the
//     float32 weights' memory for float16). The fused optimizer steps
//     write a fresh kept cast in the same pass as its weight
//     (fresh_kept_cast below), so a step followed by a forward recasts
//     nothing. Freed by clear_cache(), or
//     after its leaf dies, at the next new kept cast or batched recast.
// - The backward engine suspends autocast while it runs (SuspendGuard):
//   backward ops run in the dtypes the forward chose, as in PyTorch.
// - With autocast off, an op pays one thread-local load and branch.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>

#include "ember/core/device.h"
#include "ember/core/dtype.h"
#include "ember/core/tensor.h"

namespace ember::autocast_state {

struct State {
  std::array<bool, kNumDeviceTypes> enabled{};                                // by DeviceType
  std::array<DType, kNumDeviceTypes> dtype{DType::BFloat16, DType::Float16};  // by DeviceType
  bool cache_enabled = true;
};

State get_state();
// Replaces this thread's state (not the nesting depth, nor the cache).
void set_state(const State& state);

bool is_enabled(DeviceType type);
DType lower_precision_dtype(DeviceType type);

// The autocast regions of this thread: the nesting depth and the cast cache.
void enter_region();
void exit_region();  // empties the cache when the depth returns to 0
// Casts held by the region's cache and kept across regions (for tests).
size_t cached_casts();
size_t kept_casts();
// Empties both caches of this thread (torch.clear_autocast_cache()).
void clear_cache();
// For a fused optimizer step that rewrites float32 leaves in place: the
// kept cast of `leaf` on this thread when one is fresh (made from the
// leaf's present data, unchanged since; undefined otherwise, and always
// during a CUDA graph capture), for the step to write with the updated
// values (optim::FusedTensor::low_copy). Once the step ran and moved the
// leaf's version, kept_cast_rewritten(leaf, cast) marks that cast fresh again and
// moves the cast's own version, so a graph that saved the old values fails
// its in-place check, as it would have on the weight itself.
Tensor fresh_kept_cast(const Tensor& leaf);
void kept_cast_rewritten(const Tensor& leaf, const Tensor& cast);
// Marks every kept cast of every thread stale: cuda::Graph::replay() calls
// it, since a replay changes weights without moving their versions. A
// capture makes its casts afresh and keeps none.
void invalidate_kept_casts();

namespace detail {
// Bit i set: autocast enabled for DeviceType i.
extern constinit thread_local uint8_t enabled_mask;
}  // namespace detail

// True when autocast is enabled for any device type on this thread.
inline bool any_enabled() { return detail::enabled_mask != 0; }

enum class CastPolicy { LowerPrecision, Float32 };

// The cast of t under policy (t itself when it is not cast).
Tensor cast(const Tensor& t, CastPolicy policy);
// The same cast without an autograd record, for an op that sends the
// gradient to t itself in t's dtype (linear: the float32 weight's gradient
// comes straight out of its GEMM); kept across regions (above).
Tensor cast_without_history(const Tensor& t, CastPolicy policy);
// Replaces each input by its cast; true when any changed (the front-end
// then calls itself again with the cast inputs).
bool cast_inputs(CastPolicy policy, std::initializer_list<Tensor*> inputs);
inline bool lower_precision_inputs(std::initializer_list<Tensor*> inputs) {
  return cast_inputs(CastPolicy::LowerPrecision, inputs);
}
inline bool float32_inputs(std::initializer_list<Tensor*> inputs) { return cast_inputs(CastPolicy::Float32, inputs); }

// Turns autocast off on this thread for its scope and restores the state
// after.
class SuspendGuard {
 public:
  SuspendGuard();
  ~SuspendGuard();
  SuspendGuard(const SuspendGuard&) = delete;
  SuspendGuard& operator=(const SuspendGuard&) = delete;

 private:
  State saved_;
};

}  // namespace ember::autocast_state
