// Learning-rate schedulers with PyTorch's closed-form values: StepLR,
// CosineAnnealingLR, LinearLR, OneCycleLR and LambdaLR; and
// ReduceLROnPlateau, which follows a metric (at the end of this file).
//
// Contract:
// - A scheduler holds a reference to its optimizer, which must outlive it.
//   Constructing one performs PyTorch's initial step: last_epoch becomes 0
//   and every group's "lr" is set to the value at epoch 0.
// - step() advances last_epoch by one and sets each group's "lr" to the
//   closed-form value at last_epoch (base_lr is the group's lr when the
//   scheduler was made; OneCycleLR's is max_lr / div_factor):
//     StepLR             base_lr * gamma^floor(epoch / step_size)
//     CosineAnnealingLR  eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
//     LinearLR           base_lr * (start + (end - start) * min(epoch, total_iters) / total_iters)
//     OneCycleLR         torch.optim.lr_scheduler.OneCycleLR (see below)
//     LambdaLR           base_lr * lr_lambda(epoch)
// - get_last_lr() is the lrs the last step() (or the constructor) set.
// - state_dict()/load_state_dict() save and restore last_epoch, base_lrs and
//   last_lrs; the optimizer's own state dict restores the groups' lr.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "ember/optim/optimizer.h"

namespace ember::optim {

struct SchedulerStateDict {
  int64_t last_epoch = 0;
  std::vector<double> base_lrs;
  std::vector<double> last_lrs;
};

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  void step();
  const std::vector<double>& get_last_lr() const { return last_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }

  SchedulerStateDict state_dict() const;
  // An ember::Error, changing nothing, when the number of lrs differs from
  // the optimizer's number of groups.
  void load_state_dict(const SchedulerStateDict& state_dict);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Derived constructors call this last: it performs the step to epoch 0.
  void initial_step();
  // Sets the groups' options for `epoch` (the default sets "lr" to lr_at).
  virtual void apply(int64_t epoch);
  virtual double lr_at(size_t group, int64_t epoch) const = 0;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;

 private:
  int64_t last_epoch_ = -1;
  std::vector<double> last_lrs_;
};

// Decays the lr by gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// Cosine from base_lr down to eta_min over T_max epochs (and on, periodic).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// Linear change of a multiplicative factor from start_factor to end_factor
// over total_iters epochs (warmup with the defaults).
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0, int64_t total_iters = 5);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;

 private:
  double start_factor_, end_factor_;
  int64_t total_iters_;
};

// torch.optim.lr_scheduler.LambdaLR: each group's lr is its base_lr times a
// factor the caller computes from the epoch (a step, when stepped per
// batch), e.g. a linear warmup then a cosine decay:
//   LambdaLR s(opt, [=](int64_t t) { return t < warmup ? (t + 1.0) / warmup : cosine_factor(t); });
// One function serves every group, or one per group (another count is an
// ember::Error, as in PyTorch). As in PyTorch, state_dict() does not hold the
// functions: a resumed run passes the same ones to the constructor.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t epoch)>;
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas);

 protected:
  double lr_at(size_t group, int64_t epoch) const override;

 private:
  std::vector<Lambda> lambdas_;  // one per group
};

// torch.optim.lr_scheduler.OneCycleLR: the lr rises from max_lr / div_factor
// to max_lr over the first pct_start of total_steps, then anneals to
// initial_lr / final_div_factor (with three_phase: back to initial_lr first,
// then to the minimum); momentum ("momentum" for SGD, "beta1" for Adam)
// cycles inversely between max_momentum and base_momentum when
// cycle_momentum is set. Stepping beyond total_steps is an ember::Error.
struct OneCycleOptions {
  enum class Anneal { Cos, Linear };
  double pct_start = 0.3;
  Anneal anneal_strategy = Anneal::Cos;
  bool cycle_momentum = true;
  double base_momentum = 0.85;
  double max_momentum = 0.95;
  double div_factor = 25.0;
  double final_div_factor = 1e4;
  bool three_phase = false;
};

