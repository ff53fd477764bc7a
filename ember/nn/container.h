// Containers: Sequential (a chain of UnaryModules) and ModuleList (an
// indexable list of any modules).
//
// Both register their members as children named "0", "1", ... in order (or
// under a name given to push_back), so parameters are "0.weight",
// "2.bias", ...; both are nestable. Indexing takes a position (negative
// counts from the end); a bad one is an ember::Error naming the size.
// at<M>(i) returns the member as its concrete class, an error if it is
// another class. clone() clones each member. replace_module(name, m) swaps
// a member in place (Module::replace_module).
#pragma once

#include <memory>
#include <type_traits>
#include <vector>

#include "ember/nn/module.h"

namespace ember::nn {

// forward(x) runs x through every member in order; an empty Sequential is
// the identity. A Linear with a bias directly followed by a GELU and a
// Linear (all of exactly those classes: an MLP) runs as one
// linear_gelu_linear, and such a Linear and GELU followed by anything else
// as one linear_gelu (ember/core/ops.h): the same results and gradients,
// and on CUDA with GELU("tanh") one GEMM whose epilogue adds the bias and
// applies the GELU, and in the MLP's backward gelu' in the epilogue of the
// GEMM that produces its gradient. A ReLU directly followed by a MaxPool2d
// (exactly those classes: a CNN's block) runs as the pooling, then the ReLU
// over the pooled values, when every window of the pool holds an input
// element (in each dim no padding, or no dilation): the same values (a
// zero's sign may differ) and gradients, as ReLU is monotone and passes no
// gradient where its output is 0 (a window whose maximum is at most 0 gets
// a zero gradient either way), and the ReLU's two passes (forward and
// backward) go over a quarter of the elements for a 2x2 pool. A window of
// padding alone (padding and dilation together can make one) pools to -inf,
// which the ReLU would turn into 0: such pools run after the ReLU.
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  explicit Sequential(std::vector<std::shared_ptr<UnaryModule>> modules);
  // std::make_shared<Sequential>(std::make_shared<Linear>(4, 3), std::make_shared<ReLU>())
  template <typename... Ms>
  explicit Sequential(std::shared_ptr<Ms>... modules)
      : Sequential(std::vector<std::shared_ptr<UnaryModule>>{std::move(modules)...}) {
    static_assert((std::is_base_of_v<UnaryModule, Ms> && ...),
                  "Sequential chains UnaryModules (one tensor in, one tensor out)");
  }

  void push_back(std::shared_ptr<UnaryModule> module);
  void push_back(std::string name, std::shared_ptr<UnaryModule> module);
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  std::shared_ptr<UnaryModule> operator[](int64_t index) const;
  template <typename M>
  std::shared_ptr<M> at(int64_t index) const;
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

  Tensor forward(const Tensor& input) override;
  std::shared_ptr<Module> clone() const override;
  // The replacement must be a UnaryModule.
  void replace_module(const std::string& name, std::shared_ptr<Module> module) override;

 private:
  std::vector<std::shared_ptr<UnaryModule>> modules_;
};

// Holds modules for a parent's forward to use; has no forward itself.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  explicit ModuleList(std::vector<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> module);
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  std::shared_ptr<Module> operator[](int64_t index) const;
  template <typename M>
  std::shared_ptr<M> at(int64_t index) const;
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

  std::shared_ptr<Module> clone() const override;
  void replace_module(const std::string& name, std::shared_ptr<Module> module) override;

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};

namespace detail {
// The position index of a container of size n (negative from the end).
size_t container_position(const char* container, int64_t index, size_t n);
template <typename M, typename Base>
std::shared_ptr<M> container_cast(const char* container, int64_t index, const std::shared_ptr<Base>& m) {
  auto typed = std::dynamic_pointer_cast<M>(m);
  EMBER_CHECK(typed != nullptr,
              container << "::at: the member at " << index << " is a " << m->name() << ", not the requested class");
  return typed;
}
}  // namespace detail

template <typename M>
std::shared_ptr<M> Sequential::at(int64_t index) const {
  return detail::container_cast<M>("Sequential", index, (*this)[index]);
}

template <typename M>
std::shared_ptr<M> ModuleList::at(int64_t index) const {
  return detail::container_cast<M>("ModuleList", index, (*this)[index]);
}

}  // namespace ember::nn
