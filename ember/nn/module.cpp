// nn::Module: registration, tree walks, to(), state dicts, clone support
// and printing. The contract is in ember/nn/module.h.
#include "ember/nn/module.h"

#include <cxxabi.h>

#include <cstdlib>
#include <ostream>
#include <sstream>
#include <unordered_set>

#include "ember/core/autograd/node.h"
#include "ember/core/grad_mode.h"
#include "ember/core/memory_format.h"
#include "ember/core/ops/op_utils.h"

namespace ember::nn {
namespace {

// Points t's TensorImpl at value's data (PyTorch's param.data = value):
// every handle to t (the layer's member, the registry entry, a tied entry
// of another module, an optimizer's list) sees the new data, device and
// dtype. t keeps its autograd identity (leaf, requires_grad, hooks); a
// grad it has is converted alongside.
void replace_data(Tensor t, const Tensor& value) {
  Tensor grad = t.grad();
  ember::detail::point_at(t, value);
  if (grad.defined()) {
    NoGradGuard no_grad;
    Tensor g = grad.detach().to(t.device(), t.dtype());
    t.set_grad(same_layout(g.sizes(), g.strides(), t.strides()) ? g : copy_like(g, t));
  }
}

using ember::detail::describe;

using Seen = std::unordered_set<const void*>;

bool seen_before(Seen& seen, const void* p) { return !seen.insert(p).second; }

std::string quoted_list(const std::vector<std::string>& keys) {
  std::string s;
  for (size_t i = 0; i < keys.size(); ++i) s += (i ? ", \"" : "\"") + keys[i] + "\"";
  return s;
}

// PyTorch's _addindent: indents every line but the first.
std::string indent_after_first_line(const std::string& s, int spaces) {
  std::string out;
  for (char c : s) {
    out += c;
    if (c == '\n') out.append(size_t(spaces), ' ');
  }
  return out;
}

// Pre-order walk over (prefix, module); with dedupe a module reachable
// twice is visited once.
void walk(const std::string& prefix, const Module& m, bool dedupe, Seen& seen,
          const std::function<void(const std::string&, const Module&)>& fn) {
  if (dedupe && seen_before(seen, &m)) return;
  fn(prefix, m);
  for (const auto& item : m.named_children()) {
    walk(prefix + item.key + ".", *item.value, dedupe, seen, fn);
  }
}

// Every parameter and buffer under its dotted name, as handles (not
// detached): a module's parameters, its buffers, then its children's.
OrderedDict<Tensor> state_entries(const Module& root) {
  OrderedDict<Tensor> out;
  Seen seen;
  walk("", root, false, seen, [&](const std::string& prefix, const Module& m) {
    for (const auto& p : m.named_parameters(false)) out.insert(prefix + p.key, p.value);
    for (const auto& b : m.named_buffers(false)) out.insert(prefix + b.key, b.value);
  });
  return out;
}

// Copies the training flags of src's tree into dst's, whose children must
// have the same names.
void copy_training_flags(Module& dst, const Module& src, const std::string& path) {
  std::vector<std::string> dk = dst.named_children().keys(), sk = src.named_children().keys();
  EMBER_CHECK(dk == sk, "clone: the copy of " << src.name() << (path.empty() ? "" : " at '" + path + "'")
                                              << " has children [" << quoted_list(dk) << "] but the original has ["
                                              << quoted_list(sk)
                                              << "]; a clone() that constructs a fresh module must rebuild the "
                                                 "same tree (containers clone each child)");
  dst.train(src.is_training());
  auto dc = dst.named_children();
  auto sc = src.named_children();
  for (const auto& item : dc) copy_training_flags(*item.value, *sc.at(item.key), path + item.key + ".");
}

}  // namespace

// ---------------------------------------------------------------- registration

void Module::check_new_name(const char* what, const std::string& name) const {
  EMBER_CHECK(!name.empty(), "register_" << what << ": " << this->name() << " got an empty name");
  EMBER_CHECK(name.find('.') == std::string::npos,
              "register_" << what << ": the name '" << name << "' of " << this->name()
                          << " contains '.', which separates the levels of dotted names; pick another name");
  const char* taken = parameters_.contains(name) ? "parameter"
                      : buffers_.contains(name)  ? "buffer"
                      : children_.contains(name) ? "child module"
                                                 : nullptr;
  EMBER_CHECK(taken == nullptr,
              "register_" << what << ": " << this->name() << " already has a " << taken << " named '" << name << "'");
}

Tensor Module::register_parameter(std::string name, Tensor tensor, bool requires_grad) {
  check_new_name("parameter", name);
  EMBER_CHECK(tensor.defined(), "register_parameter: the parameter '" << name << "' of " << this->name()
                                                                      << " is undefined; register only tensors");
  EMBER_CHECK(tensor.is_leaf(), "register_parameter: the parameter '"
                                    << name << "' of " << this->name() << " is not a leaf (it was made by "
                                    << tensor.grad_fn()->name() << "); register tensor.detach() instead");
  EMBER_CHECK(!requires_grad || is_floating(tensor.dtype()),
              "register_parameter: the parameter '" << name << "' of " << this->name() << " is " << describe(tensor)
                                                    << "; only floating tensors can require grad (register it "
                                                       "with requires_grad=false, or as a buffer)");
  tensor.set_requires_grad(requires_grad);
  parameters_.insert(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(std::string name, Tensor tensor) {
  check_new_name("buffer", name);
  EMBER_CHECK(tensor.defined(), "register_buffer: the buffer '" << name << "' of " << this->name()
                                                                << " is undefined; register only tensors");
  buffers_.insert(name, tensor);
  return tensor;
}

void Module::add_child(std::string name, std::shared_ptr<Module> module) {
  check_new_name("module", name);
  EMBER_CHECK(module != nullptr, "register_module: the module '" << name << "' of " << this->name() << " is null");
  Seen seen;
  bool cycle = false;
  walk("", *module, true, seen, [&](const std::string&, const Module& m) { cycle = cycle || &m == this; });
  EMBER_CHECK(!cycle, "register_module: registering '" << name << "' (a " << module->name() << ") in " << this->name()
                                                       << " would make the module tree a cycle (it contains "
                                                          "this module)");
  children_.insert(std::move(name), std::move(module));
}

void Module::replace_module(const std::string& name, std::shared_ptr<Module> module) {
  EMBER_CHECK(children_.contains(name), "replace_module: " << this->name() << " has no child module named '" << name
                                                           << "' (children: " << quoted_list(children_.keys()) << ")");
  EMBER_CHECK(module != nullptr, "replace_module: the module for '" << name << "' of " << this->name() << " is null");
  Seen seen;
  bool cycle = false;
  walk("", *module, true, seen, [&](const std::string&, const Module& m) { cycle = cycle || &m == this; });
  EMBER_CHECK(!cycle, "replace_module: putting a " << module->name() << " at '" << name << "' of " << this->name()
                                                   << " would make the module tree a cycle (it contains this module)");
  children_.insert_or_assign(name, std::move(module));
}

void Module::replace_parameter(const std::string& name, Tensor parameter) {
  const Tensor* old = parameters_.find(name);
  EMBER_CHECK(old != nullptr, "replace_parameter: " << this->name() << " has no parameter named '" << name
                                                    << "' (parameters: " << quoted_list(parameters_.keys()) << ")");
  EMBER_CHECK(parameter.defined(),
              "replace_parameter: the parameter for '" << name << "' of " << this->name() << " is undefined");
  EMBER_CHECK(parameter.is_leaf(), "replace_parameter: the parameter for '"
                                       << name << "' of " << this->name() << " is not a leaf (it was made by "
                                       << parameter.grad_fn()->name()
                                       << "); pass another module's parameter itself, as head.weight = emb.weight");
  EMBER_CHECK(
      parameter.shape() == old->shape() && parameter.dtype() == old->dtype() && parameter.device() == old->device(),
      "replace_parameter: the parameter '" << name << "' of " << this->name() << " is " << describe(*old)
                                           << ", the one to put in its place is " << describe(parameter)
                                           << "; tie tensors of one shape, dtype and device (a linear head "
                                              "of Linear(dim, vocab) ties to Embedding(vocab, dim).weight)");
  parameter_replaced(name, parameter);
  parameters_.insert_or_assign(name, std::move(parameter));
}

void Module::parameter_replaced(const std::string& name, const Tensor&) {
  EMBER_FAIL("replace_parameter: " << this->name() << " does not say which member holds its parameter '" << name
                                   << "', so its forward would keep using the old tensor; override "
                                      "Module::parameter_replaced in "
                                   << this->name() << " to point that member at the new one");
}

std::shared_ptr<Module> Module::unregister_module(const std::string& name) {
  EMBER_CHECK(children_.contains(name), "unregister_module: " << this->name() << " has no child module named '" << name
                                                              << "' (children: " << quoted_list(children_.keys())
                                                              << ")");
  return children_.erase(name);
}

// ---------------------------------------------------------------- the tree

OrderedDict<Tensor> Module::named_parameters(bool recurse) const {
  if (!recurse) return parameters_;
  OrderedDict<Tensor> out;
  Seen seen_modules, seen_tensors;
  walk("", *this, true, seen_modules, [&](const std::string& prefix, const Module& m) {
    for (const auto& p : m.parameters_) {
      if (!seen_before(seen_tensors, p.value.impl())) out.insert(prefix + p.key, p.value);
    }
  });
  return out;
}

OrderedDict<Tensor> Module::named_buffers(bool recurse) const {
  if (!recurse) return buffers_;
  OrderedDict<Tensor> out;
  Seen seen_modules, seen_tensors;
  walk("", *this, true, seen_modules, [&](const std::string& prefix, const Module& m) {
    for (const auto& b : m.buffers_) {
      if (!seen_before(seen_tensors, b.value.impl())) out.insert(prefix + b.key, b.value);
    }
  });
  return out;
}

TensorList Module::parameters(bool recurse) const { return named_parameters(recurse).values(); }
TensorList Module::buffers(bool recurse) const { return named_buffers(recurse).values(); }
OrderedDict<std::shared_ptr<Module>> Module::named_children() const { return children_; }
std::vector<std::shared_ptr<Module>> Module::children() const { return children_.values(); }

OrderedDict<std::shared_ptr<Module>> Module::named_modules() {
  std::shared_ptr<Module> self = weak_from_this().lock();
  EMBER_CHECK(self != nullptr, "named_modules: this " << name()
                                                      << " is not owned by a std::shared_ptr; create modules "
                                                         "with std::make_shared");
  OrderedDict<std::shared_ptr<Module>> out;
  Seen seen;
  std::function<void(const std::string&, const std::shared_ptr<Module>&)> visit =
      [&](const std::string& name, const std::shared_ptr<Module>& m) {
        if (seen_before(seen, m.get())) return;
        out.insert(name, m);
        for (const auto& c : m->children_) visit(name.empty() ? c.key : name + "." + c.key, c.value);
      };
  visit("", self);
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules() { return named_modules().values(); }

void Module::apply(const std::function<void(Module&)>& fn) {
  for (const auto& c : children_) c.value->apply(fn);
  fn(*this);
}

void Module::train(bool on) {
  training_ = on;
  for (const auto& c : children_) c.value->train(on);
}

// ---------------------------------------------------------------- device and dtype

void Module::convert(std::optional<Device> device, std::optional<DType> dtype) {
  auto one = [&](const Tensor& t) {
    DType target_dtype = dtype && is_floating(t.dtype()) ? *dtype : t.dtype();
    Device target_device = device.value_or(t.device());
    if (target_dtype == t.dtype() && target_device == t.device()) return;
    Tensor converted;
    {
      NoGradGuard no_grad;
      converted = t.detach().to(target_device, target_dtype);
    }
    replace_data(t, converted);
  };
  for (const Tensor& p : parameters()) one(p);
  for (const Tensor& b : buffers()) one(b);
}

void Module::to(Device device) { convert(device, std::nullopt); }

void Module::to(DType dtype) {
  EMBER_CHECK(is_floating(dtype), "Module::to: " << name() << ".to(" << dtype_name(dtype)
                                                 << ") needs a floating dtype (float32, float64, float16, bfloat16)");
  convert(std::nullopt, dtype);
}

void Module::to(Device device, DType dtype) {
  EMBER_CHECK(is_floating(dtype), "Module::to: " << name() << ".to(" << device << ", " << dtype_name(dtype)
                                                 << ") needs a floating dtype (float32, float64, float16, bfloat16)");
  convert(device, dtype);
}

void Module::to(MemoryFormat format) {
  EMBER_CHECK(
      format != MemoryFormat::Preserve,
      "Module::to: " << name() << ".to(memory format preserve) names no layout; use contiguous or channels_last");
  auto one = [&](const Tensor& t) {
    if (t.dim() != 4 || t.suggest_memory_format() == format) return;
    Tensor converted;
    {
      NoGradGuard no_grad;
      converted = t.detach().to(format);
    }
    replace_data(t, converted);
  };
  for (const Tensor& p : parameters()) one(p);
  for (const Tensor& b : buffers()) one(b);
}

void Module::zero_grad(bool set_to_none) {
  for (Tensor p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      Tensor flat = g.detach();
      flat.zero_();
      p.set_grad(flat);
    }
  }
}

// ---------------------------------------------------------------- state

OrderedDict<Tensor> Module::state_dict() const {
  OrderedDict<Tensor> out;
  for (const auto& item : state_entries(*this)) out.insert(item.key, item.value.detach());
  return out;
}

LoadStateDictResult Module::load_state_dict(const OrderedDict<Tensor>& state, bool strict) {
  OrderedDict<Tensor> own = state_entries(*this);
  LoadStateDictResult result;
  for (const auto& item : own) {
    if (!state.contains(item.key)) result.missing_keys.push_back(item.key);
  }
  for (const auto& item : state) {
    if (!own.contains(item.key)) result.unexpected_keys.push_back(item.key);
  }
  std::vector<std::string> problems;
  if (strict && !result.missing_keys.empty()) {
    problems.push_back("missing keys (in the module, not in the state dict): " + quoted_list(result.missing_keys));
  }
  if (strict && !result.unexpected_keys.empty()) {
    problems.push_back("unexpected keys (in the state dict, not in the module): " +
                       quoted_list(result.unexpected_keys));
  }
  for (const auto& item : own) {
    const Tensor* value = state.find(item.key);
    if (value == nullptr) continue;
    const Tensor& slot = item.value;
    std::ostringstream msg;
    if (!value->defined()) {
      msg << "the value for " << item.key << " is undefined";
    } else if (value->shape() != slot.shape()) {
      msg << "size mismatch for " << item.key << ": copying a tensor of shape " << shape_str(value->shape())
          << " from the state dict, the shape in the current module is " << shape_str(slot.shape());
    } else if (is_floating(value->dtype()) != is_floating(slot.dtype()) ||
               (!is_floating(slot.dtype()) && value->dtype() != slot.dtype())) {
      msg << "dtype mismatch for " << item.key << ": the state dict has " << dtype_name(value->dtype())
          << ", the current module " << dtype_name(slot.dtype())
          << " (only floating values convert, to a floating entry)";
    }
    if (!msg.str().empty()) problems.push_back(msg.str());
  }
  if (!problems.empty()) {
    std::ostringstream msg;
    msg << "load_state_dict: error(s) in loading the state dict of " << name() << ":";
    for (const std::string& p : problems) msg << "\n  " << p;
    EMBER_FAIL(msg.str());
  }
  NoGradGuard no_grad;
  for (const auto& item : own) {
    const Tensor* value = state.find(item.key);
    if (value == nullptr) continue;
    Tensor slot = item.value;
    slot.copy_(*value);
  }
  return result;
}

void Module::copy_state_from(const Module& source) {
  OrderedDict<Tensor> mine = state_entries(*this), theirs = state_entries(source);
  EMBER_CHECK(mine.keys() == theirs.keys(),
              "clone: the copy of " << source.name() << " has parameters and buffers [" << quoted_list(mine.keys())
                                    << "] but the original has [" << quoted_list(theirs.keys())
                                    << "]; a clone() that constructs a fresh module must rebuild the same tree "
                                       "(containers clone each child)");
  for (const auto& item : mine) {
    const Tensor& src = theirs.at(item.key);
    Tensor fresh;
    {
      NoGradGuard no_grad;
      fresh = src.detach().clone();
    }
    Tensor dst = item.value;
    replace_data(dst, fresh);
    dst.set_grad(Tensor());
    dst.set_requires_grad(src.requires_grad());
  }
  copy_training_flags(*this, source, "");
}

// ---------------------------------------------------------------- printing

std::string Module::name() const {
  const char* mangled = typeid(*this).name();
  int status = 0;
  char* demangled = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string full = status == 0 && demangled ? demangled : mangled;
  std::free(demangled);
  // Drop the namespaces: "ember::nn::Linear" -> "Linear".
  size_t end = full.find('<');
  size_t cut = full.rfind("::", end);
  return cut == std::string::npos ? full : full.substr(cut + 2);
}

std::string Module::extra_repr() const {
  std::string s;
  auto add = [&](const OrderedDict<Tensor>& tensors) {
    for (const auto& t : tensors) s += (s.empty() ? "" : ", ") + t.key + "=" + shape_str(t.value.shape());
  };
  add(parameters_);
  add(buffers_);
  return s;
}

std::string Module::str() const {
  std::vector<std::string> extra_lines, child_lines;
  std::string extra = extra_repr();
  if (!extra.empty()) {
    std::istringstream in(extra);
    for (std::string line; std::getline(in, line);) extra_lines.push_back(line);
  }
  for (const auto& c : children_) {
    child_lines.push_back("(" + c.key + "): " + indent_after_first_line(c.value->str(), 2));
  }
  std::string out = name() + "(";
  if (extra_lines.size() == 1 && child_lines.empty()) {
    out += extra_lines[0];
  } else if (!extra_lines.empty() || !child_lines.empty()) {
    for (const auto* lines : {&extra_lines, &child_lines}) {
      for (const std::string& l : *lines) out += "\n  " + l;
    }
    out += "\n";
  }
  return out + ")";
}

std::ostream& operator<<(std::ostream& os, const Module& module) { return os << module.str(); }

}  // namespace ember::nn
