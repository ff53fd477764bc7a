// The learning-rate schedulers (see ember/optim/lr_scheduler.h).
#include "ember/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace ember::optim {

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {
  for (const ParamGroup& g : optimizer.param_groups()) base_lrs_.push_back(g.lr());
}

void LRScheduler::initial_step() { step(); }

void LRScheduler::step() {
  apply(last_epoch_ + 1);
  ++last_epoch_;
  last_lrs_.clear();
  for (const ParamGroup& g : optimizer_.param_groups()) last_lrs_.push_back(g.lr());
}

void LRScheduler::apply(int64_t epoch) {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  EMBER_CHECK(groups.size() == base_lrs_.size(),
              "LRScheduler.step: the optimizer has "
                  << groups.size() << " parameter groups, but the scheduler was made for " << base_lrs_.size());
  for (size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(lr_at(g, epoch));
}

SchedulerStateDict LRScheduler::state_dict() const { return {last_epoch_, base_lrs_, last_lrs_}; }

void LRScheduler::load_state_dict(const SchedulerStateDict& sd) {
  const size_t groups = optimizer_.param_groups().size();
  EMBER_CHECK(sd.base_lrs.size() == groups && sd.last_lrs.size() == groups,
              "LRScheduler.load_state_dict: the state dict has "
                  << sd.base_lrs.size() << " base lrs and " << sd.last_lrs.size() << " last lrs, but the optimizer has "
                  << groups << " parameter groups");
  last_epoch_ = sd.last_epoch;
  base_lrs_ = sd.base_lrs;
  last_lrs_ = sd.last_lrs;
}

// ---------------- StepLR ----------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size > 0, "StepLR: step_size must be a positive number of epochs, but is " << step_size);
  initial_step();
}

double StepLR::lr_at(size_t group, int64_t epoch) const {
  return base_lrs_[group] * std::pow(gamma_, double(epoch / step_size_));
}

// ---------------- CosineAnnealingLR ----------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min)
    : LRScheduler(optimizer), t_max_(T_max), eta_min_(eta_min) {
  EMBER_CHECK(T_max > 0, "CosineAnnealingLR: T_max must be a positive number of epochs, but is " << T_max);
  initial_step();
}

double CosineAnnealingLR::lr_at(size_t group, int64_t epoch) const {
  return eta_min_ +
         (base_lrs_[group] - eta_min_) * (1 + std::cos(std::numbers::pi * double(epoch) / double(t_max_))) / 2;
}

// ---------------- LinearLR ----------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer), start_factor_(start_factor), end_factor_(end_factor), total_iters_(total_iters) {
  EMBER_CHECK(start_factor > 0 && start_factor <= 1,
              "LinearLR: starting multiplicative factor expected to be greater than 0 and less or equal to 1, but is "
                  << start_factor);
  EMBER_CHECK(end_factor >= 0 && end_factor <= 1,
              "LinearLR: ending multiplicative factor expected to be between 0 and 1, but is " << end_factor);
  EMBER_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, but is " << total_iters);
  initial_step();
}

double LinearLR::lr_at(size_t group, int64_t epoch) const {
  const double done = double(std::min(total_iters_, epoch)) / double(total_iters_);
  return base_lrs_[group] * (start_factor_ + (end_factor_ - start_factor_) * done);
}

// ---------------- LambdaLR ----------------

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.param_groups().size(), lr_lambda)) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas)
    : LRScheduler(optimizer), lambdas_(std::move(lr_lambdas)) {
  EMBER_CHECK(lambdas_.size() == base_lrs_.size(), "LambdaLR: expected " << base_lrs_.size()
                                                                         << " lr_lambdas (one per parameter group), "
                                                                            "but got "
                                                                         << lambdas_.size());
  for (size_t g = 0; g < lambdas_.size(); ++g) {
    EMBER_CHECK(lambdas_[g], "LambdaLR: lr_lambda " << g << " is empty; pass a function of the epoch");
  }
  initial_step();
}

