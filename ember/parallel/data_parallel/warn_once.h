// One-time warnings: a message printed to stderr the first time its key is
// warned about in this process, as a Python UserWarning is printed once per
// call site. DataParallel warns this way about uneven batches and GPUs.
// Internal to parallel/ (tests capture the warnings with WarningCapture).
//
// Contract:
// - warn_once(key, message) writes "ember warning: <message>\n" to stderr
//   the first time `key` is seen in this process; later calls with the same
//   key do nothing. Thread-safe.
// - While a WarningCapture lives, warnings are collected by it instead of
//   printed, and it starts with a fresh memory of the keys already warned
//   about (restored when it ends), so that a test sees its own warning once
//   whatever ran before it. One capture at a time.
#pragma once

#include <string>
#include <vector>

namespace ember::parallel {

void warn_once(const std::string& key, const std::string& message);

class WarningCapture {
 public:
  WarningCapture();
  ~WarningCapture();
  WarningCapture(const WarningCapture&) = delete;
  WarningCapture& operator=(const WarningCapture&) = delete;

  // The messages warned so far, in order (a copy: workers may still warn).
  std::vector<std::string> messages() const;
  // How many of them contain `part`.
  size_t count(const std::string& part) const;
};

}  // namespace ember::parallel
