// The training and evaluation loops, with device-side running sums.
#include "examples/train/loop.h"

#include <chrono>

#include "core/grad_mode.h"
#include "core/ops.h"
#include "examples/train/progress.h"
#include "nn/loss.h"
#include "parallel/amp/autocast.h"

namespace ember::train {
namespace {

// The number of correct predictions in a batch, as a 0-dim int64 tensor on
// the batch's device.
Tensor count_correct(const Tensor& logits, const Tensor& target) { return eq(argmax(logits, 1), target).sum(); }

}  // namespace

TrainStats train_epoch(nn::UnaryModule& model, data::DataLoader& loader, optim::Optimizer& optimizer,
                       optim::LRScheduler* scheduler, const Augmentation& augment, const std::string& label,
                       const MixedPrecision& mixed) {
  const auto start = std::chrono::steady_clock::now();
  model.train();
  Progress bar(label, loader.size(), Progress::Mode::Lines);
  Tensor loss_sum, correct;  // on the batches' device, made with the first batch
  int64_t samples = 0, done = 0;
  double lr = optimizer.param_groups().front().lr();
  for (data::Batch& batch : loader) {
    const int64_t n = batch.input.size(0);
    Tensor logits, loss;
    {
      std::optional<amp::autocast> autocast;
      if (mixed.dtype) autocast.emplace(batch.input.device().type, *mixed.dtype);
      logits = model(augment ? augment(batch.input) : batch.input);
      loss = nn::functional::cross_entropy(logits, batch.target);
    }
    optimizer.zero_grad();
    lr = optimizer.param_groups().front().lr();
    if (mixed.scaler != nullptr) {
      mixed.scaler->scale(loss).backward();
      mixed.scaler->step(optimizer);
      mixed.scaler->update();
    } else {
      loss.backward();
      optimizer.step();
    }
    if (scheduler != nullptr) scheduler->step();
    {
      NoGradGuard no_grad;
      Tensor batch_loss = loss.detach().to(DType::Float64) * double(n);
      Tensor batch_correct = count_correct(logits, batch.target);
      if (!loss_sum.defined()) {
        loss_sum = batch_loss;
        correct = batch_correct;
      } else {
        loss_sum.add_(batch_loss);
        correct.add_(batch_correct);
      }
    }
    samples += n;
    ++done;
    if (bar.due(done)) bar.draw(done, samples, loss_sum.item<double>() / double(samples));
  }
  bar.finish();
  TrainStats stats;
  stats.samples = samples;
  stats.lr = lr;
  if (samples > 0) {
    stats.loss = loss_sum.item<double>() / double(samples);
    stats.accuracy = 100.0 * correct.item<double>() / double(samples);  // waits for the GPU
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

double evaluate(nn::UnaryModule& model, data::DataLoader& loader, const std::string& label,
                std::optional<DType> autocast_dtype) {
  NoGradGuard no_grad;
  model.eval();
  Progress bar(label, loader.size(), Progress::Mode::Silent);
  Tensor correct;
  int64_t samples = 0, done = 0;
  for (data::Batch& batch : loader) {
    std::optional<amp::autocast> autocast;
    if (autocast_dtype) autocast.emplace(batch.input.device().type, *autocast_dtype);
    Tensor batch_correct = count_correct(model(batch.input), batch.target);
    correct = correct.defined() ? correct + batch_correct : batch_correct;
    samples += batch.input.size(0);
    ++done;
    if (bar.due(done)) bar.draw(done, samples, -1);
  }
  bar.finish();
  model.train();
  return samples > 0 ? 100.0 * correct.item<double>() / double(samples) : 0.0;
}

}  // namespace ember::train
