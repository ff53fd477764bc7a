// ember-train: trains an MLP or a CNN on Fashion-MNIST and reports the test
// accuracy. `ember-train --help` lists every flag with its default.
//
//   ember-train --model mlp --epochs 10                 (about 89-90% test accuracy)
//   ember-train --model cnn --epochs 20                 (93.03% on a 2-core CPU)
//
// Output: a progress bar on stderr while an epoch runs; on stdout, the run's
// setup, one line per epoch (train loss, train and test accuracy, time),
// and finally `test accuracy: 91.23%` on a line of its own. A run is
// deterministic for a --seed on the CPU: the same flags give the same
// numbers, and a run resumed from a checkpoint (--resume) continues with the
// numbers of a run that never stopped.
//
// Distributed (data-parallel) training on the CPU, started with ember-run:
//
//   ember-run --standalone --nproc-per-node 4 ember-train --device cpu --batch-size 16
//
// Every rank trains the model wrapped in DistributedDataParallel on its
// DistributedSampler share of the training set with --batch-size examples
// per step (PyTorch's convention: the global batch is 4 x 16 = 64 here, the
// same as one process with --batch-size 64), evaluates its share of the test
// set, and the counts are summed over the ranks; rank 0 alone prints the
// progress, the epoch lines and the final accuracy, and writes the CSV log
// and the checkpoints (which hold the plain model's state, so they resume
// in one process or in several). The ranks draw dropout and augmentation
// from generators seeded alike, so they use the same masks (as PyTorch's
// ranks do after the same manual_seed) and a resumed run continues exactly.
// A rank that dies or hangs makes the others fail after --dist-timeout with
// the process group's error; ember-run then stops the job.
//
// Exit status: 0 on success, 2 for a bad command line (an unknown flag, a
// bad value, a checkpoint of another configuration), 1 when training fails.
#include <chrono>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "ember/core/generator.h"
#include "ember/data/data_loader.h"
#include "ember/data/distributed_sampler.h"
#include "ember/data/mnist.h"
#include "ember/data/subset.h"
#include "ember/optim/optim.h"
#include "ember/parallel/amp/grad_scaler.h"
#include "ember/parallel/distributed/ddp/distributed_data_parallel.h"
#include "ember/parallel/distributed/ddp/sync_batch_norm.h"
#include "examples/common/run_main.h"
#include "examples/train/augment.h"
#include "examples/train/distributed.h"
#include "examples/train/epoch_log.h"
#include "examples/train/loop.h"
#include "examples/train/models.h"
#include "examples/train/options.h"
#include "examples/train/run_state.h"