double LambdaLR::lr_at(size_t group, int64_t epoch) const { return base_lrs_[group] * lambdas_[group](epoch); }

// ---------------- OneCycleLR ----------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleOptions options)
    : OneCycleLR(optimizer, std::vector<double>(optimizer.param_groups().size(), max_lr), total_steps, options) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps, OneCycleOptions o)
    : LRScheduler(optimizer), total_steps_(total_steps), options_(o), max_lrs_(std::move(max_lrs)) {
  std::vector<ParamGroup>& groups = optimizer.param_groups();
  EMBER_CHECK(total_steps > 0, "OneCycleLR: expected a positive total_steps, but got " << total_steps);
  EMBER_CHECK(o.pct_start >= 0 && o.pct_start <= 1,
              "OneCycleLR: expected pct_start between 0 and 1, but got " << o.pct_start);
  EMBER_CHECK(max_lrs_.size() == groups.size(),
              "OneCycleLR: expected " << groups.size() << " values for max_lr (one per parameter group), got "
                                      << max_lrs_.size());
  EMBER_CHECK(o.div_factor > 0 && o.final_div_factor > 0, "OneCycleLR: div_factor ("
                                                              << o.div_factor << ") and final_div_factor ("
                                                              << o.final_div_factor << ") must be positive");
  const double total = double(total_steps);
  if (o.three_phase) {
    phases_ = {
        {o.pct_start * total - 1, 0, 1, 1, 0}, {2 * o.pct_start * total - 2, 1, 0, 0, 1}, {total - 1, 0, 2, 1, 1}};
  } else {
    phases_ = {{o.pct_start * total - 1, 0, 1, 1, 0}, {total - 1, 1, 2, 0, 1}};
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    initial_lrs_.push_back(max_lrs_[g] / o.div_factor);
    min_lrs_.push_back(initial_lrs_[g] / o.final_div_factor);
    groups[g].set_lr(initial_lrs_[g]);
  }
  base_lrs_ = initial_lrs_;
  if (o.cycle_momentum) {
    const GroupOptions& defaults = optimizer.defaults();
    momentum_key_ = defaults.count("beta1") ? "beta1" : defaults.count("momentum") ? "momentum" : nullptr;
    EMBER_CHECK(momentum_key_ != nullptr, "OneCycleLR: optimizer "
                                              << optimizer.name()
                                              << " must support momentum or beta1 with cycle_momentum enabled; "
                                                 "pass OneCycleOptions{.cycle_momentum = false}");
    for (ParamGroup& g : groups) g.set(momentum_key_, o.max_momentum);
  }
  initial_step();
}

std::pair<const OneCycleLR::Phase*, double> OneCycleLR::locate(int64_t epoch) const {
  EMBER_CHECK(epoch <= total_steps_, "OneCycleLR: tried to step " << epoch << " times; the specified number of "
                                                                  << "total steps is " << total_steps_);
  double start_step = 0;
  for (size_t i = 0; i < phases_.size(); ++i) {
    const Phase& phase = phases_[i];
    if (double(epoch) <= phase.end_step || i + 1 == phases_.size()) {
      EMBER_CHECK(phase.end_step != start_step, "OneCycleLR: phase " << i << " has zero length (pct_start "
                                                                     << options_.pct_start << ", total_steps "
                                                                     << total_steps_ << ")");
      return {&phase, (double(epoch) - start_step) / (phase.end_step - start_step)};
    }
    start_step = phase.end_step;
  }
  EMBER_INTERNAL_ASSERT(false, "OneCycleLR: no phase for step " << epoch);  // the last phase takes the rest
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == OneCycleOptions::Anneal::Linear) return (end - start) * pct + start;
  return end + (start - end) / 2.0 * (std::cos(std::numbers::pi * pct) + 1);
}

double OneCycleLR::lr_at(size_t group, int64_t epoch) const {
  auto [phase, pct] = locate(epoch);
  const double lrs[3] = {initial_lrs_[group], max_lrs_[group], min_lrs_[group]};
  return anneal(lrs[phase->start_lr], lrs[phase->end_lr], pct);
}

