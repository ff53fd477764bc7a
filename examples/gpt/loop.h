// ember-gpt's training pieces: the AdamW with its two parameter groups, the
// warmup + cosine schedule, one training step and the validation loss.
//
// Contract:
// - make_optimizer puts every parameter of two or more dims (the linear
//   layers' weights and both embeddings; the tied head is the token
//   embedding) in a group with weight_decay, the rest (biases, LayerNorms)
//   in a group without; AdamW with betas (0.9, 0.95), as GPT-2 and nanoGPT.
// - warmup_cosine(warmup, steps, min_ratio) is the lr factor of step t, for
//   optim::LambdaLR stepped once per optimizer step: (t + 1) / warmup during
//   the warmup, then a cosine from 1 down to min_ratio at t = steps.
// - train_step runs forward and loss (under autocast when Precision::dtype
//   is set), backward (of the scaled loss with a scaler), clips the global
//   gradient norm to grad_clip (after unscaling; 0: no clipping), steps the
//   optimizer (through the scaler, which skips a step whose gradients
//   overflowed) and the scheduler. It returns the loss, detached, on the
//   model's device: reading it is the caller's choice (a CUDA sync).
// - validation_loss is the mean loss over the batches, in eval mode (no
//   dropout) without autograd; it restores training mode.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "ember/optim/adam.h"
#include "ember/optim/lr_scheduler.h"
#include "ember/parallel/amp/grad_scaler.h"
#include "examples/gpt/corpus.h"
#include "examples/gpt/model.h"

namespace ember::gpt {

std::unique_ptr<optim::AdamW> make_optimizer(const Gpt& model, double lr, double weight_decay);

optim::LambdaLR::Lambda warmup_cosine(int64_t warmup, int64_t steps, double min_ratio);

struct Precision {
  std::optional<DType> dtype;         // none: float32
  amp::GradScaler* scaler = nullptr;  // float16: dynamic loss scaling
};

Tensor train_step(Gpt& model, const TokenBatch& batch, optim::Optimizer& optimizer, optim::LRScheduler& scheduler,
                  double grad_clip, const Precision& precision);

double validation_loss(Gpt& model, const std::vector<TokenBatch>& batches, std::optional<DType> autocast_dtype);

}  // namespace ember::gpt
