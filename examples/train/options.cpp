// ember-train's flags: the table of flags, value parsing and range checks.
#include "examples/train/options.h"

#include <filesystem>
#include <optional>
#include <sstream>
#include <vector>

#include "ember/core/cuda/device.h"
#include "ember/core/error.h"
#include "ember/data/mnist.h"

namespace ember::train {
namespace {

constexpr double kAdamLr = 1e-3;
constexpr double kSgdLr = 0.05;
constexpr double kAdamWWeightDecay = 1e-2;
constexpr double kMlpDropout = 0.1;
constexpr double kCnnDropout = 0.25;
constexpr int kMaxWorkers = 64;

// What the command line said, before defaults that depend on other flags.
struct Raw {
  Options options;
  std::string device = "auto";
  std::optional<double> lr, weight_decay, dropout;
  std::optional<Augment> augment;
};

using Flag = examples::Flag<Raw>;
using examples::check_directory_of;
using examples::parse_choice;
using examples::parse_integer;
using examples::parse_number;
using examples::resolve_device;

std::string format_default(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      {"--model", "mlp|cnn", "the network: mlp (784-256-128-10) or cnn (two conv blocks); default mlp",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.model = parse_choice<ModelKind>(f, v, {{"mlp", ModelKind::MLP}, {"cnn", ModelKind::CNN}});
       }},
      examples::device_flag<Raw>(),
      {"--epochs", "N", "total epochs of the run (the schedule spans them); default 10",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.epochs = parse_integer<int64_t>(f, v, 1, 100000);
       }},
      {"--batch-size", "N",
       "examples per training step (and per evaluation batch), per rank when distributed "
       "(the global batch is N times the number of ranks); default 64",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.batch_size = parse_integer<int64_t>(f, v, 1, 1 << 20);
       }},
      {"--lr", "X",
       "peak learning rate; default " + format_default(kAdamLr) + " (adam, adamw), " + format_default(kSgdLr) +
           " (sgd)",
       [](Raw& r, const std::string& f, const std::string& v) { r.lr = parse_number(f, v, 0, true, 10); }},
      {"--optimizer", "sgd|adam|adamw", "sgd (with --momentum), adam or adamw; default adam",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.optimizer = parse_choice<OptimizerKind>(
             f, v, {{"sgd", OptimizerKind::SGD}, {"adam", OptimizerKind::Adam}, {"adamw", OptimizerKind::AdamW}});
       }},
      {"--momentum", "X", "SGD momentum; default 0.9",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.momentum = parse_number(f, v, 0, false, 0.999);
       }},
      {"--weight-decay", "X", "weight decay; default 0 (sgd, adam), " + format_default(kAdamWWeightDecay) + " (adamw)",
       [](Raw& r, const std::string& f, const std::string& v) { r.weight_decay = parse_number(f, v, 0, false, 1); }},
      {"--dropout", "P",
       "dropout probability; default " + format_default(kMlpDropout) + " (mlp), " + format_default(kCnnDropout) +
           " (cnn)",
       [](Raw& r, const std::string& f, const std::string& v) { r.dropout = parse_number(f, v, 0, false, 0.95); }},
      {"--schedule", "cosine|none",
       "learning-rate schedule, stepped every batch: cosine to 0 over the run, or "
       "constant; default cosine",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.schedule = parse_choice<Schedule>(f, v, {{"cosine", Schedule::Cosine}, {"none", Schedule::None}});
       }},
      {"--augment", "flip|flip+shift|none",
       "training-time augmentation: random horizontal flips of half the images, "
       "those and random shifts of up to 2 pixels, or none; default flip (cnn), "
       "none (mlp)",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.augment = parse_choice<Augment>(
             f, v, {{"flip", Augment::Flip}, {"flip+shift", Augment::FlipShift}, {"none", Augment::None}});
       }},
      {"--amp", "fp16|bf16|none",
       "mixed precision: the forward and the loss under autocast in float16 (with "
       "dynamic loss scaling) or bfloat16, on the training device; default none",
       [](Raw& r, const std::string& f, const std::string& v) { r.options.amp = examples::parse_amp(f, v); }},
      {"--seed", "N", "seed of the initialization, shuffling and dropout; default 0",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.seed = parse_integer<uint64_t>(f, v, 0, UINT64_MAX);
       }},
      {"--data", "DIR", std::string("the Fashion-MNIST files (IDX, .gz or not); default ") + data::kFashionMNISTRoot,
       [](Raw& r, const std::string&, const std::string& v) { r.options.data = v; }},
      {"--limit-train", "N", "train on the first N training examples only; default 0 (all 60000)",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.limit_train = parse_integer<int64_t>(f, v, 0, INT64_MAX);
       }},
      {"--limit-test", "N", "evaluate on the first N test examples only; default 0 (all 10000)",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.limit_test = parse_integer<int64_t>(f, v, 0, INT64_MAX);
       }},
      {"--workers", "N", "data-loader threads (0: load on the training thread); default 2",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.workers = parse_integer<int>(f, v, 0, kMaxWorkers);
       }},
      {"--log", "FILE.csv",
       "write epoch,train_loss,train_acc,test_acc,seconds,lr per epoch (accuracies in %); "
       "default none",
       [](Raw& r, const std::string&, const std::string& v) { r.options.log = v; }},
      {"--checkpoint", "FILE.safetensors",
       "save model, optimizer, schedule and RNG state after every epoch "
       "(atomically); default none",
       [](Raw& r, const std::string&, const std::string& v) { r.options.checkpoint = v; }},
      {"--resume", "FILE", "continue the run saved in a checkpoint from its next epoch; default none",
       [](Raw& r, const std::string&, const std::string& v) { r.options.resume = v; }},
      {"--stop-after", "N",
       "end this invocation after epoch N (continue later with --resume); default 0 "
       "(run to --epochs)",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.stop_after = parse_integer<int64_t>(f, v, 0, 100000);
       }},
      {"--distributed", nullptr,
       "train as one rank of a data-parallel run (DistributedDataParallel): join the "
       "process group that the launcher's variables describe (RANK, WORLD_SIZE, "
       "MASTER_ADDR, MASTER_PORT). Implied under ember-run (or torchrun --no-python, mpirun, srun) "
       "with more than one rank. Each rank trains on its share of the training set "
       "(DistributedSampler) and evaluates its share of the test set; rank 0 prints, logs "
       "and checkpoints. On the CPU through gloo; on CUDA through nccl, local rank k on "
       "cuda:k; default off",
       [](Raw& r, const std::string&, const std::string&) { r.options.distributed = true; }},
      {"--dist-timeout", "S",
       "distributed: seconds a collective may wait for the other ranks before the run fails "
       "(a rank that died or hangs); default 1800",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.dist_timeout = std::chrono::seconds(parse_integer<int64_t>(f, v, 1, 86400));
       }},
      {"--sync-bn", nullptr,
       "cnn, distributed: normalize with the batch statistics of all ranks (SyncBatchNorm) "
       "instead of each rank's own; default off",
       [](Raw& r, const std::string&, const std::string&) { r.options.sync_bn = true; }},
      {"--channels-last", nullptr,
       "cnn: lay out the weights channels-last (Module::to(MemoryFormat::ChannelsLast)): "
       "the convolutions run cuDNN's NHWC engines, and batch norm, ReLU and pooling "
       "keep the layout; default off (NCHW)",
       [](Raw& r, const std::string&, const std::string&) { r.options.channels_last = true; }},
      examples::help_flag<Raw>(),
  };
  return table;
}

