// SyncBatchNorm: batch normalization whose batch statistics are those of
// the whole global batch, over the ranks of a process group, as
// torch.nn.SyncBatchNorm. With DistributedDataParallel each rank sees only
// its share of a batch; plain BatchNorm normalizes with that share's
// statistics, SyncBatchNorm with everyone's.
//
//   model = parallel::convert_sync_batchnorm(model);                  // every BatchNorm1d/2d in the tree
//   auto ddp = std::make_shared<parallel::DistributedDataParallel>(model);
//
// Contract:
// - Input (N, C, *) (any number of trailing dims, at least 2-D); output of
//   the same shape and dtype. Parameters and buffers, their defaults and
//   the momentum rule are BatchNorm's (ember/nn/batch_norm.h): weight (ones),
//   bias (zeros), running_mean, running_var, num_batches_tracked.
// - Training: per channel, each rank computes its count, mean and sum of
//   squared deviations from that mean (in float32 for 16-bit input), and
//   one all_reduce of 3C + 1 float64 numbers combines them exactly into the
//   global mean and biased variance, which normalize. Ranks may have
//   different batch sizes. The running statistics are updated with the
//   global mean and the unbiased global variance, identically on every
//   rank.
// - Backward: one all_reduce of the per-channel sums of dy and dy * xhat
//   (2C float64 numbers, skipped when the input needs no gradient) gives
//   the input's gradient through the global statistics; weight and bias get
//   this rank's own sums, which DDP then averages. The result equals
//   BatchNorm on the concatenated batch, with per-rank losses averaged as
//   DDP does. Double backward is an ember::Error.
// - Every rank must run the same SyncBatchNorm layers in the same order, in
//   forward and in backward (their collectives match by order); inside a
//   checkpoint the recomputation runs the forward's collective again.
// - Eval with running statistics: like BatchNorm, no communication. Eval
//   without them (track_running_stats = false) normalizes each rank's batch
//   alone, as PyTorch does.
// - The group: the one given, or else the default group once
//   init_process_group has run; without either (or in a group of one) the
//   layer is BatchNorm over this process's batch.
// - convert_sync_batchnorm(module, group) returns module with every
//   BatchNorm1d and BatchNorm2d in its tree replaced by a SyncBatchNorm that
//   holds the very same parameter and buffer tensors (an optimizer built
//   before keeps working), in place through Module::replace_module; a
//   module that is itself a BatchNorm comes back as its SyncBatchNorm. A
//   BatchNorm that its parent calls through a member of its own (not
//   through the registry, as Sequential and ModuleList do) would keep being
//   called unsynchronized: when the replaced layer is still referenced
//   outside the tree afterwards, that is an ember::Error naming it (build
//   such modules with SyncBatchNorm directly, or override replace_module).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "ember/nn/batch_norm.h"
#include "ember/nn/module.h"
#include "ember/parallel/distributed/process_group.h"

namespace ember::parallel {

class SyncBatchNorm : public nn::BatchNormBase {
 public:
  explicit SyncBatchNorm(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                         bool affine = true, bool track_running_stats = true,
                         std::shared_ptr<ProcessGroup> group = nullptr);
  // Shares bn's parameter and buffer tensors (convert_sync_batchnorm).
  SyncBatchNorm(const nn::BatchNormBase& bn, std::shared_ptr<ProcessGroup> group);

  std::shared_ptr<Module> clone() const override;
  // The group the next forward synchronizes over (null: this process only).
  std::shared_ptr<ProcessGroup> process_group() const;

 protected:
  void check_input_dim(const Tensor& input) const override;
  Tensor normalize(const Tensor& input, bool use_batch_stats, double factor, const Tensor& counter) override;

 private:
  std::shared_ptr<ProcessGroup> group_;
};

// The op of SyncBatchNorm's training forward (batch statistics over the
// group; null: this process only), for functional use: weight and bias (C)
// optional, running_mean and running_var (C) updated in place with
// `momentum` when given.
Tensor sync_batch_norm(const Tensor& input, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, double momentum, double eps,
                       const std::shared_ptr<ProcessGroup>& group);

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<ProcessGroup> group = nullptr);

}  // namespace ember::parallel
