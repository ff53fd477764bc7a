// Sequential and ModuleList: registration by position, indexing, forward
// (with Linear, GELU, Linear run as one linear_gelu_linear, a Linear
// followed by a GELU otherwise as one linear_gelu, and a ReLU followed by a
// MaxPool2d as the pooling, then the ReLU) and clone.
#include "ember/nn/container.h"

#include <typeinfo>

#include "ember/core/ops.h"
#include "ember/nn/activation.h"
#include "ember/nn/linear.h"
#include "ember/nn/pooling.h"

namespace ember::nn {

size_t detail::container_position(const char* container, int64_t index, size_t n) {
  int64_t size = int64_t(n);
  EMBER_CHECK(index >= -size && index < size,
              container << ": index " << index << " is out of range for a " << container << " of size " << size);
  return size_t(index < 0 ? index + size : index);
}

// ---------------------------------------------------------------- Sequential

Sequential::Sequential(std::vector<std::shared_ptr<UnaryModule>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void Sequential::push_back(std::shared_ptr<UnaryModule> module) {
  push_back(std::to_string(modules_.size()), std::move(module));
}

void Sequential::push_back(std::string name, std::shared_ptr<UnaryModule> module) {
  modules_.push_back(register_module(std::move(name), std::move(module)));
}

std::shared_ptr<UnaryModule> Sequential::operator[](int64_t index) const {
  return modules_[detail::container_position("Sequential", index, modules_.size())];
}

namespace {

// m as an M when it is of exactly class M (a subclass may override
// forward), else null.
template <typename M>
const M* exactly(const UnaryModule& m) {
  return typeid(m) == typeid(M) ? static_cast<const M*>(&m) : nullptr;
}

// The members that Sequential runs as one op from modules[i]: a Linear with
// a bias and a GELU (linear_gelu), and the Linear after them if there is one
// (linear_gelu_linear), all of exactly those classes.
struct FusedRun {
  const Linear* first = nullptr;
  const GELU* gelu = nullptr;
  const Linear* second = nullptr;
};

FusedRun fused_run(const std::vector<std::shared_ptr<UnaryModule>>& modules, size_t i) {
  if (i + 1 >= modules.size()) return {};
  const Linear* first = exactly<Linear>(*modules[i]);
  const GELU* gelu = exactly<GELU>(*modules[i + 1]);
  if (first == nullptr || gelu == nullptr || !first->bias.defined()) return {};
  return {first, gelu, i + 2 < modules.size() ? exactly<Linear>(*modules[i + 2]) : nullptr};
}

// Whether modules[i] is a ReLU and modules[i + 1] a MaxPool2d, both of
// exactly those classes, whose every window holds an input element: in each
// dim no padding or no dilation (a window of padding alone pools to -inf,
// which the ReLU after the pool would turn into 0).
bool relu_then_max_pool(const std::vector<std::shared_ptr<UnaryModule>>& modules, size_t i) {
  if (i + 1 >= modules.size() || exactly<ReLU>(*modules[i]) == nullptr) return false;
  const MaxPool2d* pool = exactly<MaxPool2d>(*modules[i + 1]);
  return pool != nullptr && (pool->padding.h == 0 || pool->dilation.h == 1) &&
         (pool->padding.w == 0 || pool->dilation.w == 1);
}

}  // namespace

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (size_t i = 0; i < modules_.size(); ++i) {
    const FusedRun run = fused_run(modules_, i);
    if (run.second != nullptr) {
      x = linear_gelu_linear(x, run.first->weight, run.first->bias, run.second->weight, run.second->bias,
                             run.gelu->approximate);
      i += 2;
    } else if (run.first != nullptr) {
      x = linear_gelu(x, run.first->weight, run.first->bias, run.gelu->approximate);
      i += 1;
    } else if (relu_then_max_pool(modules_, i)) {
      x = relu(modules_[i + 1]->forward(x));
      i += 1;
    } else {
      x = modules_[i]->forward(x);
    }
  }
  return x;
}

std::shared_ptr<Module> Sequential::clone() const {
  auto copy = std::make_shared<Sequential>();
  auto names = named_children().keys();
  for (size_t i = 0; i < modules_.size(); ++i) {
    copy->push_back(names[i], nn::clone(modules_[i]));
  }
  copy->copy_state_from(*this);
  return copy;
}

void Sequential::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  auto unary = std::dynamic_pointer_cast<UnaryModule>(module);
  EMBER_CHECK(module == nullptr || unary != nullptr, "Sequential::replace_module: '"
                                                         << name << "' would become a " << module->name()
                                                         << ", which is not a UnaryModule (one tensor in, one out)");
  const std::vector<std::string> names = named_children().keys();
  Module::replace_module(name, module);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) modules_[i] = unary;
  }
}

// ---------------------------------------------------------------- ModuleList

ModuleList::ModuleList(std::vector<std::shared_ptr<Module>> modules) {
  for (auto& m : modules) push_back(std::move(m));
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  modules_.push_back(register_module(std::to_string(modules_.size()), std::move(module)));
}

std::shared_ptr<Module> ModuleList::operator[](int64_t index) const {
  return modules_[detail::container_position("ModuleList", index, modules_.size())];
}

void ModuleList::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  const std::vector<std::string> names = named_children().keys();
  Module::replace_module(name, module);
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) modules_[i] = module;
  }
}

std::shared_ptr<Module> ModuleList::clone() const {
  auto copy = std::make_shared<ModuleList>();
  for (const auto& m : modules_) copy->push_back(nn::clone(m));
  copy->copy_state_from(*this);
  return copy;
}

}  // namespace ember::nn