Options finish(Raw raw) {
  Options o = raw.options;
  o.device = resolve_device(raw.device);
  const bool adam = o.optimizer != OptimizerKind::SGD;
  o.lr = raw.lr.value_or(adam ? kAdamLr : kSgdLr);
  o.weight_decay = raw.weight_decay.value_or(o.optimizer == OptimizerKind::AdamW ? kAdamWWeightDecay : 0.0);
  o.dropout = raw.dropout.value_or(o.model == ModelKind::MLP ? kMlpDropout : kCnnDropout);
  o.augment = raw.augment.value_or(o.model == ModelKind::MLP ? Augment::None : Augment::Flip);
  if (!o.log.empty()) check_directory_of("--log", o.log);
  examples::check_continuation("--checkpoint", o.checkpoint, o.resume, o.stop_after, "--epochs", o.epochs);
  if (o.sync_bn && o.model != ModelKind::CNN) throw UsageError("--sync-bn: the mlp has no BatchNorm; use --model cnn");
  if (o.channels_last && o.model != ModelKind::CNN) {
    throw UsageError("--channels-last: the mlp has no convolution; use --model cnn");
  }
  if (o.data.empty()) o.data = data::kFashionMNISTRoot;
  std::error_code ec;
  if (!std::filesystem::is_directory(o.data, ec)) {
    throw UsageError("--data: '" + o.data +
                     "' is not a directory; Fashion-MNIST comes with Debian's package "
                     "dataset-fashion-mnist (in " +
                     data::kFashionMNISTRoot + ")");
  }
  return o;
}

}  // namespace

Options parse_options(int argc, const char* const* argv) {
  return examples::parse_command_line(argc, argv, flags(), finish);
}

std::string usage() {
  return examples::usage_text(
      "usage: ember-train [flags]\n"
      "Trains an MLP or a CNN on Fashion-MNIST and reports the test accuracy.\n\n",
      flags(), 34, "\nExit status: 0 on success, 2 for a bad command line, 1 when training fails.\n");
}

const char* model_name(ModelKind kind) { return kind == ModelKind::MLP ? "mlp" : "cnn"; }

const char* optimizer_name(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::SGD: return "sgd";
    case OptimizerKind::Adam: return "adam";
    case OptimizerKind::AdamW: return "adamw";
  }
  return "?";
}

const char* schedule_name(Schedule schedule) { return schedule == Schedule::Cosine ? "cosine" : "none"; }

const char* augment_name(Augment augment) {
  switch (augment) {
    case Augment::Flip: return "flip";
    case Augment::FlipShift: return "flip+shift";
    case Augment::None: return "none";
  }
  return "none";
}

}  // namespace ember::train
