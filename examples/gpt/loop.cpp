// Optimizer, schedule, training step and validation loss (see examples/gpt/loop.h).
#include "examples/gpt/loop.h"

#include <cmath>
#include <numbers>

#include "ember/core/grad_mode.h"
#include "ember/optim/clip_grad.h"
#include "ember/parallel/amp/autocast.h"

namespace ember::gpt {

std::unique_ptr<optim::AdamW> make_optimizer(const Gpt& model, double lr, double weight_decay) {
  TensorList decay, no_decay;
  for (const Tensor& p : model.parameters()) (p.dim() >= 2 ? decay : no_decay).push_back(p);
  std::vector<optim::ParamGroup> groups = {optim::ParamGroup(decay, {{"weight_decay", weight_decay}}),
                                           optim::ParamGroup(no_decay, {{"weight_decay", 0.0}})};
  optim::AdamWOptions defaults;
  defaults.lr = lr;
  defaults.betas = {0.9, 0.95};
  return std::make_unique<optim::AdamW>(std::move(groups), defaults);
}

optim::LambdaLR::Lambda warmup_cosine(int64_t warmup, int64_t steps, double min_ratio) {
  return [=](int64_t t) {
    if (t < warmup) return double(t + 1) / double(warmup);
    const double done = std::min(1.0, double(t - warmup) / double(steps - warmup));
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + std::cos(std::numbers::pi * done));
  };
}

Tensor train_step(Gpt& model, const TokenBatch& batch, optim::Optimizer& optimizer, optim::LRScheduler& scheduler,
                  double grad_clip, const Precision& precision) {
  Tensor loss;
  {
    std::optional<amp::autocast> autocast;
    if (precision.dtype) autocast.emplace(batch.input.device().type, *precision.dtype);
    loss = Gpt::loss(model.forward(batch.input), batch.target);
  }
  optimizer.zero_grad();
  if (precision.scaler != nullptr) {
    precision.scaler->scale(loss).backward();
    if (grad_clip > 0) {
      precision.scaler->unscale_(optimizer);
      optim::clip_grad_norm_(model.parameters(), grad_clip);
    }
    precision.scaler->step(optimizer);
    precision.scaler->update();
  } else {
    loss.backward();
    if (grad_clip > 0) optim::clip_grad_norm_(model.parameters(), grad_clip);
    optimizer.step();
  }
  scheduler.step();
  return loss.detach();
}

double validation_loss(Gpt& model, const std::vector<TokenBatch>& batches, std::optional<DType> autocast_dtype) {
  NoGradGuard no_grad;
  model.eval();
  Tensor sum;
  for (const TokenBatch& batch : batches) {
    std::optional<amp::autocast> autocast;
    if (autocast_dtype) autocast.emplace(batch.input.device().type, *autocast_dtype);
    const Tensor loss = Gpt::loss(model.forward(batch.input), batch.target).to(DType::Float64);
    sum = sum.defined() ? sum + loss : loss;
  }
  model.train();
  return sum.item<double>() / double(batches.size());
}

}  // namespace ember::gpt
