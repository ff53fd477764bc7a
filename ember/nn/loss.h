// Losses: functions in nn::functional and module wrappers in nn, as
// torch.nn.functional's and torch.nn's.
//
// Contract:
// - reduction Mean averages over the elements (for cross_entropy and
//   nll_loss: over the targets that are not ignore_index; when all are
//   ignored the mean is NaN, as in PyTorch), Sum adds them, None returns
//   the per-element loss.
// - cross_entropy takes logits (N, C) or (N, C, d1, ...) or unbatched (C),
//   and class indices (N) / (N, d1, ...) / () as an int64 (or int32)
//   tensor. For (N, C) and (C) logits it is the fused cross_entropy_loss
//   (ember/core/ops.h), otherwise log_softmax followed by nll_loss; either way
//   stable for any logits. label_smoothing e mixes the target with the
//   uniform distribution: loss = (1 - e) * nll + e / C * sum_c(-log p_c), as
//   PyTorch. Class weights and probability targets are not part of this API.
// - A target outside [0, C) other than ignore_index is an ember::Error
//   naming the bad value and the number of classes, on CPU and CUDA: on the
//   CPU before anything is written; on CUDA the device finds it without the
//   host waiting, and the next call that waits for the device (item(),
//   cpu(), synchronize()) raises it (ember/core/cuda/index_error.h).
// - mse_loss and l1_loss need input and target of one shape (no silent
//   broadcasting of a (N, 1) prediction against an (N) target).
// - binary_cross_entropy_with_logits uses the stable form
//   (1 - y) x + (1 + (pos_weight - 1) y) (log(1 + exp(-|x|)) + max(-x, 0));
//   pos_weight (optional) broadcasts against the input, e.g. one per class
//   along the last dim.
// - Under autocast every loss casts its floating inputs to float32 first
//   (ember/core/autocast_state.h), so the loss is float32 whatever the logits'
//   dtype.
#pragma once

#include <cstdint>

#include "ember/core/ops.h"
#include "ember/nn/module.h"

namespace ember::nn {

using Reduction = ::ember::Reduction;  // None, Mean, Sum (core/ops.h)

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::Mean;
};

struct NLLLossOptions {
  int64_t ignore_index = -100;
  Reduction reduction = Reduction::Mean;
};

namespace functional {

Tensor cross_entropy(const Tensor& input, const Tensor& target, const CrossEntropyOptions& options = {});
// input holds log-probabilities, shaped as cross_entropy's logits.
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options = {});
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
Tensor l1_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean);
// PyTorch's order: weight (rescales each element's loss, broadcasting
// against the input) comes third, pos_weight (weighs the positive term)
// last.
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target, const Tensor& weight = {},
                                        Reduction reduction = Reduction::Mean, const Tensor& pos_weight = {});

}  // namespace functional

class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {}) : options(options) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::shared_ptr<Module> clone() const override;

  const CrossEntropyOptions options;
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(NLLLossOptions options = {}) : options(options) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::shared_ptr<Module> clone() const override;

  const NLLLossOptions options;
};

class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::Mean) : reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::shared_ptr<Module> clone() const override;

  const Reduction reduction;
};

class L1Loss : public Module {
 public:
  explicit L1Loss(Reduction reduction = Reduction::Mean) : reduction(reduction) {}
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::shared_ptr<Module> clone() const override;

  const Reduction reduction;
};

// torch.nn.BCEWithLogitsLoss(weight, reduction, pos_weight), in that order;
// weight and pos_weight, when given, are buffers (they follow to() and the
// state dict).
class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(Tensor weight = {}, Reduction reduction = Reduction::Mean, Tensor pos_weight = {});
  Tensor forward(const Tensor& input, const Tensor& target);
  Tensor operator()(const Tensor& input, const Tensor& target) { return forward(input, target); }
  std::shared_ptr<Module> clone() const override;

  const Reduction reduction;
  Tensor weight;      // undefined when not given
  Tensor pos_weight;  // undefined when not given
};

}  // namespace ember::nn
