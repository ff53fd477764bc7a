// One-time warnings and their capture for tests.
#include "ember/parallel/data_parallel/warn_once.h"

#include <cstdio>
#include <mutex>
#include <set>

#include "ember/core/error.h"

namespace ember::parallel {
namespace {

struct WarningState {
  std::mutex mutex;
  std::set<std::string> warned;
  bool capturing = false;
  std::set<std::string> saved_warned;  // the process's memory while a capture lives
  std::vector<std::string> captured;
};

WarningState& state() {
  static WarningState s;
  return s;
}

}  // namespace

void warn_once(const std::string& key, const std::string& message) {
  WarningState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.warned.insert(key).second) return;
  if (s.capturing) {
    s.captured.push_back(message);
    return;
  }
  std::fprintf(stderr, "ember warning: %s\n", message.c_str());
}

WarningCapture::WarningCapture() {
  WarningState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  EMBER_CHECK(!s.capturing, "WarningCapture: another capture is alive; use one at a time");
  s.capturing = true;
  s.saved_warned.swap(s.warned);
  s.captured.clear();
}

WarningCapture::~WarningCapture() {
  WarningState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.capturing = false;
  s.warned.swap(s.saved_warned);
  s.saved_warned.clear();
  s.captured.clear();
}

std::vector<std::string> WarningCapture::messages() const {
  WarningState& s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.captured;
}

size_t WarningCapture::count(const std::string& part) const {
  size_t n = 0;
  for (const std::string& m : messages()) n += m.find(part) != std::string::npos;
  return n;
}

}  // namespace ember::parallel
