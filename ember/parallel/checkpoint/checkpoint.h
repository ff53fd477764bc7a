// Activation checkpointing, as torch.utils.checkpoint (its non-reentrant
// variant): trade compute for memory by recomputing a segment's activations
// during backward instead of keeping them from the forward.
//
//   Tensor y = parallel::checkpoint([block](const Tensor& x) { return block->forward(x); }, x);
//   Tensor z = parallel::checkpoint_sequential(*model, 4, x);   // 3 checkpointed segments + the last one
//
// Contract:
// - checkpoint(fn, args...) returns fn(args...) (a Tensor or a TensorList)
//   with its whole graph recorded, but every tensor the ops inside fn save
//   for backward is dropped (through saved-tensor hooks,
//   ember/core/autograd/saved_tensor_hooks.h). The first time backward needs one
//   of them, fn runs again on the same inputs, with grad mode on and under
//   the forward's autocast state and, with preserve_rng_state, the forward's
//   random number generator states (the default generators of the CPU and
//   of the CUDA devices of the tensor arguments; the callers' states are put
//   back afterwards), so Dropout draws the same mask. The recomputed saved
//   tensors then serve the original graph, and each is freed when the node
//   that needs it has run (without retain_graph).
// - Because backward runs through the forward's own graph, results are
//   those of the plain computation bit for bit (on the CPU), each leaf's
//   gradient is accumulated once per backward and its post-accumulate-grad
//   hooks fire once (DistributedDataParallel's bucket hooks rely on that),
//   and parameters that fn uses get gradients whether or not any input
//   requires grad.
// - Arguments: each Tensor argument is a checkpoint input; it is kept (not
//   copied) until the recomputation (inside another checkpoint, through that
//   one's hooks, so nested checkpoints keep only the outer inputs), and
//   modifying it in place before backward is an ember::Error at the
//   recomputation. Other arguments (numbers, flags, a TensorList) are copied
//   into the recomputation as they are. Undefined tensors and tensors that
//   do not require grad are allowed.
// - fn must compute the same thing each time it runs: the recomputation must
//   save as many tensors, of the same shapes, dtypes and devices, as the
//   forward did, or backward throws an ember::Error saying which differs.
//   Whatever fn captures must stay alive until backward (capture modules by
//   shared_ptr).
// - With grad mode off, checkpoint just calls fn.
// - Nested checkpoints and checkpoints under autocast work. Higher-order
//   gradients (create_graph) through a checkpoint are an ember::Error, as is
//   a second backward through a checkpoint whose graph was freed (the usual
//   retain_graph error). With retain_graph the recomputed tensors stay until
//   the graph is freed (a second backward does not recompute).
// - checkpoint_sequential(seq, segments, input) splits seq's modules into
//   `segments` runs of size() / segments modules (the last takes the rest),
//   checkpoints every run but the last and runs the last one normally, as
//   PyTorch's. 1 <= segments <= seq.size().
#pragma once

#include <array>
#include <concepts>
#include <cstdint>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>
#include <variant>

#include "ember/core/tensor.h"
#include "ember/nn/container.h"

namespace ember::parallel {

struct CheckpointOptions {
  bool preserve_rng_state = true;
};

namespace detail {

using CheckpointBody = std::function<TensorList(const TensorList&)>;
TensorList checkpoint_tensors(CheckpointBody body, const TensorList& inputs, const CheckpointOptions& options);

template <typename T>
inline constexpr bool is_tensor_v = std::is_same_v<std::remove_cvref_t<T>, Tensor>;
// A copy of a non-tensor argument; tensors travel separately.
template <typename T>
using StoredArg = std::conditional_t<is_tensor_v<T>, std::monostate, std::remove_cvref_t<T>>;

// For each argument, its position among the tensor arguments.
template <typename... Args>
constexpr std::array<size_t, sizeof...(Args)> tensor_slots() {
  std::array<size_t, sizeof...(Args)> slots{};
  constexpr bool is_tensor[] = {is_tensor_v<Args>..., false};
  size_t k = 0;
  for (size_t i = 0; i < sizeof...(Args); ++i) {
    slots[i] = k;
    if (is_tensor[i]) ++k;
  }
  return slots;
}

template <typename T>
StoredArg<T> store(const T& arg) {
  if constexpr (is_tensor_v<T>) return {};
  else return arg;
}

template <size_t I, typename... Args>
decltype(auto) argument(const std::tuple<StoredArg<Args>...>& stored, const TensorList& tensors) {
  using T = std::tuple_element_t<I, std::tuple<Args...>>;
  if constexpr (is_tensor_v<T>) {
    return static_cast<const Tensor&>(tensors[tensor_slots<Args...>()[I]]);
  } else {
    return static_cast<const StoredArg<T>&>(std::get<I>(stored));
  }
}

template <typename R>
TensorList as_list(R&& result) {
  using T = std::remove_cvref_t<R>;
  static_assert(std::is_same_v<T, Tensor> || std::is_same_v<T, TensorList>,
                "parallel::checkpoint: the function must return a Tensor or a TensorList");
  if constexpr (std::is_same_v<T, Tensor>) return TensorList{std::forward<R>(result)};
  else return TensorList(std::forward<R>(result));
}

}  // namespace detail

template <typename Fn, typename... Args>
requires std::invocable<Fn&, const Args&...>
auto checkpoint(const CheckpointOptions& options, Fn fn, const Args&... args) {
  using Result = std::remove_cvref_t<std::invoke_result_t<Fn&, const Args&...>>;
  TensorList tensors;
  (
      [&] {
        if constexpr (detail::is_tensor_v<Args>) tensors.push_back(args);
      }(),
      ...);
  auto shared_fn = std::make_shared<Fn>(std::move(fn));
  auto stored = std::make_shared<std::tuple<detail::StoredArg<Args>...>>(detail::store(args)...);
  detail::CheckpointBody body = [shared_fn, stored](const TensorList& ts) {
    return [&]<size_t... I>(std::index_sequence<I...>) {
      return detail::as_list((*shared_fn)(detail::argument<I, Args...>(*stored, ts)...));
    }
    (std::index_sequence_for<Args...>{});
  };
  TensorList out = detail::checkpoint_tensors(std::move(body), tensors, options);
  if constexpr (std::is_same_v<Result, Tensor>) return out.at(0);
  else return out;
}

template <typename Fn, typename... Args>
requires std::invocable<Fn&, const Args&...>
auto checkpoint(Fn fn, const Args&... args) { return checkpoint(CheckpointOptions{}, std::move(fn), args...); }

Tensor checkpoint_sequential(const nn::Sequential& sequential, int64_t segments, const Tensor& input,
                             const CheckpointOptions& options = {});

}  // namespace ember::parallel
