// nn::Module: the base of every layer, and UnaryModule, the base of the
// layers a Sequential can chain.
//
// A module is a plain class deriving from Module, always held by
// std::shared_ptr (make it with std::make_shared; modules() needs that).
// In its constructor it registers, by name:
//   weight = register_parameter("weight", empty({out, in}));  // a leaf that requires grad
//   running_mean = register_buffer("running_mean", zeros({c}));  // state, no grad
//   fc = register_module("fc", std::make_shared<Linear>(4, 3));  // a child
// and keeps the returned handles as members. A member and its registry
// entry are two handles to one tensor, so to(), load_state_dict() and
// clone() reach the member through the registry. Assigning a new tensor to
// the member afterwards does not update the registry: register the new one
// under a new name instead.
//
// Contract:
// - Names are non-empty, contain no '.', and are unique among a module's
//   parameters, buffers and children. Recursive listings use dotted names
//   ("0.weight", "block.attn.in_proj_weight") in registration order:
//   a module's own parameters (or buffers), then each child's, depth first.
//   A tensor or module reachable twice (weight tying, a shared child) is
//   listed once, under its first name, in parameters()/named_parameters(),
//   buffers(), modules(); state_dict() lists every name.
// - to(device) / to(dtype) convert every parameter and buffer (to(dtype)
//   only the floating ones; num_batches_tracked stays int64) and their
//   grads, in place: the tensor handles stay the same and point at the
//   converted data afterwards (PyTorch's param.data = ...), so tied weights
//   stay tied. Build optimizers after to(): an optimizer built before holds
//   state (momentum, Adam moments) of the old device and dtype. Do not call
//   to() between a forward and its backward.
// - clone() is a deep copy of the module tree: fresh parameter and buffer
//   tensors with equal values, dtypes, devices and requires_grad flags (no
//   grads), and the same training flags. Each module class implements it;
//   a class constructed from its own arguments implements it as
//     std::shared_ptr<Module> clone() const override { return clone_as<Self>(args...); }
//   which constructs a fresh Self (skipping nn::init, see init.h), then
//   copies this module's state into it by name; containers clone each
//   child. nn::clone(m) returns the copy with m's static type.
// - state_dict() maps every dotted name to its parameter or buffer,
//   detached but sharing storage with the module (clone() the tensors for
//   a snapshot). load_state_dict copies values in place under NoGradGuard
//   after checking everything first: with strict, missing and unexpected
//   keys are an error listing each; always, a shape mismatch or a value of
//   the wrong kind (a floating value for an integral entry or the reverse)
//   is an error naming the key. Floating values are cast to the entry's
//   dtype and moved to its device, as PyTorch's load does.
// - operator<< / str() print the tree as PyTorch's repr does:
//   Sequential(
//     (0): Linear(in_features=784, out_features=256, bias=true)
//     (1): ReLU()
//   )
//   A class describes itself with extra_repr(); the default lists the
//   module's own parameters and buffers with their shapes.
// - forward is a typed member of each layer, and operator() calls it.
//   Layers taking one tensor derive from UnaryModule, whose virtual
//   forward(const Tensor&) is what Sequential chains; layers taking more
//   (MultiheadAttention, the losses) derive from Module and declare their
//   own forward.
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <typeinfo>
#include <utility>
#include <vector>

#include "ember/core/tensor.h"
#include "ember/nn/init.h"
#include "ember/nn/ordered_dict.h"

namespace ember::nn {

struct LoadStateDictResult {
  std::vector<std::string> missing_keys;     // in the module, not in the dict
  std::vector<std::string> unexpected_keys;  // in the dict, not in the module
};

class Module : public std::enable_shared_from_this<Module> {
 public:
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // ---- registration (returns the registered handle) ----
  // A parameter is a defined leaf; requires_grad is set on it (floating only).
  Tensor register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(std::string name, Tensor tensor);
  template <typename M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }
  // Puts `module` in the place of the child `name` (same name, same
  // position in every listing); an error when there is no such child.
  // Sequential and ModuleList keep the list their forward walks in step
  // (Sequential needs a UnaryModule). Another module that calls the child
  // through a member of its own keeps calling the old one: such a class
  // overrides this to update that member too.
  virtual void replace_module(const std::string& name, std::shared_ptr<Module> module);
  // Makes the parameter `name` of this module be `parameter` itself, in the
  // registry and in the member the class keeps it in: weight tying, as
  // PyTorch's head.weight = emb.weight (ember:
  // head->replace_parameter("weight", emb->weight)). `parameter` is a leaf
  // with the shape, dtype and device of the one it replaces; it keeps its
  // requires_grad. The tensor is then listed once by parameters() (under
  // its first name), so an optimizer steps it once with the gradients of
  // every use summed; state_dict() keeps both names, nn::save writes it
  // once (see ember/nn/serialize.h), and to(), load_state_dict() and nn::load
  // keep the tie. Tie in the model's constructor so that clone() rebuilds
  // it. An error, changing nothing, when there is no such parameter or the
  // class has not said which member holds it (parameter_replaced below).
  void replace_parameter(const std::string& name, Tensor parameter);

