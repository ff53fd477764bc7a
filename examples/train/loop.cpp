// The training and evaluation loops, with device-side running sums.
#include "examples/train/loop.h"

#include <chrono>
#include <optional>
#include <vector>

#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/nn/loss.h"
#include "ember/parallel/amp/autocast.h"
#include "examples/train/progress.h"

namespace ember::train {
namespace {

// The number of correct predictions in a batch, as a 0-dim int64 tensor on
// the batch's device.
Tensor count_correct(const Tensor& logits, const Tensor& target) { return eq(argmax(logits, 1), target).sum(); }

}  // namespace

TrainStats train_epoch(nn::UnaryModule& model, data::DataLoader& loader, optim::Optimizer& optimizer,
                       optim::LRScheduler* scheduler, const Augmentation& augment, const std::string& label,
                       const MixedPrecision& mixed, const Reporting& reporting) {
  const auto start = std::chrono::steady_clock::now();
  model.train();
  std::optional<Progress> bar;
  if (reporting.progress) bar.emplace(label, loader.size(), Progress::Mode::Lines);
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
    if (bar && bar->due(done)) bar->draw(done, samples, loss_sum.item<double>() / double(samples));
  }
  if (bar) bar->finish();
  // Waits for the GPU.
  std::vector<double> totals = {samples > 0 ? loss_sum.item<double>() : 0.0, samples > 0 ? correct.item<double>() : 0.0,
                                double(samples)};
  if (reporting.sum) reporting.sum(totals);
  TrainStats stats;
  stats.samples = int64_t(totals[2]);
  stats.lr = lr;
  if (totals[2] > 0) {
    stats.loss = totals[0] / totals[2];
    stats.accuracy = 100.0 * totals[1] / totals[2];
  }
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

double evaluate(nn::UnaryModule& model, data::DataLoader& loader, const std::string& label,
                std::optional<DType> autocast_dtype, const Reporting& reporting) {
  NoGradGuard no_grad;
  model.eval();
  std::optional<Progress> bar;
  if (reporting.progress) bar.emplace(label, loader.size(), Progress::Mode::Silent);
  Tensor correct;
  int64_t samples = 0, done = 0;
  for (data::Batch& batch : loader) {
    std::optional<amp::autocast> autocast;
    if (autocast_dtype) autocast.emplace(batch.input.device().type, *autocast_dtype);
    Tensor batch_correct = count_correct(model(batch.input), batch.target);
    correct = correct.defined() ? correct + batch_correct : batch_correct;
    samples += batch.input.size(0);
    ++done;
    if (bar && bar->due(done)) bar->draw(done, samples, -1);
  }
  if (bar) bar->finish();
  model.train();
  std::vector<double> totals = {samples > 0 ? correct.item<double>() : 0.0, double(samples)};
  if (reporting.sum) reporting.sum(totals);
  return totals[1] > 0 ? 100.0 * totals[0] / totals[1] : 0.0;
}

}  // namespace ember::train