namespace {

using namespace ember;
using namespace ember::train;

// The first `limit` examples of a split (all of them for 0).
std::shared_ptr<const data::Dataset> slice(std::shared_ptr<const data::Dataset> split, int64_t limit, const char* flag,
                                           const char* name) {
  if (limit == 0) return split;
  if (limit > split->size()) {
    throw UsageError(std::string(flag) + ": " + std::to_string(limit) + " is more than the " +
                     std::to_string(split->size()) + " " + name + " examples");
  }
  std::vector<int64_t> indices(static_cast<size_t>(limit));
  std::iota(indices.begin(), indices.end(), int64_t(0));
  return std::make_shared<data::Subset>(std::move(split), std::move(indices));
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Options& o, const TensorList& params) {
  switch (o.optimizer) {
    case OptimizerKind::SGD: {
      optim::SGDOptions sgd;
      sgd.lr = o.lr;
      sgd.momentum = o.momentum;
      sgd.weight_decay = o.weight_decay;
      return std::make_unique<optim::SGD>(params, sgd);
    }
    case OptimizerKind::Adam: {
      optim::AdamOptions adam;
      adam.lr = o.lr;
      adam.weight_decay = o.weight_decay;
      return std::make_unique<optim::Adam>(params, adam);
    }
    case OptimizerKind::AdamW: {
      optim::AdamWOptions adamw;
      adamw.lr = o.lr;
      adamw.weight_decay = o.weight_decay;
      return std::make_unique<optim::AdamW>(params, adamw);
    }
  }
  return nullptr;
}

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// Rank `rank`'s share of a split for evaluation: every world_size-th
// example from `rank` on (no padding, so that every example counts once).
std::shared_ptr<const data::Dataset> evaluation_share(std::shared_ptr<const data::Dataset> split, int rank,
                                                      int world_size) {
  if (world_size == 1) return split;
  std::vector<int64_t> indices;
  for (int64_t i = rank; i < split->size(); i += world_size) indices.push_back(i);
  return std::make_shared<data::Subset>(std::move(split), std::move(indices));
}

int run(const Options& o) {
  Distributed dist = start_distributed(o);
  const Device device = dist.device;
  manual_seed(o.seed);
  const data::Normalize normalize = data::kFashionMNISTNormalize;
  auto train_set =
      slice(std::make_shared<data::FashionMNIST>(o.data, true, normalize), o.limit_train, "--limit-train", "training");
  auto test_set =
      slice(std::make_shared<data::FashionMNIST>(o.data, false, normalize), o.limit_test, "--limit-test", "test");

  std::shared_ptr<nn::Sequential> model =
      o.model == ModelKind::MLP ? make_mlp({256, 128}, o.dropout) : make_cnn(o.dropout);
  if (o.sync_bn) parallel::convert_sync_batchnorm(model, dist.group);
  model->to(device);
  if (o.channels_last) model->to(MemoryFormat::ChannelsLast);
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(o, model->parameters());

  data::DataLoaderOptions loading;
  loading.batch_size = o.batch_size;
  loading.num_workers = o.workers;
  loading.device = device;
  data::DataLoader test_loader(evaluation_share(test_set, dist.rank, dist.world_size), loading);
  if (dist.enabled) {
    const data::DistributedSamplerOptions share{.shuffle = true, .seed = o.seed};
    loading.sampler = std::make_shared<data::DistributedSampler>(train_set->size(), dist.world_size, dist.rank, share);
  } else {
    loading.shuffle = true;
    loading.seed = o.seed;
  }
  data::DataLoader train_loader(train_set, loading);
  const int64_t steps_per_epoch = train_loader.size();
  std::unique_ptr<optim::LRScheduler> scheduler;
  if (o.schedule == Schedule::Cosine) {
    scheduler = std::make_unique<optim::CosineAnnealingLR>(*optimizer, o.epochs * steps_per_epoch);
  }

  // Dropout draws from the default generator of the training device.
  Generator& generator = default_generator(device);
  const RunFlags flags = {{"model", model_name(o.model)},          {"optimizer", optimizer_name(o.optimizer)},
                          {"schedule", schedule_name(o.schedule)}, {"dropout", format_number(o.dropout)},
                          {"augment", augment_name(o.augment)},    {"amp", amp_name(o.amp)}};
  // Mixed precision: autocast for both, dynamic loss scaling for float16.
  std::optional<amp::GradScaler> scaler;
  MixedPrecision mixed;
  if (o.amp != Amp::None) mixed.dtype = o.amp == Amp::FP16 ? DType::Float16 : DType::BFloat16;
  if (o.amp == Amp::FP16) mixed.scaler = &scaler.emplace();
  Augmentation augment;
  if (o.augment == Augment::Flip) augment = random_hflip;
  if (o.augment == Augment::FlipShift) augment = [](const Tensor& x) { return random_shift(random_hflip(x), 2); };
  RunPosition position;
  if (!o.resume.empty()) {
    position = load_run(o.resume, *model, *optimizer, scheduler.get(), generator, flags, mixed.scaler);
    train_loader.set_epoch(uint64_t(position.epoch));
  }
  // After the resume: DDP starts every rank from rank 0's parameters and buffers.
  std::shared_ptr<parallel::DistributedDataParallel> ddp;
  nn::UnaryModule* net = model.get();
  if (dist.enabled) {
    ddp = std::make_shared<parallel::DistributedDataParallel>(model, dist.group);
    net = ddp.get();
  }
  Reporting reporting;
  reporting.progress = dist.main();
  if (dist.enabled) reporting.sum = [&dist](std::vector<double>& values) { dist.sum(values); };

  int64_t num_params = 0;
  for (const Tensor& p : model->parameters()) num_params += p.numel();
  if (dist.main()) {
    std::printf(
        "ember-train: %s (%lld parameters, dropout %g, augment %s) on %s%s, amp %s; optimizer %s, lr %g, "
        "schedule %s; batch size %lld, epochs %lld; %lld training and %lld test examples\n",
        model_name(o.model), static_cast<long long>(num_params), o.dropout, augment_name(o.augment),
        device.str().c_str(), o.channels_last ? " (channels-last)" : "", amp_name(o.amp), optimizer_name(o.optimizer),
        o.lr, schedule_name(o.schedule), static_cast<long long>(o.batch_size), static_cast<long long>(o.epochs),
        static_cast<long long>(train_set->size()), static_cast<long long>(test_set->size()));
    if (dist.enabled) {
      std::printf("distributed: %d ranks (%s), batch size %lld per rank, %lld in all%s\n", dist.world_size,
                  dist.backend.c_str(), static_cast<long long>(o.batch_size),
                  static_cast<long long>(o.batch_size * dist.world_size),
                  o.model != ModelKind::CNN ? ""
                  : o.sync_bn               ? "; SyncBatchNorm"
                                            : "; BatchNorm statistics per rank");
    }
    if (!o.resume.empty()) {
      std::printf("resumed from %s after epoch %lld\n", o.resume.c_str(), static_cast<long long>(position.epoch));
    }
    std::fflush(stdout);
  }

  std::optional<EpochLog> log;
  if (!o.log.empty() && dist.main()) log.emplace(o.log, o.resume.empty() ? 0 : position.epoch);

  const int64_t last_epoch = o.stop_after > 0 ? o.stop_after : o.epochs;
  double test_acc = -1;
  for (int64_t epoch = position.epoch + 1; epoch <= last_epoch; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    const std::string label = "epoch " + std::to_string(epoch) + "/" + std::to_string(o.epochs);
    const TrainStats train =
        train_epoch(*net, train_loader, *optimizer, scheduler.get(), augment, label, mixed, reporting);
    test_acc = evaluate(*net, test_loader, label + " test", mixed.dtype, reporting);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    position.epoch = epoch;
    position.global_step += steps_per_epoch;

    if (!o.checkpoint.empty() && dist.main()) {
      save_run(o.checkpoint, *model, *optimizer, scheduler.get(), generator, flags, position, mixed.scaler);
    }
    if (log) log->write({epoch, train.loss, train.accuracy, test_acc, seconds, train.lr});
    if (dist.main()) {
      std::printf(
          "epoch %*lld/%lld  train loss %.4f  train acc %.2f%%  test acc %.2f%%  time %.1f s (%.0f "
          "samples/s)  lr %.3g\n",
          int(std::to_string(o.epochs).size()), static_cast<long long>(epoch), static_cast<long long>(o.epochs),
          train.loss, train.accuracy, test_acc, seconds, double(train.samples) / train.seconds, train.lr);
      if (mixed.scaler != nullptr) {
        std::printf("  amp scale %g, %lld skipped steps so far\n", mixed.scaler->get_scale(),
                    static_cast<long long>(mixed.scaler->skipped_steps()));
      }
      std::fflush(stdout);
    }
  }
  if (position.epoch < o.epochs && dist.main()) {
    std::printf("stopped after epoch %lld of %lld; continue with --resume %s\n", static_cast<long long>(position.epoch),
                static_cast<long long>(o.epochs), o.checkpoint.c_str());
  }
  // Resumed from a finished run: evaluate what it left.
  if (test_acc < 0) test_acc = evaluate(*net, test_loader, "test", mixed.dtype, reporting);
  if (dist.main()) std::printf("test accuracy: %.2f%%\n", test_acc);
  std::fflush(stdout);
  dist.finish();
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return examples::run_main("ember-train", argc, argv, parse_options, usage, run); }
