// SyncBatchNorm (ember/parallel/distributed/ddp/sync_batch_norm.h): the statistics all_reduce of
// the forward, the backward node with its all_reduce, and the conversion of
// a module tree.
//
// Forward, per channel c, rank r with n_r values of mean m_r and sum of
// squared deviations M2_r: the all_reduce sums [n_r, n_r m_r, M2_r,
// n_r m_r^2], so N = sum n_r, mean = sum n_r m_r / N and the global sum of
// squared deviations is sum M2_r + sum n_r m_r^2 - N mean^2 (Chan's
// combination; the cancellation is only in the between-rank part, done in
// float64). Backward, with xhat = (x - mean) * invstd:
//   dx = w * invstd * (dy - sum(dy) / N - xhat * sum(dy * xhat) / N)
// with both sums global; dw = sum(dy * xhat), db = sum(dy) of this rank.
#include "ember/parallel/distributed/ddp/sync_batch_norm.h"

#include <utility>
#include <vector>

#include "ember/core/autograd/function.h"
#include "ember/core/grad_mode.h"
#include "ember/core/ops.h"
#include "ember/nn/container.h"
#include "ember/parallel/distributed/init.h"

namespace ember::parallel {

namespace {

using autograd::SavedTensor;

// (1, C, 1, ...): a per-channel vector broadcast over x.
Shape channel_shape(const Tensor& x) {
  Shape s(size_t(x.dim()), 1);
  s[1] = x.size(1);
  return s;
}

// Every dim but the channels.
Shape reduced_dims(const Tensor& x) {
  Shape dims{0};
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  return dims;
}

DType compute_dtype(DType input) {
  return input == DType::Float16 || input == DType::BFloat16 ? DType::Float32 : input;
}

bool is_plain_batch_norm(const nn::Module& m) {
  return dynamic_cast<const nn::BatchNorm1d*>(&m) != nullptr || dynamic_cast<const nn::BatchNorm2d*>(&m) != nullptr;
}

bool is_container(const nn::Module& m) {
  return dynamic_cast<const nn::Sequential*>(&m) != nullptr || dynamic_cast<const nn::ModuleList*>(&m) != nullptr;
}

using Replaced = std::vector<std::pair<std::string, std::weak_ptr<nn::Module>>>;

void convert_children(nn::Module& parent, const std::string& path, const std::shared_ptr<ProcessGroup>& group,
                      Replaced& watched) {
  for (const auto& item : parent.named_children()) {
    const std::string child_path = path.empty() ? item.key : path + "." + item.key;
    if (!is_plain_batch_norm(*item.value)) {
      convert_children(*item.value, child_path, group, watched);
      continue;
    }
    const auto& bn = dynamic_cast<const nn::BatchNormBase&>(*item.value);
    auto sync = std::make_shared<SyncBatchNorm>(bn, group);
    sync->train(bn.is_training());
    parent.replace_module(item.key, sync);
    if (!is_container(parent)) {
      watched.push_back({child_path + "' (a " + bn.name() + " in a " + parent.name(), item.value});
    }
  }
}

}  // namespace

Tensor sync_batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, double momentum, double eps,
                       const std::shared_ptr<ProcessGroup>& group) {
  const double factor = momentum;
  EMBER_CHECK(input.dim() >= 2 && input.size(1) > 0,
              "sync_batch_norm: expected an input of at least 2 dims (N, C, ...) with C > 0, got shape "
                  << shape_str(input.shape()));
  EMBER_CHECK(weight.defined() == bias.defined(), "sync_batch_norm: pass both weight and bias, or neither");
  EMBER_CHECK(running_mean.defined() == running_var.defined(),
              "sync_batch_norm: pass both running_mean and running_var, or neither");
  const DType compute = compute_dtype(input.dtype());
  const Device device = input.device();
  const int64_t channels = input.size(1);
  const Shape cshape = channel_shape(input);
  const Shape dims = reduced_dims(input);
  const int64_t n_local = input.numel() / channels;
  if (!group || group->size() == 1) {
    EMBER_CHECK(n_local > 1, "SyncBatchNorm: expected more than 1 value per channel when training, got input of shape "
                                 << shape_str(input.shape()));
  }
  Tensor mean_c, invstd_c, count, out;
  {
    NoGradGuard no_grad;
    Tensor x = input.detach().to(compute);
    Tensor local_mean = n_local > 0 ? mean(x, dims) : zeros({channels}, compute, device);
    Tensor m2 = n_local > 0 ? sum(square(x - local_mean.view(cshape)), dims) : zeros({channels}, compute, device);
    Tensor lm = local_mean.to(DType::Float64);
    const double n = double(n_local);
    Tensor stats = cat({full({1}, n, DType::Float64, device), lm * n, m2.to(DType::Float64), lm * lm * n});
    if (group) group->all_reduce(stats, ReduceOp::Sum)->wait();
    count = stats.narrow(0, 0, 1);
    Tensor global_mean = stats.narrow(0, 1, channels) / count;
    Tensor global_m2 = relu(stats.narrow(0, 1 + channels, channels) + stats.narrow(0, 1 + 2 * channels, channels) -
                            global_mean * global_mean * count);
    Tensor invstd = rsqrt(global_m2 / count + eps);
    if (running_mean.defined()) {
      Tensor unbiased = global_m2 / (count - 1.0);
      Tensor rm = running_mean, rv = running_var;
      rm.mul_(1.0 - factor).add_(global_mean.to(rm.dtype()), factor);
      rv.mul_(1.0 - factor).add_(unbiased.to(rv.dtype()), factor);
    }
    mean_c = global_mean.to(compute);
    invstd_c = invstd.to(compute);
    Tensor y = (x - mean_c.view(cshape)) * invstd_c.view(cshape);
    if (weight.defined()) y = y * weight.detach().to(compute).view(cshape) + bias.detach().to(compute).view(cshape);
    out = y.to(input.dtype());
  }
  if (autograd::needs_grad(input, weight, bias)) {
    const bool input_needs = input.requires_grad();
    const bool affine = weight.defined();
    SavedTensor saved_input(input);
    SavedTensor saved_weight = affine ? SavedTensor(weight) : SavedTensor();
    autograd::record(
        "SyncBatchNormBackward", {&out}, {input, weight, bias}, [=](const TensorList& grads) -> TensorList {
          EMBER_CHECK(!GradMode::is_enabled(),
                      "SyncBatchNorm: double backward (create_graph=true) through "
                      "SyncBatchNorm is not supported");
          Tensor x = saved_input.unpack("SyncBatchNormBackward").to(compute);
          Tensor dy = grads[0].to(compute);
          Tensor xhat = (x - mean_c.view(cshape)) * invstd_c.view(cshape);
          Tensor sum_dy = sum(dy, dims);
          Tensor sum_dy_xhat = sum(dy * xhat, dims);
          Tensor grad_input, grad_weight, grad_bias;
          if (affine) {
            grad_weight = sum_dy_xhat;
            grad_bias = sum_dy;
          }
          if (input_needs) {
            Tensor sums = cat({sum_dy.to(DType::Float64), sum_dy_xhat.to(DType::Float64)});
            if (group) group->all_reduce(sums, ReduceOp::Sum)->wait();
            Tensor mean_dy = (sums.narrow(0, 0, channels) / count).to(compute);
            Tensor mean_dy_xhat = (sums.narrow(0, channels, channels) / count).to(compute);
            Tensor scale = invstd_c;
            if (affine) scale = scale * saved_weight.unpack("SyncBatchNormBackward").to(compute);
            grad_input = (dy - mean_dy.view(cshape) - xhat * mean_dy_xhat.view(cshape)) * scale.view(cshape);
          }
          return {grad_input, grad_weight, grad_bias};
        });
  }
  return out;
}

