// ember-gpt's command line: every flag, its default, and the checks that
// turn a bad value into a usage error before any work starts.
//
// Contract:
// - parse_options(argc, argv) accepts "--flag value" and "--flag=value" and
//   returns the options, or throws UsageError for an unknown flag, a missing
//   or malformed value, or a value out of range, naming the flag, the value
//   and what is allowed. main() prints it with the usage text and exits 2.
// - "--help" sets help; nothing else is checked then.
// - Defaults that depend on other flags are resolved here: --device auto
//   becomes cuda:0 when a GPU is visible, else cpu; the preset defaults to
//   small on the CPU and gpt2 on a GPU, and gives the shape, batch size and
//   learning rate that --layers, --width, --heads, --context, --batch-size
//   and --lr do not set; --warmup defaults to a tenth of --steps, at most 100.
// - Paths are checked as far as they can be: --data must exist, --resume
//   must be readable, the directories of --log and --save must exist.
//   --stop-after needs --save and may not exceed --steps.
#pragma once

#include <cstdint>
#include <string>

#include "ember/core/device.h"
#include "examples/common/amp.h"
#include "examples/common/flags.h"

namespace ember::gpt {

using examples::Amp;
using examples::amp_name;
using examples::UsageError;

struct Options {
  Device device = kCPU;
  std::string preset;  // "small" or "gpt2"
  int64_t layers = 0, width = 0, heads = 0, context = 0;
  double dropout = 0;
  std::string data;  // empty: the fortunes corpus
  double val_fraction = 0.1;
  int64_t steps = 300;
  int64_t batch_size = 0;
  double lr = 0;
  double min_lr_ratio = 0.1;  // the cosine ends at lr * min_lr_ratio
  int64_t warmup = 0;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // 0: no clipping
  Amp amp = Amp::None;
  uint64_t seed = 0;
  int64_t eval_every = 50;
  int64_t eval_batches = 8;
  std::string log;     // empty: no CSV log
  std::string save;    // empty: no checkpoint
  std::string resume;  // empty: start from scratch
  int64_t stop_after = 0;
  int64_t sample = 300;  // tokens generated at the end
  double temperature = 0.8;
  int64_t top_k = 40;
  std::string prompt;
  bool help = false;
};

Options parse_options(int argc, const char* const* argv);

// The usage text: every flag with its default.
std::string usage();

}  // namespace ember::gpt