void OneCycleLR::apply(int64_t epoch) {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  EMBER_CHECK(groups.size() == max_lrs_.size(),
              "OneCycleLR.step: the optimizer has "
                  << groups.size() << " parameter groups, but the scheduler was made for " << max_lrs_.size());
  auto [phase, pct] = locate(epoch);
  const double momenta[2] = {options_.base_momentum, options_.max_momentum};
  for (size_t g = 0; g < groups.size(); ++g) {
    groups[g].set_lr(lr_at(g, epoch));
    if (momentum_key_ != nullptr) {
      groups[g].set(momentum_key_, anneal(momenta[phase->start_momentum], momenta[phase->end_momentum], pct));
    }
  }
}

// ---------------- ReduceLROnPlateau ----------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  const size_t groups = optimizer.param_groups().size();
  EMBER_CHECK(options_.factor < 1.0,
              "ReduceLROnPlateau: factor should be < 1.0 (the lr is multiplied by it), but is " << options_.factor);
  EMBER_CHECK(options_.min_lr.size() == 1 || options_.min_lr.size() == groups,
              "ReduceLROnPlateau: expected " << groups << " min_lrs (one per parameter group) or one for all, got "
                                             << options_.min_lr.size());
  min_lrs_ = options_.min_lr.size() == 1 ? std::vector<double>(groups, options_.min_lr[0]) : options_.min_lr;
  const bool min_mode = options_.mode == ReduceLROnPlateauOptions::Mode::Min;
  best_ = min_mode ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  for (const ParamGroup& g : optimizer.param_groups()) last_lrs_.push_back(g.lr());
}

bool ReduceLROnPlateau::is_better(double a) const {
  using Mode = ReduceLROnPlateauOptions::Mode;
  using ThresholdMode = ReduceLROnPlateauOptions::ThresholdMode;
  const double t = options_.threshold;
  const bool rel = options_.threshold_mode == ThresholdMode::Rel;
  if (options_.mode == Mode::Min) return rel ? a < best_ * (1.0 - t) : a < best_ - t;
  return rel ? a > best_ * (1.0 + t) : a > best_ + t;
}

void ReduceLROnPlateau::reduce_lr() {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    const double old_lr = groups[g].lr();
    const double new_lr = std::max(old_lr * options_.factor, min_lrs_[g]);
    if (old_lr - new_lr > options_.eps) groups[g].set_lr(new_lr);
  }
}

void ReduceLROnPlateau::step(double metric) {
  const size_t groups = optimizer_.param_groups().size();
  EMBER_CHECK(groups == min_lrs_.size(), "ReduceLROnPlateau.step: the optimizer has "
                                             << groups << " parameter groups, but the scheduler was made for "
                                             << min_lrs_.size());
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (in_cooldown()) {
    --cooldown_counter_;
    num_bad_epochs_ = 0;  // bad steps during cooldown do not count
  }
  if (num_bad_epochs_ > options_.patience) {
    reduce_lr();
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lrs_.clear();
  for (const ParamGroup& g : optimizer_.param_groups()) last_lrs_.push_back(g.lr());
}

ReduceLROnPlateauState ReduceLROnPlateau::state_dict() const {
  return {last_epoch_, best_, num_bad_epochs_, cooldown_counter_, last_lrs_};
}

void ReduceLROnPlateau::load_state_dict(const ReduceLROnPlateauState& sd) {
  const size_t groups = optimizer_.param_groups().size();
  EMBER_CHECK(sd.last_lrs.size() == groups, "ReduceLROnPlateau.load_state_dict: the state dict has "
                                                << sd.last_lrs.size() << " last lrs, but the optimizer has " << groups
                                                << " parameter groups");
  last_epoch_ = sd.last_epoch;
  best_ = sd.best;
  num_bad_epochs_ = sd.num_bad_epochs;
  cooldown_counter_ = sd.cooldown_counter;
  last_lrs_ = sd.last_lrs;
}

}  // namespace ember::optim
