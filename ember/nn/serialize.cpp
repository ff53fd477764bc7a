// nn::save and nn::load (see ember/nn/serialize.h).
#include "ember/nn/serialize.h"

#include <algorithm>
#include <sstream>
#include <tuple>
#include <vector>

#include "ember/core/ops.h"
#include "ember/nn/safetensors.h"

namespace ember::nn {

namespace {

std::string quoted(const std::vector<std::string>& keys) {
  std::string out;
  for (const std::string& k : keys) out += (out.empty() ? "\"" : ", \"") + k + "\"";
  return out;
}

// The problem with loading `found` into `slot`, or "".
std::string mismatch(const std::string& key, const Tensor& slot, const Tensor& found) {
  std::ostringstream msg;
  if (found.shape() != slot.shape()) {
    msg << "key \"" << key << "\": expected shape " << shape_str(slot.shape()) << ", found "
        << shape_str(found.shape());
  } else if (is_floating(found.dtype()) != is_floating(slot.dtype()) ||
             (!is_floating(slot.dtype()) && found.dtype() != slot.dtype())) {
    msg << "key \"" << key << "\": expected dtype " << dtype_name(slot.dtype())
        << (is_floating(slot.dtype()) ? " (or another floating dtype)" : "") << ", found " << dtype_name(found.dtype())
        << " (" << safetensors_dtype_name(found.dtype()) << ")";
  }
  return msg.str();
}

// The groups of state dict names that are one tensor (weight tying): the
// same storage, offset, shape, strides and dtype. Each group's names are in
// byte order; names of untied tensors are in no group.
std::vector<std::vector<std::string>> tied_groups(const OrderedDict<Tensor>& state) {
  std::map<std::tuple<const Storage*, int64_t, Shape, Shape, DType>, std::vector<std::string>> by_tensor;
  for (const auto& item : state) {
    const Tensor& t = item.value;
    by_tensor[{t.storage().get(), t.storage_offset(), t.shape(), t.strides(), t.dtype()}].push_back(item.key);
  }
  std::vector<std::vector<std::string>> groups;
  for (auto& [tensor, names] : by_tensor) {
    if (names.size() < 2) continue;
    std::sort(names.begin(), names.end());
    groups.push_back(std::move(names));
  }
  return groups;
}

}  // namespace

void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  const OrderedDict<Tensor> state = module.state_dict();
  std::map<std::string, Tensor> tensors;
  for (const auto& item : state) tensors.emplace(item.key, item.value);
  std::map<std::string, std::string> meta = metadata;
  for (const std::vector<std::string>& names : tied_groups(state)) {
    for (size_t i = 1; i < names.size(); ++i) {
      tensors.erase(names[i]);
      meta.emplace(names[i], names[0]);  // as safetensors.torch.save_model; the caller's entry wins
    }
  }
  save_safetensors(path, tensors, meta);
}

LoadStateDictResult load(Module& module, const std::string& path, bool strict) {
  SafetensorsContents file = load_safetensors(path);
  const OrderedDict<Tensor> own = module.state_dict();
  LoadStateDictResult result;
  std::vector<std::string> problems;
  // A tied name the file lacks is loaded through another name of its group.
  std::map<std::string, std::string> loaded_through;
  for (const std::vector<std::string>& names : tied_groups(own)) {
    std::vector<std::string> present;
    for (const std::string& n : names) {
      if (file.tensors.count(n)) present.push_back(n);
    }
    if (present.empty()) continue;
    for (const std::string& n : names) {
      if (!file.tensors.count(n)) loaded_through.emplace(n, present[0]);
    }
    for (size_t i = 1; i < present.size(); ++i) {
      const Tensor& a = file.tensors.at(present[0]);
      const Tensor& b = file.tensors.at(present[i]);
      if (a.shape() == b.shape() && !equal(a, b.to(a.dtype()))) {
        problems.push_back("keys \"" + present[0] + "\" and \"" + present[i] + "\" hold different values, but " +
                           module.name() + " ties them to one tensor; keep one of them in the file");
      }
    }
  }
  for (const auto& item : own) {
    auto it = file.tensors.find(item.key);
    if (it == file.tensors.end()) {
      if (!loaded_through.count(item.key)) result.missing_keys.push_back(item.key);
      continue;
    }
    const std::string problem = mismatch(item.key, item.value, it->second);
    if (!problem.empty()) problems.push_back(problem);
  }
  for (const auto& [key, t] : file.tensors) {
    if (!own.contains(key)) result.unexpected_keys.push_back(key);
  }
  if (strict && !result.missing_keys.empty()) {
    problems.push_back("missing keys (in the " + module.name() + ", not in the file): " + quoted(result.missing_keys));
  }
  if (strict && !result.unexpected_keys.empty()) {
    problems.push_back("unexpected keys (in the file, not in the " + module.name() +
                       "): " + quoted(result.unexpected_keys));
  }
  if (!problems.empty()) {
    std::ostringstream msg;
    msg << "nn::load: " << path << ": cannot load into " << module.name() << ":";
    for (const std::string& p : problems) msg << "\n  " << p;
    EMBER_FAIL(msg.str());
  }
  OrderedDict<Tensor> state;
  for (auto& [key, t] : file.tensors) {
    if (own.contains(key)) state.insert(key, std::move(t));
  }
  module.load_state_dict(state, /*strict=*/false);
  return result;
}

}  // namespace ember::nn
