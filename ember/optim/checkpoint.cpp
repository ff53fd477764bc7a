// Training checkpoints (see ember/optim/checkpoint.h).
#include "ember/optim/checkpoint.h"

#include <charconv>
#include <cstring>

#include "ember/nn/safetensors.h"

namespace ember {

namespace {

constexpr const char* kVersionKey = "ember.checkpoint";
constexpr const char* kVersion = "1";

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

std::string format_double(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, end);
}

template <typename T>
std::string join(const std::vector<T>& values) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += ",";
    if constexpr (std::is_same_v<T, double>) out += format_double(values[i]);
    else out += std::to_string(values[i]);
  }
  return out;
}

class CheckpointReader {
 public:
  explicit CheckpointReader(const std::string& path) : path_(path) {}

  template <typename T>
  T number(const std::string& key, std::string_view text) const {
    T v{};
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    EMBER_CHECK(ec == std::errc() && end == text.data() + text.size() && !text.empty(),
                "load_checkpoint: " << path_ << ": \"" << key << "\" holds \"" << text << "\", not a number");
    return v;
  }

  template <typename T>
  std::vector<T> list(const std::string& key, const std::string& text) const {
    std::vector<T> out;
    if (text.empty()) return out;
    size_t start = 0;
    while (true) {
      const size_t comma = text.find(',', start);
      out.push_back(number<T>(key, std::string_view(text).substr(start, comma - start)));
      if (comma == std::string::npos) return out;
      start = comma + 1;
    }
  }

  [[noreturn]] void unknown(const char* what, const std::string& key) const {
    EMBER_FAIL("load_checkpoint: " << path_ << ": unknown " << what << " \"" << key
                                   << "\" (not written by save_checkpoint)");
  }

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace

void save_checkpoint(const std::string& path, const Checkpoint& c) {
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> meta;
  meta[kVersionKey] = kVersion;
  for (const auto& [name, t] : c.model) tensors["model." + name] = t;
  for (const auto& [index, named] : c.optimizer.state) {
    for (const auto& [name, t] : named) tensors["optim.state." + std::to_string(index) + "." + name] = t;
  }
  meta["optim.groups"] = std::to_string(c.optimizer.param_groups.size());
  for (size_t g = 0; g < c.optimizer.param_groups.size(); ++g) {
    const optim::ParamGroupState& group = c.optimizer.param_groups[g];
    const std::string prefix = "optim.group." + std::to_string(g) + ".";
    for (const auto& [key, value] : group.options) {
      EMBER_CHECK(key != "params", "save_checkpoint: " << path << ": a group option may not be named \"params\"");
      meta[prefix + key] = format_double(value);
    }
    meta[prefix + "params"] = join(group.params);
  }
  if (c.scheduler) {
    meta["sched.last_epoch"] = std::to_string(c.scheduler->last_epoch);
    meta["sched.base_lrs"] = join(c.scheduler->base_lrs);
    meta["sched.last_lrs"] = join(c.scheduler->last_lrs);
  }
  for (const auto& [name, value] : c.counters) meta["counter." + name] = std::to_string(value);
  for (const auto& [key, value] : c.metadata) meta["user." + key] = value;
  save_safetensors(path, tensors, meta);
}

Checkpoint load_checkpoint(const std::string& path) {
  SafetensorsContents file = load_safetensors(path);
  CheckpointReader r(path);
  auto version = file.metadata.find(kVersionKey);
  EMBER_CHECK(version != file.metadata.end(), "load_checkpoint: " << path << ": not an ember checkpoint (no \""
                                                                  << kVersionKey << "\" metadata); "
                                                                  << "read plain files with load_safetensors");
  EMBER_CHECK(version->second == kVersion, "load_checkpoint: " << path << ": checkpoint layout version \""
                                                               << version->second << "\" is not supported (this "
                                                               << "ember reads version " << kVersion << ")");
  Checkpoint c;
  for (auto& [name, t] : file.tensors) {
    if (starts_with(name, "model.")) {
      c.model[name.substr(6)] = t;
      continue;
    }
    if (!starts_with(name, "optim.state.")) r.unknown("tensor", name);
    const std::string rest = name.substr(12);
    const size_t dot = rest.find('.');
    if (dot == std::string::npos || dot + 1 == rest.size()) r.unknown("tensor", name);
    const int64_t index = r.number<int64_t>(name, std::string_view(rest).substr(0, dot));
    EMBER_CHECK(index >= 0, "load_checkpoint: " << path << ": \"" << name << "\" has a negative parameter index");
    c.optimizer.state[index][rest.substr(dot + 1)] = t;
  }
  auto groups = file.metadata.find("optim.groups");
  EMBER_CHECK(groups != file.metadata.end(), "load_checkpoint: " << path << ": no \"optim.groups\" metadata");
  const int64_t group_count = r.number<int64_t>("optim.groups", groups->second);
  EMBER_CHECK(group_count >= 0 && uint64_t(group_count) <= file.metadata.size(),
              "load_checkpoint: " << path << ": \"optim.groups\" is " << group_count);
  c.optimizer.param_groups.resize(size_t(group_count));
  std::vector<bool> has_params(size_t(group_count), false);
  std::map<std::string, std::string> sched;
  for (const auto& [key, value] : file.metadata) {
    if (key == kVersionKey || key == "optim.groups") continue;
    if (starts_with(key, "optim.group.")) {
      const std::string rest = key.substr(12);
      const size_t dot = rest.find('.');
      if (dot == std::string::npos || dot + 1 == rest.size()) r.unknown("metadata", key);
      const int64_t g = r.number<int64_t>(key, std::string_view(rest).substr(0, dot));
      EMBER_CHECK(g >= 0 && g < group_count, "load_checkpoint: " << path << ": \"" << key << "\" names group " << g
                                                                 << " but the checkpoint has " << group_count);
      const std::string option = rest.substr(dot + 1);
      if (option == "params") {
        c.optimizer.param_groups[size_t(g)].params = r.list<int64_t>(key, value);
        has_params[size_t(g)] = true;
      } else {
        c.optimizer.param_groups[size_t(g)].options[option] = r.number<double>(key, value);
      }
    } else if (starts_with(key, "sched.")) {
      sched[key] = value;
    } else if (starts_with(key, "counter.")) {
      c.counters[key.substr(8)] = r.number<int64_t>(key, value);
    } else if (starts_with(key, "user.")) {
      c.metadata[key.substr(5)] = value;
    } else {
      r.unknown("metadata", key);
    }
  }
  for (int64_t g = 0; g < group_count; ++g) {
    EMBER_CHECK(has_params[size_t(g)], "load_checkpoint: " << path << ": no \"optim.group." << g << ".params\"");
  }
  if (!sched.empty()) {
    for (const char* key : {"sched.last_epoch", "sched.base_lrs", "sched.last_lrs"}) {
      EMBER_CHECK(sched.count(key), "load_checkpoint: " << path << ": scheduler state lacks \"" << key << "\"");
    }
    if (sched.size() != 3) {
      for (const auto& [key, value] : sched) {
        if (key != "sched.last_epoch" && key != "sched.base_lrs" && key != "sched.last_lrs") r.unknown("metadata", key);
      }
    }
    optim::SchedulerStateDict s;
    s.last_epoch = r.number<int64_t>("sched.last_epoch", sched["sched.last_epoch"]);
    s.base_lrs = r.list<double>("sched.base_lrs", sched["sched.base_lrs"]);
    s.last_lrs = r.list<double>("sched.last_lrs", sched["sched.last_lrs"]);
    c.scheduler = s;
  }
  return c;
}

}  // namespace ember