  // ---- the tree ----
  TensorList parameters(bool recurse = true) const;
  OrderedDict<Tensor> named_parameters(bool recurse = true) const;
  TensorList buffers(bool recurse = true) const;
  OrderedDict<Tensor> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  OrderedDict<std::shared_ptr<Module>> named_children() const;
  // This module first, then every descendant, depth first.
  std::vector<std::shared_ptr<Module>> modules();
  OrderedDict<std::shared_ptr<Module>> named_modules();  // this one is ""
  // fn on every descendant, children before their parent, then this module.
  void apply(const std::function<void(Module&)>& fn);

  // ---- mode ----
  virtual void train(bool on = true);  // sets the whole subtree
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // ---- device and dtype (see the contract above) ----
  void to(Device device);
  void to(DType dtype);
  void to(Device device, DType dtype);
  // Lays out every 4-D parameter and buffer (and its grad) in format
  // (Contiguous or ChannelsLast), in place as to(device) does; tensors of
  // other ranks stay as they are. With ChannelsLast weights, a convolution
  // computes in channels-last (cuDNN's tensor-core layout), and batch norm,
  // pooling and the elementwise ops keep that layout.
  void to(MemoryFormat format);

  // Drops every parameter's grad (set_to_none), or zeroes it in place.
  void zero_grad(bool set_to_none = true);

  // ---- copies ----
  virtual std::shared_ptr<Module> clone() const = 0;

  // ---- state ----
  OrderedDict<Tensor> state_dict() const;
  LoadStateDictResult load_state_dict(const OrderedDict<Tensor>& state, bool strict = true);

  // ---- printing ----
  // The class name ("Linear"); the default is the demangled type name.
  virtual std::string name() const;
  // What goes between the parentheses ("in_features=4, out_features=3, bias=true").
  virtual std::string extra_repr() const;
  std::string str() const;

 protected:
  Module() = default;

  // clone() of a class built from its arguments: Self(args...) constructed
  // without initialization, then given this module's state.
  template <typename Self, typename... Args>
  std::shared_ptr<Module> clone_as(Args&&... args) const {
    std::shared_ptr<Self> copy;
    {
      init::SkipInitGuard skip;
      copy = std::make_shared<Self>(std::forward<Args>(args)...);
    }
    copy->copy_state_from(*this);
    return copy;
  }
  // Makes this module's parameters and buffers (recursively) fresh copies
  // of source's, which must have the same names, and copies the training
  // flags of the tree.
  void copy_state_from(const Module& source);
  // Removes the child `name` and returns it (PyTorch's del self.name); an
  // error when there is no such child.
  std::shared_ptr<Module> unregister_module(const std::string& name);
  // replace_parameter's hook, called after its checks and before the
  // registry changes: point the member that holds parameter `name` at
  // `parameter`. The default is an ember::Error naming the class (it has
  // no such member to update); nn's layers override it.
  virtual void parameter_replaced(const std::string& name, const Tensor& parameter);

 private:
  void add_child(std::string name, std::shared_ptr<Module> module);
  void check_new_name(const char* what, const std::string& name) const;
  void convert(std::optional<Device> device, std::optional<DType> dtype);

  OrderedDict<Tensor> parameters_;
  OrderedDict<Tensor> buffers_;
  OrderedDict<std::shared_ptr<Module>> children_;
  bool training_ = true;
};

std::ostream& operator<<(std::ostream& os, const Module& module);

// A module with one tensor in and one tensor out: what Sequential chains.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& input) = 0;
  Tensor operator()(const Tensor& input) { return forward(input); }
};

// m->clone() with m's static type; an error if m's dynamic class does not
// override clone() (the copy would then be of a base class).
template <typename M>
std::shared_ptr<M> clone(const std::shared_ptr<M>& module) {
  std::shared_ptr<Module> copy = module->clone();
  auto typed = std::dynamic_pointer_cast<M>(copy);
  const Module& copied = *copy;
  const Module& original = *module;
  EMBER_CHECK(typed && typeid(copied) == typeid(original),
              "nn::clone: cloning a " << module->name() << " gave a " << copy->name() << "; " << module->name()
                                      << " must override clone() (see nn/module.h)");
  return typed;
}

}  // namespace ember::nn
