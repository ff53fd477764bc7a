// Inference mode: torch.inference_mode as an RAII guard, InferenceMode.
//
// Contract:
// - While an InferenceMode guard (enabled, the default) is alive on a
//   thread, grad mode is off there (ember/core/grad_mode.h: no op records itself
//   for backward), and every tensor whose memory is allocated there is an
//   inference tensor (Tensor::is_inference()). Views and detach() of an
//   inference tensor are inference tensors wherever they are made; views of
//   a normal tensor stay normal; clone() outside inference mode gives a
//   normal tensor.
// - InferenceMode(false) turns inference mode off and grad mode on for its
//   scope, as PyTorch's. Guards nest and restore both modes when they end,
//   also by an exception. Each thread has its own mode.
// - Inference tensors cannot take part in autograd later, as PyTorch's:
//   saving one for backward (an op whose backward needs it, with another
//   input that requires grad), setting requires_grad on one, or updating
//   one in place outside inference mode is an ember::Error naming inference
//   mode and the fix (clone() it outside inference mode). Inside inference
//   mode, in-place updates of any tensor are allowed.
// - The cost outside inference mode is one thread-local read per storage
//   allocation and one flag test per in-place op and saved tensor.
#pragma once

#include "ember/core/grad_mode.h"

namespace ember {

class InferenceMode {
 public:
  explicit InferenceMode(bool enabled = true);
  ~InferenceMode();
  InferenceMode(const InferenceMode&) = delete;
  InferenceMode& operator=(const InferenceMode&) = delete;

  // Whether inference mode is on for this thread (torch.is_inference_mode_enabled()).
  static bool is_enabled();

 private:
  bool prev_;
  GradModeGuard grad_;
};

}  // namespace ember
