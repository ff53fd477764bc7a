// ember-train's command line: every flag, its default, and the checks that
// turn a bad value into a usage error before any work starts.
//
// Contract:
// - parse_options(argc, argv) accepts "--flag value" and "--flag=value".
//   It returns the options, or throws UsageError for an unknown flag, a
//   missing or malformed value, or a value out of range; the message names
//   the flag, the value and what is allowed. main() prints it with the usage
//   text and exits with status 2.
// - "--help" sets help; nothing else is checked then.
// - Values that depend on others are resolved here: the learning rate and
//   weight decay defaults depend on the optimizer, the dropout and
//   augmentation defaults on the model, and "auto" becomes cuda:0 when a GPU is visible, else cpu.
//   A CUDA device that is not visible is a UsageError.
// - Paths are checked as far as they can be before training: --data must be
//   a directory, --resume a readable file, and the directories of --log and
//   --checkpoint must exist. --stop-after needs --checkpoint (or the run
//   could not be continued) and may not exceed --epochs. --sync-bn needs
//   the cnn (the mlp has no BatchNorm).
// - Whether a run is distributed is decided when it starts, from
//   --distributed and the launcher's variables (examples/train/distributed.h).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "ember/core/device.h"
#include "examples/common/amp.h"
#include "examples/common/flags.h"

namespace ember::train {

using examples::Amp;
using examples::amp_name;
using examples::UsageError;

enum class ModelKind { MLP, CNN };
enum class OptimizerKind { SGD, Adam, AdamW };
enum class Schedule { Cosine, None };
enum class Augment { Flip, FlipShift, None };

struct Options {
  ModelKind model = ModelKind::MLP;
  Device device = kCPU;
  int64_t epochs = 10;
  int64_t batch_size = 64;
  double lr = 1e-3;
  OptimizerKind optimizer = OptimizerKind::Adam;
  double momentum = 0.9;  // SGD only
  double weight_decay = 0;
  double dropout = 0;
  Schedule schedule = Schedule::Cosine;
  Augment augment = Augment::None;
  Amp amp = Amp::None;  // mixed precision: autocast (+ GradScaler for fp16)
  uint64_t seed = 0;
  std::string data;
  int64_t limit_train = 0;  // 0: the whole split
  int64_t limit_test = 0;
  int workers = 2;
  std::string log;           // empty: no CSV log
  std::string checkpoint;    // empty: no checkpoints
  std::string resume;        // empty: start from scratch
  int64_t stop_after = 0;    // 0: run to --epochs
  bool distributed = false;  // --distributed (also implied by a launcher's WORLD_SIZE > 1)
  std::chrono::milliseconds dist_timeout = std::chrono::minutes(30);
  bool sync_bn = false;        // cnn: SyncBatchNorm in a distributed run
  bool channels_last = false;  // cnn: weights (so activations) channels-last
  bool help = false;
};

Options parse_options(int argc, const char* const* argv);

// The usage text: every flag with its default.
std::string usage();

const char* model_name(ModelKind kind);
const char* optimizer_name(OptimizerKind kind);
const char* schedule_name(Schedule schedule);
const char* augment_name(Augment augment);

}  // namespace ember::train
