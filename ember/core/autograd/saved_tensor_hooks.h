// Saved-tensor hooks: a thread-local override of what SavedTensor stores
// (PyTorch's torch.autograd.graph.saved_tensors_hooks). Activation
// checkpointing (ember/parallel/checkpoint/checkpoint.h) is built on it: it records the
// forward's graph but keeps no activations, and recomputes them when backward
// first asks for one.
//
// Contract:
// - While a SavedTensorHooksGuard is alive on a thread, every SavedTensor
//   made on that thread (an op saving an input or its output for backward)
//   calls hooks.pack(t) and keeps only what pack returns; SavedTensor::unpack
//   then returns packed->unpack() instead of the stored tensor. The tensor
//   pack sees is what the op saved (an output arrives detached, see
//   ember/core/autograd/function.h).
// - Guards nest: the innermost guard's hooks are the ones used, and a guard
//   restores the previous hooks when it ends. Guards must end in the reverse
//   order of their creation (they are scoped objects).
// - The packed object is owned by the SavedTensor (shared by its copies)
//   and dies with the node that saved it (after that node ran in a backward
//   without retain_graph); it must keep alive whatever unpack needs. The
//   hooks object itself need only outlive its guard.
// - A packed SavedTensor skips the in-place modification check of a plain
//   one (the packed object decides what unpack returns); unpack must return
//   a tensor of the saved one's shape, dtype and device.
// - With no guard alive, SavedTensor costs one thread-local load more than
//   it would without this mechanism.
#pragma once

#include <memory>

#include "ember/core/tensor.h"

namespace ember::autograd {

// What pack returns: the saved tensor's stand-in.
class PackedTensor {
 public:
  virtual ~PackedTensor() = default;
  virtual Tensor unpack() = 0;
};

class SavedTensorHooks {
 public:
  virtual ~SavedTensorHooks() = default;
  virtual std::shared_ptr<PackedTensor> pack(const Tensor& tensor) = 0;
};

// The innermost hooks installed on this thread, or null.
SavedTensorHooks* current_saved_tensor_hooks();

class SavedTensorHooksGuard {
 public:
  // hooks may be null: SavedTensor then stores tensors itself inside the
  // guard's scope (it disables outer hooks).
  explicit SavedTensorHooksGuard(SavedTensorHooks* hooks);
  ~SavedTensorHooksGuard();
  SavedTensorHooksGuard(const SavedTensorHooksGuard&) = delete;
  SavedTensorHooksGuard& operator=(const SavedTensorHooksGuard&) = delete;

 private:
  SavedTensorHooks* previous_;
};

}  // namespace ember::autograd