class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps, OneCycleOptions options = {});
  // One max_lr per parameter group.
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps, OneCycleOptions options = {});

 protected:
  void apply(int64_t epoch) override;
  double lr_at(size_t group, int64_t epoch) const override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr;              // 0: initial lr, 1: max lr, 2: min lr
    int start_momentum, end_momentum;  // 0: base, 1: max momentum
  };
  // The phase of `epoch` and the fraction of it done.
  std::pair<const Phase*, double> locate(int64_t epoch) const;
  double anneal(double start, double end, double pct) const;

  int64_t total_steps_;
  OneCycleOptions options_;
  std::vector<double> max_lrs_, initial_lrs_, min_lrs_;
  std::vector<Phase> phases_;
  const char* momentum_key_ = nullptr;  // "momentum" or "beta1" when cycling
};

// torch.optim.lr_scheduler.ReduceLROnPlateau: multiplies every group's lr
// by factor when the metric passed to step() has not improved for more
// than patience steps.
//
// Rules (PyTorch's, step for step):
// - best starts at +inf (mode Min) or -inf (Max). A metric a improves on
//   best when
//     Min, Rel: a < best * (1 - threshold)    Min, Abs: a < best - threshold
//     Max, Rel: a > best * (1 + threshold)    Max, Abs: a > best + threshold
//   (NaN never improves). An improvement sets best = a and the bad-step
//   count to 0; anything else adds one to it.
// - During cooldown (cooldown_counter > 0) each step counts the cooldown
//   down by one and sets the bad-step count to 0.
// - When the bad-step count exceeds patience, each group's lr becomes
//   max(lr * factor, min_lr[g]), only if that lowers it by more than eps;
//   then the cooldown restarts at cooldown and the bad-step count at 0.
// - min_lr is one value for every group, or one per group. factor >= 1 or
//   a min_lr of another length is an ember::Error, as in PyTorch.
// - get_last_lr() is every group's lr after the last step() (after
//   construction, the groups' lrs then, as PyTorch 2's).
// - state_dict() holds the progress (last_epoch, best, num_bad_epochs,
//   cooldown_counter, last_lrs); load_state_dict() restores it (an error,
//   changing nothing, when the number of lrs differs from the optimizer's
//   number of groups). Options come from the constructor; the optimizer's
//   state dict restores the groups' lr.
struct ReduceLROnPlateauOptions {
  enum class Mode { Min, Max };
  enum class ThresholdMode { Rel, Abs };
  Mode mode = Mode::Min;
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  ThresholdMode threshold_mode = ThresholdMode::Rel;
  int64_t cooldown = 0;
  std::vector<double> min_lr = {0.0};
  double eps = 1e-8;
};

struct ReduceLROnPlateauState {
  int64_t last_epoch = 0;
  double best = 0;
  int64_t num_bad_epochs = 0;
  int64_t cooldown_counter = 0;
  std::vector<double> last_lrs;
};

class ReduceLROnPlateau {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  ReduceLROnPlateau(const ReduceLROnPlateau&) = delete;
  ReduceLROnPlateau& operator=(const ReduceLROnPlateau&) = delete;

  void step(double metric);
  const std::vector<double>& get_last_lr() const { return last_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t cooldown_counter() const { return cooldown_counter_; }
  bool in_cooldown() const { return cooldown_counter_ > 0; }
  const ReduceLROnPlateauOptions& options() const { return options_; }

  ReduceLROnPlateauState state_dict() const;
  void load_state_dict(const ReduceLROnPlateauState& state_dict);

 private:
  bool is_better(double a) const;
  void reduce_lr();

  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_;  // one per group
  int64_t last_epoch_ = 0;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  std::vector<double> last_lrs_;
};

}  // namespace ember::optim