SyncBatchNorm::SyncBatchNorm(int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                             bool track_running_stats, std::shared_ptr<ProcessGroup> group)
    : BatchNormBase("SyncBatchNorm", num_features, eps, momentum, affine, track_running_stats),
      group_(std::move(group)) {}

SyncBatchNorm::SyncBatchNorm(const nn::BatchNormBase& bn, std::shared_ptr<ProcessGroup> group)
    : BatchNormBase(bn), group_(std::move(group)) {}

std::shared_ptr<ProcessGroup> SyncBatchNorm::process_group() const {
  if (group_) return group_;
  return is_initialized() ? default_group() : nullptr;
}

void SyncBatchNorm::check_input_dim(const Tensor& input) const {
  EMBER_CHECK(input.dim() >= 2, "SyncBatchNorm: expected an input of at least 2 dims (N, C, ...), got shape "
                                    << shape_str(input.shape()));
}

Tensor SyncBatchNorm::normalize(const Tensor& input, bool use_batch_stats, double factor, const Tensor& counter) {
  if (!use_batch_stats) return BatchNormBase::normalize(input, false, factor, counter);
  // Eval without running statistics: each rank's batch alone, as PyTorch.
  std::shared_ptr<ProcessGroup> group = is_training() ? process_group() : nullptr;
  Tensor y =
      sync_batch_norm(input, weight, bias, is_training() ? running_mean : Tensor(), running_var, factor, eps, group);
  if (counter.defined()) {
    NoGradGuard no_grad;
    Tensor(counter).add_(1);
  }
  return y;
}

std::shared_ptr<nn::Module> SyncBatchNorm::clone() const {
  return clone_as<SyncBatchNorm>(num_features, eps, momentum, affine, track_running_stats, group_);
}

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<ProcessGroup> group) {
  EMBER_CHECK(module != nullptr, "convert_sync_batchnorm: the module is null");
  if (is_plain_batch_norm(*module)) {
    auto sync = std::make_shared<SyncBatchNorm>(dynamic_cast<const nn::BatchNormBase&>(*module), group);
    sync->train(module->is_training());
    return sync;
  }
  Replaced watched;
  convert_children(*module, "", group, watched);
  for (const auto& [what, old] : watched) {
    EMBER_CHECK(old.expired(), "convert_sync_batchnorm: '"
                                   << what
                                   << ") is still referenced outside the module tree after its replacement, "
                                      "most likely by a member of its parent that the parent's forward calls; that "
                                      "forward would keep normalizing without synchronization. Construct "
                                      "parallel::SyncBatchNorm in that module directly, or override its "
                                      "replace_module to update the member");
  }
  return module;
}

}  // namespace ember::parallel
