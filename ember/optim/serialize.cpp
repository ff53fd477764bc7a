// optim::save and optim::load (see ember/optim/serialize.h).
#include "ember/optim/serialize.h"

#include <charconv>
#include <set>

#include "ember/core/ops.h"
#include "ember/nn/json.h"
#include "ember/nn/safetensors.h"

namespace ember::optim {

namespace {

constexpr const char* kGroupsKey = "param_groups";
constexpr const char* kOptimizerKey = "optimizer";
constexpr const char* kStatePrefix = "state.";

// ember keeps these options as 0 or 1; PyTorch as booleans.
const std::set<std::string> kFlagOptions = {"amsgrad", "nesterov"};

std::string number_text(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

// One group as PyTorch's param_groups entry: ember's beta1/beta2 become
// "betas", its 0/1 flags booleans.
std::string group_json(const ParamGroupState& group) {
  std::string out = "{";
  auto member = [&](const std::string& key, const std::string& value) {
    out += (out.size() > 1 ? ", " : "") + json::quote(key) + ": " + value;
  };
  for (const auto& [name, value] : group.options) {
    if (name == "beta2") continue;
    if (name == "beta1")
      member("betas", "[" + number_text(value) + ", " + number_text(group.options.at("beta2")) + "]");
    else if (kFlagOptions.count(name)) member(name, value != 0 ? "true" : "false");
    else member(name, number_text(value));
  }
  std::string params = "[";
  for (size_t i = 0; i < group.params.size(); ++i) params += (i ? ", " : "") + std::to_string(group.params[i]);
  member("params", params + "]");
  return out + "}";
}

// Reads the file's param_groups and state back into a state dict for
// Optimizer::load_state_dict, which checks it against the optimizer.
class StateDictReader {
 public:
  StateDictReader(const Optimizer& optimizer, std::string path) : optimizer_(optimizer), path_(std::move(path)) {}

  OptimizerStateDict read(const SafetensorsContents& file) const {
    if (auto it = file.metadata.find(kOptimizerKey); it != file.metadata.end()) {
      check(it->second == optimizer_.name(), kOptimizerKey,
            "the file holds the state of " + it->second + ", not of " + optimizer_.name() + " (load it into an " +
                it->second + ", or start this optimizer afresh)");
    }
    auto groups = file.metadata.find(kGroupsKey);
    check(groups != file.metadata.end(), kGroupsKey,
          "there is no \"param_groups\" metadata: the file is not an optimizer state saved by optim::save (or "
          "by PyTorch with its param_groups as JSON metadata)");
    OptimizerStateDict sd;
    json::Value parsed;
    try {
      parsed = json::parse(groups->second);
    } catch (const json::ParseError& e) {
      fail(kGroupsKey, std::string("is not valid JSON: ") + e.what());
    }
    check(parsed.is_array(), kGroupsKey, "must be a JSON list of groups");
    for (size_t g = 0; g < parsed.array.size(); ++g) sd.param_groups.push_back(group(parsed.array[g], g));
    for (const auto& [key, t] : file.tensors) add_state(sd, key, t);
    for (auto& [index, named] : sd.state) {
      if (!named.count("step") && named.count("momentum_buffer")) named["step"] = full({}, 1, DType::Int64);
    }
    return sd;
  }

 private:
  ParamGroupState group(const json::Value& value, size_t g) const {
    const std::string where = std::string(kGroupsKey) + "[" + std::to_string(g) + "]";
    check(value.is_object(), where, "must be a JSON object of options");
    ParamGroupState out;
    bool has_params = false;
    for (const auto& [key, v] : value.object) {
      const std::string at = where + "." + key;
      if (key == "params") {
        check(v.is_array(), at, "must be a list of parameter indices");
        for (const auto& index : v.array) {
          const auto i = index.as_uint64();
          check(i.has_value(), at, "holds " + index.text + ", not a parameter index");
          out.params.push_back(int64_t(*i));
        }
        has_params = true;
      } else if (key == "betas") {
        check(v.is_array() && v.array.size() == 2, at, "must be a list of two numbers");
        out.options["beta1"] = number(v.array[0], at);
        out.options["beta2"] = number(v.array[1], at);
      } else if (key == "foreach" || key == "fused" || key == "capturable" || key == "initial_lr") {
        continue;  // no effect on ember's results (see the header)
      } else if (key == "maximize" || key == "differentiable") {
        check(!flag(v, at), at, "is true, but ember's " + optimizer_.name() + " has no " + key + " mode");
      } else if (key == "decoupled_weight_decay") {
        const bool decoupled = optimizer_.name() == "AdamW";
        check(flag(v, at) == decoupled, at,
              std::string("is ") + (decoupled ? "false" : "true") + ", but ember's " + optimizer_.name() +
                  (decoupled ? " decouples" : " does not decouple") + " weight decay (load it into " +
                  (decoupled ? "Adam" : "AdamW") + ")");
      } else if (kFlagOptions.count(key)) {
        out.options[key] = flag(v, at) ? 1.0 : 0.0;
      } else {
        check(optimizer_.defaults().count(key), at,
              "is not an option of ember's " + optimizer_.name() + " (its options: " + option_names() + ")");
        out.options[key] = number(v, at);
      }
    }
    check(has_params, where, "has no \"params\" list");
    return out;
  }

  void add_state(OptimizerStateDict& sd, const std::string& key, const Tensor& t) const {
    const std::string prefix = kStatePrefix;
    check(key.rfind(prefix, 0) == 0, key, "is not a state tensor (expected \"state.<index>.<name>\")");
    const size_t dot = key.find('.', prefix.size());
    check(dot != std::string::npos, key, "has no state name (expected \"state.<index>.<name>\")");
    int64_t index = -1;
    const char* begin = key.data() + prefix.size();
    const char* end = key.data() + dot;
    auto [stop, ec] = std::from_chars(begin, end, index);
    check(ec == std::errc() && stop == end && index >= 0, key, "has no parameter index after \"state.\"");
    sd.state[index][key.substr(dot + 1)] = t;
  }

  double number(const json::Value& v, const std::string& at) const {
    check(v.kind == json::Value::Kind::Number, at, std::string("must be a number, not ") + json::kind_name(v.kind));
    double out = 0;
    auto [stop, ec] = std::from_chars(v.text.data(), v.text.data() + v.text.size(), out);
    check(ec == std::errc() && stop == v.text.data() + v.text.size(), at, "holds " + v.text + ", not a double");
    return out;
  }

  bool flag(const json::Value& v, const std::string& at) const {
    check(v.kind == json::Value::Kind::Bool, at, std::string("must be true or false, not ") + json::kind_name(v.kind));
    return v.boolean;
  }

  std::string option_names() const {
    std::string out;
    for (const auto& [name, value] : optimizer_.defaults()) {
      if (name == "beta2") continue;
      out += (out.empty() ? "" : ", ") + (name == "beta1" ? std::string("betas") : name);
    }
    return out;
  }

  void check(bool ok, const std::string& key, const std::string& problem) const {
    if (!ok) fail(key, problem);
  }
  [[noreturn]] void fail(const std::string& key, const std::string& problem) const {
    EMBER_FAIL("optim::load(" << optimizer_.name() << "): " << path_ << ": \"" << key << "\" " << problem);
  }

  const Optimizer& optimizer_;
  std::string path_;
};

}  // namespace

void save(const Optimizer& optimizer, const std::string& path) {
  const OptimizerStateDict sd = optimizer.state_dict();
  std::map<std::string, Tensor> tensors;
  for (const auto& [index, named] : sd.state) {
    for (const auto& [name, t] : named) {
      const std::string key = kStatePrefix + std::to_string(index) + "." + name;
      tensors[key] = name == "step" ? t.to(DType::Float32) : t;
    }
  }
  std::string groups = "[";
  for (size_t g = 0; g < sd.param_groups.size(); ++g) groups += (g ? ", " : "") + group_json(sd.param_groups[g]);
  save_safetensors(path, tensors, {{kGroupsKey, groups + "]"}, {kOptimizerKey, optimizer.name()}});
}

void load(Optimizer& optimizer, const std::string& path) {
  const SafetensorsContents file = load_safetensors(path);
  const OptimizerStateDict sd = StateDictReader(optimizer, path).read(file);
  try {
    optimizer.load_state_dict(sd);
  } catch (const Error& e) {
    EMBER_FAIL("optim::load: " << path << ": " << e.what());
  }
}

}  // namespace ember::optim
