// InferenceMode's thread-local flag (see ember/core/inference_mode.h).
#include "ember/core/inference_mode.h"

namespace ember {
namespace {
thread_local bool inference_enabled = false;
}  // namespace

InferenceMode::InferenceMode(bool enabled) : prev_(inference_enabled), grad_(!enabled) { inference_enabled = enabled; }

InferenceMode::~InferenceMode() { inference_enabled = prev_; }

bool InferenceMode::is_enabled() { return inference_enabled; }

}  // namespace ember
