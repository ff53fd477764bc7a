// What an op needs to record itself for backward: SavedTensor, FunctionNode
// and record().
//
// Contract:
// - SavedTensor remembers the version of the tensor it saved; unpack()
//   throws an ember::Error naming the node if the tensor was modified in
//   place since (the classic "modified by an inplace operation" error).
//   Save an op's own output with SavedTensor::output(): it is stored without
//   its history, so node and output do not keep each other alive; unpacked
//   while the node runs with grad mode on (create_graph), it gets the node
//   back as its grad_fn, so higher-order gradients flow through it.
// - Under saved-tensor hooks (ember/core/autograd/saved_tensor_hooks.h) a
//   SavedTensor keeps what the hooks' pack returns instead of the tensor,
//   and unpack() asks that object for the tensor.
// - FunctionNode runs a backward closure. The closure gets one gradient per
//   output (undefined = zero) and returns one per input (undefined = none);
//   when every incoming gradient is undefined the closure is skipped. The
//   node checks that each returned gradient has its input's shape, dtype and
//   device, so a wrong formula fails loudly at its source.
// - record() links a new node to the inputs that require grad and makes it
//   the grad_fn of the outputs. Call it only when needs_grad(...) is true.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "ember/core/autograd/node.h"
#include "ember/core/autograd/saved_tensor_hooks.h"
#include "ember/core/grad_mode.h"

namespace ember::autograd {

class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  static SavedTensor output(const Tensor& t, uint32_t output_nr = 0);
  // The saved tensor; `node` names the op in the error if it was modified.
  Tensor unpack(const char* node) const;
  bool defined() const { return tensor_.defined() || packed_ != nullptr; }

 private:
  // Hands t to the current saved-tensor hooks, if any; true when it did.
  bool pack(const Tensor& t);

  Tensor tensor_;
  std::shared_ptr<PackedTensor> packed_;  // set instead of tensor_ under saved-tensor hooks
  uint32_t version_ = 0;
  bool is_output_ = false;
  uint32_t output_nr_ = 0;
};

class FunctionNode final : public Node {
 public:
  using Backward = std::function<TensorList(const TensorList& grads)>;
  struct InputMeta {
    Shape shape;
    DType dtype;
    Device device;
  };
  FunctionNode(const char* name, Backward fn, std::vector<Edge> edges, std::vector<InputMeta> inputs,
               uint32_t num_outputs);

  std::string name() const override { return name_; }
  TensorList apply(TensorList&& grads) override;
  void release() override { fn_ = nullptr; }

 private:
  const char* name_;
  Backward fn_;
  std::vector<InputMeta> inputs_;
};

// True when grad mode is on and any defined input requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
inline bool needs_grad(const Tensor& a) { return needs_grad({&a}); }
inline bool needs_grad(const Tensor& a, const Tensor& b) { return needs_grad({&a, &b}); }
inline bool needs_grad(const Tensor& a, const Tensor& b, const Tensor& c) { return needs_grad({&a, &b, &c}); }
bool needs_grad(const TensorList& inputs);

// Records `name` with its backward for outputs made from inputs. The vector
// form serves ops with a run-time number of outputs (split, chunk).
void record(const char* name, std::initializer_list<Tensor*> outputs, const TensorList& inputs,
            FunctionNode::Backward backward);
void record(const char* name, const std::vector<Tensor*>& outputs, const TensorList& inputs,
            FunctionNode::Backward backward);

}  // namespace ember::autograd
