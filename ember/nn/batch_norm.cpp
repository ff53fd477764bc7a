// BatchNorm1d/2d: buffers, the momentum rule, and forward through
// ember::batch_norm.
#include "ember/nn/batch_norm.h"

#include <sstream>

#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/nn/init.h"

namespace ember::nn {

BatchNormBase::BatchNormBase(const char* layer, int64_t num_features, double eps, std::optional<double> momentum,
                             bool affine, bool track_running_stats)
    : num_features(num_features),
      eps(eps),
      momentum(momentum),
      affine(affine),
      track_running_stats(track_running_stats) {
  EMBER_CHECK(num_features > 0, layer << ": num_features must be positive, got " << num_features);
  EMBER_CHECK(eps > 0.0, layer << ": eps must be positive, got " << eps);
  EMBER_CHECK(!momentum || (*momentum >= 0.0 && *momentum <= 1.0),
              layer << ": momentum must be in [0, 1], got " << *momentum);
  if (affine) {
    weight = register_parameter("weight", empty({num_features}));
    bias = register_parameter("bias", empty({num_features}));
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", empty({num_features}));
    running_var = register_buffer("running_var", empty({num_features}));
    num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::Int64));
  }
  reset_parameters();
}

BatchNormBase::BatchNormBase(const BatchNormBase& other)
    : num_features(other.num_features),
      eps(other.eps),
      momentum(other.momentum),
      affine(other.affine),
      track_running_stats(other.track_running_stats) {
  if (affine) {
    weight = register_parameter("weight", other.weight, other.weight.requires_grad());
    bias = register_parameter("bias", other.bias, other.bias.requires_grad());
  }
  if (track_running_stats) {
    running_mean = register_buffer("running_mean", other.running_mean);
    running_var = register_buffer("running_var", other.running_var);
    num_batches_tracked = register_buffer("num_batches_tracked", other.num_batches_tracked);
  }
}

void BatchNormBase::reset_running_stats() {
  if (!track_running_stats) return;
  init::zeros_(running_mean);
  init::ones_(running_var);
  NoGradGuard no_grad;
  num_batches_tracked.zero_();
}

void BatchNormBase::reset_parameters() {
  reset_running_stats();
  if (affine) {
    init::ones_(weight);
    init::zeros_(bias);
  }
}

Tensor BatchNormBase::forward(const Tensor& input) {
  check_input_dim(input);
  EMBER_CHECK(input.size(1) == num_features, name() << ": expected " << num_features
                                                    << " channels (dim 1) but the input has shape "
                                                    << shape_str(input.shape()));
  // The batch is counted once the op has taken it: by the op's kernels
  // (counter), or here after it.
  const bool counts = is_training() && track_running_stats;
  double factor = momentum.value_or(0.0);
  Tensor counter;
  if (counts && momentum && num_batches_tracked.device() == input.device()) counter = num_batches_tracked;
  else if (counts && !momentum) factor = 1.0 / double(num_batches_tracked.item<int64_t>() + 1);
  Tensor y = normalize(input, is_training() || !track_running_stats, factor, counter);
  if (counts && !counter.defined()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return y;
}

Tensor BatchNormBase::normalize(const Tensor& input, bool use_batch_stats, double factor, const Tensor& counter) {
  return batch_norm(input, running_mean, running_var, weight, bias, use_batch_stats, factor, eps, counter);
}

std::string BatchNormBase::extra_repr() const {
  std::ostringstream s;
  s << num_features << ", eps=" << eps << ", momentum=";
  if (momentum) {
    s << *momentum;
  } else {
    s << "none";
  }
  s << ", affine=" << (affine ? "true" : "false")
    << ", track_running_stats=" << (track_running_stats ? "true" : "false");
  return s.str();
}

void BatchNorm1d::check_input_dim(const Tensor& input) const {
  EMBER_CHECK(input.dim() == 2 || input.dim() == 3,
              "BatchNorm1d: expected a 2-D (N, C) or 3-D (N, C, L) input, got shape " << shape_str(input.shape()));
}

std::shared_ptr<Module> BatchNorm1d::clone() const {
  return clone_as<BatchNorm1d>(num_features, eps, momentum, affine, track_running_stats);
}

void BatchNorm2d::check_input_dim(const Tensor& input) const {
  EMBER_CHECK(input.dim() == 4,
              "BatchNorm2d: expected a 4-D (N, C, H, W) input, got shape " << shape_str(input.shape()));
}

std::shared_ptr<Module> BatchNorm2d::clone() const {
  return clone_as<BatchNorm2d>(num_features, eps, momentum, affine, track_running_stats);
}

}  // namespace ember::nn
