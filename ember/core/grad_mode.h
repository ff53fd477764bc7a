// Thread-local grad mode: whether ops record themselves for backward.
//
// GradModeGuard sets the mode for its scope and restores the previous one
// when the scope is left, also by an exception; NoGradGuard turns recording
// off (optimizer steps, eval) and EnableGradGuard turns it back on inside
// such a scope. Each thread has its own mode, so DataParallel's worker
// threads start with grad enabled.
#pragma once

namespace ember {

class GradMode {
 public:
  static bool is_enabled();
  static void set_enabled(bool enabled);
};

class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : prev_(GradMode::is_enabled()) { GradMode::set_enabled(enabled); }
  ~GradModeGuard() { GradMode::set_enabled(prev_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool prev_;
};

class NoGradGuard : public GradModeGuard {
 public:
  NoGradGuard() : GradModeGuard(false) {}
};

class EnableGradGuard : public GradModeGuard {
 public:
  EnableGradGuard() : GradModeGuard(true) {}
};

}  // namespace ember
