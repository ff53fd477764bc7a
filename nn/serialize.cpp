// nn::save and nn::load (see nn/serialize.h).
#include "nn/serialize.h"

#include <sstream>
#include <vector>

#include "nn/safetensors.h"

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

}  // namespace

void save(const Module& module, const std::string& path, const std::map<std::string, std::string>& metadata) {
  std::map<std::string, Tensor> tensors;
  for (const auto& item : module.state_dict()) tensors.emplace(item.key, item.value);
  save_safetensors(path, tensors, metadata);
}

LoadStateDictResult load(Module& module, const std::string& path, bool strict) {
  SafetensorsContents file = load_safetensors(path);
  const OrderedDict<Tensor> own = module.state_dict();
  LoadStateDictResult result;
  std::vector<std::string> problems;
  for (const auto& item : own) {
    auto it = file.tensors.find(item.key);
    if (it == file.tensors.end()) {
      result.missing_keys.push_back(item.key);
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
