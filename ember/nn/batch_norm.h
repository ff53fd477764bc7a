// BatchNorm1d and BatchNorm2d, as torch.nn's.
//
// Input (N, C) or (N, C, L) for BatchNorm1d, (N, C, H, W) for BatchNorm2d;
// output of the same shape.
// - Training: each channel is normalized with the batch mean and biased
//   variance; with track_running_stats the buffers running_mean (zeros),
//   running_var (ones) and num_batches_tracked (int64, 0) are updated:
//   running = (1 - m) running + m batch (unbiased variance), with m =
//   momentum, or 1 / num_batches_tracked when momentum is nullopt (a
//   cumulative average; reading the count synchronizes on CUDA). The
//   batch is counted once the op has taken it: a forward that throws (an
//   input it rejects) leaves the count as it was.
// - Eval: the running statistics normalize (the batch ones when
//   track_running_stats is off, as PyTorch).
// - affine adds weight (ones) and bias (zeros), one per channel.
// The op is ember::batch_norm (ember/core/ops.h).
#pragma once

#include <optional>

#include "ember/nn/module.h"

namespace ember::nn {

// What every batch normalization layer shares: the parameters and buffers,
// the momentum rule, printing. forward checks the input, applies the
// momentum rule, then calls normalize(), which a layer may replace
// (parallel::SyncBatchNorm normalizes over every rank).
class BatchNormBase : public UnaryModule {
 public:
  Tensor forward(const Tensor& input) override;
  // "16, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true"
  std::string extra_repr() const override;
  void reset_running_stats();
  void reset_parameters();  // running stats, weight and bias

  const int64_t num_features;
  const double eps;
  const std::optional<double> momentum;
  const bool affine;
  const bool track_running_stats;
  Tensor weight;               // (C), undefined unless affine
  Tensor bias;                 // (C), undefined unless affine
  Tensor running_mean;         // (C), undefined unless track_running_stats
  Tensor running_var;          // (C), undefined unless track_running_stats
  Tensor num_batches_tracked;  // () int64, undefined unless track_running_stats

 protected:
  // layer names the class in the constructor's errors.
  BatchNormBase(const char* layer, int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                bool track_running_stats);
  // A layer with other's options over other's very parameter and buffer
  // tensors (shared, not copied: an optimizer of other's keeps working).
  explicit BatchNormBase(const BatchNormBase& other);
  void parameter_replaced(const std::string& name, const Tensor& parameter) override {
    (name == "weight" ? weight : bias) = parameter;
  }
  virtual void check_input_dim(const Tensor& input) const = 0;
  // Normalizes with the batch statistics (use_batch_stats, updating the
  // running ones with momentum factor) or the running ones, and adds one to
  // counter when it is defined (num_batches_tracked, in training with a
  // momentum, left to this call). Default: ember::batch_norm, whose kernels
  // count it.
  virtual Tensor normalize(const Tensor& input, bool use_batch_stats, double factor, const Tensor& counter);
};

class BatchNorm1d : public BatchNormBase {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNormBase("BatchNorm1d", num_features, eps, momentum, affine, track_running_stats) {}
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_input_dim(const Tensor& input) const override;
};

class BatchNorm2d : public BatchNormBase {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true)
      : BatchNormBase("BatchNorm2d", num_features, eps, momentum, affine, track_running_stats) {}
  std::shared_ptr<Module> clone() const override;

 protected:
  void check_input_dim(const Tensor& input) const override;
};

}  // namespace ember::nn
