// ModuleDict: modules under string keys in insertion order, as
// torch.nn.ModuleDict.
//
// Contract:
// - Each module is a child registered under its key, so state_dict() names
//   are "<key>.<param>" ("<dict>.<key>.<param>" inside a parent), exactly
//   as PyTorch's. Iteration, keys(), values() and items() follow insertion
//   order; insert() on an existing key replaces that module in place (its
//   position kept), as PyTorch's d[key] = module.
// - A key must be usable as a PyTorch attribute name: non-empty, without
//   '.', and not one of torch.nn.ModuleDict's own attributes ("keys",
//   "items", "training", "forward", ...), which PyTorch refuses with
//   "attribute '<key>' already exists". Each is an ember::Error naming the
//   key. A missing key in operator[], at() or pop() is an error listing the
//   keys present.
// - update() inserts (or replaces) each pair in order; pop() removes a key
//   and returns its module; clear() removes every module. clone() clones
//   each module. There is no forward: a parent's forward picks modules by
//   key.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ember/nn/module.h"

namespace ember::nn {

class ModuleDict : public Module {
 public:
  using Item = std::pair<std::string, std::shared_ptr<Module>>;

  ModuleDict() = default;
  // std::make_shared<ModuleDict>(std::vector<ModuleDict::Item>{{"conv", conv}, {"act", act}})
  explicit ModuleDict(std::vector<Item> modules);

  void insert(std::string key, std::shared_ptr<Module> module);
  void update(const std::vector<Item>& modules);
  void update(const ModuleDict& other);
  std::shared_ptr<Module> pop(const std::string& key);
  void clear();

  std::shared_ptr<Module> operator[](const std::string& key) const;
  // The module under key as its concrete class; an error if it is another class.
  template <typename M>
  std::shared_ptr<M> at(const std::string& key) const;
  bool contains(const std::string& key) const { return modules_.contains(key); }
  size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  std::vector<std::string> keys() const { return modules_.keys(); }
  std::vector<std::shared_ptr<Module>> values() const { return modules_.values(); }
  std::vector<Item> items() const;
  auto begin() const { return modules_.begin(); }  // Item{key, value}
  auto end() const { return modules_.end(); }

  std::shared_ptr<Module> clone() const override;
  void replace_module(const std::string& name, std::shared_ptr<Module> module) override;

 private:
  void check_key(const std::string& key) const;

  OrderedDict<std::shared_ptr<Module>> modules_;
};

template <typename M>
std::shared_ptr<M> ModuleDict::at(const std::string& key) const {
  std::shared_ptr<Module> m = (*this)[key];
  auto typed = std::dynamic_pointer_cast<M>(m);
  EMBER_CHECK(typed != nullptr,
              "ModuleDict::at: the module under '" << key << "' is a " << m->name() << ", not the requested class");
  return typed;
}

}  // namespace ember::nn
