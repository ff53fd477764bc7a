// ModuleDict: keyed registration, PyTorch's key rules, update, pop and clone.
#include "ember/nn/module_dict.h"

#include <algorithm>
#include <iterator>
#include <string_view>

namespace ember::nn {
namespace {

// The attributes of a torch.nn.ModuleDict (dir() in PyTorch 1.13, dunder
// names aside, and the methods 2.x added): PyTorch refuses them as keys
// ("attribute 'keys' already exists"), so a dict that uses one could not
// be built there.
constexpr std::string_view kTorchAttributes[] = {
    "T_destination",
    "_apply",
    "_backward_hooks",
    "_buffers",
    "_call_impl",
    "_forward_hooks",
    "_forward_pre_hooks",
    "_get_backward_hooks",
    "_get_name",
    "_is_full_backward_hook",
    "_load_from_state_dict",
    "_load_state_dict_post_hooks",
    "_load_state_dict_pre_hooks",
    "_maybe_warn_non_full_backward_hook",
    "_modules",
    "_named_members",
    "_non_persistent_buffers_set",
    "_parameters",
    "_register_load_state_dict_pre_hook",
    "_register_state_dict_hook",
    "_replicate_for_data_parallel",
    "_save_to_state_dict",
    "_slow_forward",
    "_state_dict_hooks",
    "_version",
    "add_module",
    "apply",
    "bfloat16",
    "buffers",
    "children",
    "clear",
    "cpu",
    "cuda",
    "double",
    "dump_patches",
    "eval",
    "extra_repr",
    "float",
    "forward",
    "get_buffer",
    "get_extra_state",
    "get_parameter",
    "get_submodule",
    "half",
    "ipu",
    "items",
    "keys",
    "load_state_dict",
    "modules",
    "named_buffers",
    "named_children",
    "named_modules",
    "named_parameters",
    "parameters",
    "pop",
    "register_backward_hook",
    "register_buffer",
    "register_forward_hook",
    "register_forward_pre_hook",
    "register_full_backward_hook",
    "register_load_state_dict_post_hook",
    "register_module",
    "register_parameter",
    "requires_grad_",
    "set_extra_state",
    "share_memory",
    "state_dict",
    "to",
    "to_empty",
    "train",
    "training",
    "type",
    "update",
    "values",
    "xpu",
    "zero_grad",
    "compile",
    "mtia",
    "call_super_init",
    "register_state_dict_pre_hook",
    "register_full_backward_pre_hook",
    "register_load_state_dict_pre_hook",
};

std::string key_list(const std::vector<std::string>& keys) {
  std::string s;
  for (const std::string& k : keys) s += (s.empty() ? "'" : ", '") + k + "'";
  return s;
}

}  // namespace

ModuleDict::ModuleDict(std::vector<Item> modules) { update(modules); }

void ModuleDict::check_key(const std::string& key) const {
  EMBER_CHECK(!key.empty(), "ModuleDict: a key cannot be the empty string \"\" (PyTorch: module name can't be empty)");
  EMBER_CHECK(key.find('.') == std::string::npos,
              "ModuleDict: the key '" << key
                                      << "' contains '.', which separates the levels of state_dict names; "
                                         "pick a key without '.'");
  EMBER_CHECK(std::find(std::begin(kTorchAttributes), std::end(kTorchAttributes), key) == std::end(kTorchAttributes),
              "ModuleDict: the key '" << key
                                      << "' is an attribute of torch.nn.ModuleDict, which PyTorch refuses as a key "
                                         "(attribute '"
                                      << key << "' already exists); pick another key");
}

void ModuleDict::insert(std::string key, std::shared_ptr<Module> module) {
  check_key(key);
  EMBER_CHECK(module != nullptr, "ModuleDict::insert: the module for '" << key << "' is null");
  if (modules_.contains(key)) {
    replace_module(key, std::move(module));
    return;
  }
  register_module(key, module);
  modules_.insert(std::move(key), std::move(module));
}

void ModuleDict::update(const std::vector<Item>& modules) {
  for (const auto& [key, module] : modules) insert(key, module);
}

void ModuleDict::update(const ModuleDict& other) { update(other.items()); }

std::shared_ptr<Module> ModuleDict::pop(const std::string& key) {
  EMBER_CHECK(modules_.contains(key),
              "ModuleDict::pop: no key '" << key << "' (keys: " << key_list(modules_.keys()) << ")");
  unregister_module(key);
  return modules_.erase(key);
}

void ModuleDict::clear() {
  for (const std::string& key : modules_.keys()) unregister_module(key);
  modules_.clear();
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& key) const {
  const std::shared_ptr<Module>* m = modules_.find(key);
  EMBER_CHECK(m != nullptr, "ModuleDict: no key '" << key << "' (keys: " << key_list(modules_.keys()) << ")");
  return *m;
}

std::vector<ModuleDict::Item> ModuleDict::items() const {
  std::vector<Item> out;
  out.reserve(modules_.size());
  for (const auto& item : modules_) out.emplace_back(item.key, item.value);
  return out;
}

void ModuleDict::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  Module::replace_module(name, module);
  modules_.insert_or_assign(name, std::move(module));
}

std::shared_ptr<Module> ModuleDict::clone() const {
  auto copy = std::make_shared<ModuleDict>();
  for (const auto& item : modules_) copy->insert(item.key, nn::clone(item.value));
  copy->copy_state_from(*this);
  return copy;
}

}  // namespace ember::nn
