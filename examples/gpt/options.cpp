// ember-gpt's flags: the table of flags, value parsing and range checks.
#include "examples/gpt/options.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <optional>
#include <sstream>
#include <vector>

#include "ember/core/cuda/device.h"
#include "ember/core/error.h"
#include "examples/gpt/corpus.h"

namespace ember::gpt {
namespace {

// The shape and training defaults of a preset.
struct Preset {
  const char* name;
  int64_t layers, width, heads, context, batch_size;
  double lr;
};
constexpr Preset kSmall = {"small", 4, 128, 4, 128, 32, 4e-3};  // trains in minutes on two CPU cores
constexpr Preset kGpt2 = {"gpt2", 12, 768, 12, 1024, 8, 6e-4};  // GPT-2 small's shape, for a GPU
constexpr int64_t kMaxWarmup = 100;

// What the command line said, before defaults that depend on other flags.
struct Raw {
  Options options;
  std::string device = "auto";
  std::optional<std::string> preset;
  std::optional<int64_t> layers, width, heads, context, batch_size, warmup;
  std::optional<double> lr;
};

using Flag = examples::Flag<Raw>;
using Setter = decltype(Flag::set);
using examples::bad_value;
using examples::check_directory_of;
using examples::parse_integer;
using examples::parse_number;
using examples::resolve_device;

// Setters for the common kinds of value.
Setter integer(std::optional<int64_t> Raw::*field, int64_t min, int64_t max) {
  return [=](Raw& r, const std::string& f, const std::string& v) { r.*field = parse_integer<int64_t>(f, v, min, max); };
}
Setter integer(int64_t Options::*field, int64_t min, int64_t max) {
  return [=](Raw& r, const std::string& f, const std::string& v) {
    r.options.*field = parse_integer<int64_t>(f, v, min, max);
  };
}
Setter number(double Options::*field, double min, bool min_exclusive, double max) {
  return [=](Raw& r, const std::string& f, const std::string& v) {
    r.options.*field = parse_number(f, v, min, min_exclusive, max);
  };
}
Setter text(std::string Options::*field) {
  return [=](Raw& r, const std::string&, const std::string& v) { r.options.*field = v; };
}

std::string preset_text(const Preset& p) {
  std::ostringstream s;
  s << p.name << " (" << p.layers << " layers, width " << p.width << ", " << p.heads << " heads, context " << p.context
    << ", batch " << p.batch_size << ", lr " << p.lr << ")";
  return s.str();
}

const std::vector<Flag>& flags() {
  static const std::vector<Flag> table = {
      examples::device_flag<Raw>(),
      {"--preset", "small|gpt2",
       "the model's shape and the batch size and lr: " + preset_text(kSmall) + " or " + preset_text(kGpt2) +
           "; default small on the CPU, gpt2 on a GPU",
       [](Raw& r, const std::string& f, const std::string& v) {
         if (v != kSmall.name && v != kGpt2.name) bad_value(f, v, "expected one of small gpt2");
         r.preset = v;
       }},
      {"--layers", "N", "transformer blocks; default the preset's", integer(&Raw::layers, 1, 256)},
      {"--width", "N", "embedding width (a multiple of --heads); default the preset's", integer(&Raw::width, 1, 65536)},
      {"--heads", "N", "attention heads; default the preset's", integer(&Raw::heads, 1, 1024)},
      {"--context", "N", "tokens (bytes) per sequence; default the preset's", integer(&Raw::context, 1, 1 << 16)},
      {"--dropout", "P", "dropout on embeddings, attention and residual branches; default 0",
       number(&Options::dropout, 0, false, 0.95)},
      {"--data", "FILE|DIR",
       std::string("the text to train on (a file, or a directory of files); default the fortunes of Debian's "
                   "package fortunes, ") +
           kFortunesDir,
       text(&Options::data)},
      {"--val-fraction", "X", "the last X of each file is validation text; default 0.1",
       number(&Options::val_fraction, 0, true, 0.5)},
      {"--steps", "N", "optimizer steps of the run (the schedule spans them); default 300",
       integer(&Options::steps, 1, int64_t(1) << 40)},
      {"--batch-size", "N", "sequences per step; default the preset's", integer(&Raw::batch_size, 1, 1 << 20)},
      {"--lr", "X", "peak learning rate (AdamW, betas 0.9 0.95); default the preset's",
       [](Raw& r, const std::string& f, const std::string& v) { r.lr = parse_number(f, v, 0, true, 10); }},
      {"--min-lr-ratio", "X", "the cosine decays the lr to X times --lr at the last step; default 0.1",
       number(&Options::min_lr_ratio, 0, false, 1)},
      {"--warmup", "N", "steps of linear warmup before the cosine; default --steps / 10, at most 100",
       integer(&Raw::warmup, 0, int64_t(1) << 40)},
      {"--weight-decay", "X",
       "AdamW weight decay of the matrices and embeddings (not of biases and LayerNorms); "
       "default 0.1",
       number(&Options::weight_decay, 0, false, 1)},
      {"--grad-clip", "X", "clip the gradients' global norm to X (0: no clipping); default 1",
       number(&Options::grad_clip, 0, false, 1e6)},
      {"--amp", "fp16|bf16|none",
       "mixed precision: forward and loss under autocast in float16 (with dynamic loss scaling) or bfloat16; "
       "default none",
       [](Raw& r, const std::string& f, const std::string& v) { r.options.amp = examples::parse_amp(f, v); }},
      {"--seed", "N", "seed of the initialization, the batches, dropout and sampling; default 0",
       [](Raw& r, const std::string& f, const std::string& v) {
         r.options.seed = parse_integer<uint64_t>(f, v, 0, UINT64_MAX);
       }},
      {"--eval-every", "N", "print the validation loss every N steps (and at the start and the end); default 50",
       integer(&Options::eval_every, 1, int64_t(1) << 40)},
      {"--eval-batches", "N", "batches of the fixed validation set; default 8",
       integer(&Options::eval_batches, 1, 1 << 20)},
      {"--log", "FILE.csv", "write step,train_loss,val_loss,lr,tokens_per_s,seconds at every evaluation; default none",
       text(&Options::log)},
      {"--save", "FILE.safetensors",
       "save model, optimizer, schedule, step and RNG state at every evaluation and at the end (atomically); "
       "default none",
       text(&Options::save)},
      {"--resume", "FILE", "continue the run saved by --save from its step; default none", text(&Options::resume)},
      {"--stop-after", "N", "end this invocation after step N (continue later with --resume); default 0 (--steps)",
       integer(&Options::stop_after, 0, int64_t(1) << 40)},
      {"--sample", "N", "bytes of text to generate at the end (0: none); default 300",
       integer(&Options::sample, 0, 1 << 24)},
      {"--temperature", "X", "sampling temperature; default 0.8", number(&Options::temperature, 0, true, 100)},
      {"--top-k", "K", "sample from the K most likely bytes (0: all); default 40", integer(&Options::top_k, 0, 256)},
      {"--prompt", "TEXT", "the text the sample continues; default a new line (the start of a fortune)",
       text(&Options::prompt)},
      examples::help_flag<Raw>(),
  };
  return table;
}

Options finish(Raw raw) {
  Options o = raw.options;
  o.device = resolve_device(raw.device);
  const Preset& preset =
      raw.preset.value_or(o.device.is_cuda() ? kGpt2.name : kSmall.name) == kGpt2.name ? kGpt2 : kSmall;
  o.preset = preset.name;
  o.layers = raw.layers.value_or(preset.layers);
  o.width = raw.width.value_or(preset.width);
  o.heads = raw.heads.value_or(preset.heads);
  o.context = raw.context.value_or(preset.context);
  o.batch_size = raw.batch_size.value_or(preset.batch_size);
  o.lr = raw.lr.value_or(preset.lr);
  o.warmup = raw.warmup.value_or(std::min(kMaxWarmup, o.steps / 10));
  if (o.width % o.heads != 0) {
    throw UsageError("--width " + std::to_string(o.width) + " is not a multiple of --heads " + std::to_string(o.heads));
  }
  if (o.warmup >= o.steps) {
    throw UsageError("--warmup: " + std::to_string(o.warmup) + " steps leave none of the " + std::to_string(o.steps) +
                     " --steps for the cosine");
  }
  std::error_code ec;
  if (!o.data.empty() && !std::filesystem::exists(o.data, ec)) {
    throw UsageError("--data: '" + o.data + "' does not exist");
  }
  if (!o.log.empty()) check_directory_of("--log", o.log);
  examples::check_continuation("--save", o.save, o.resume, o.stop_after, "--steps", o.steps);
  return o;
}

}  // namespace

Options parse_options(int argc, const char* const* argv) {
  return examples::parse_command_line(argc, argv, flags(), finish);
}

std::string usage() {
  return examples::usage_text(
      "usage: ember-gpt [flags]\n"
      "Trains a GPT on text, byte by byte (vocabulary 256), and prints the validation loss and a sample.\n"
      "  ember-gpt --device cpu --steps 300       the small model on the fortunes, a few minutes on 2 cores\n"
      "  ember-gpt --device cuda --amp bf16       GPT-2 small's shape on a GPU\n\n",
      flags(), 6,
      "\nOutput: 'val loss X' lines on stdout (at step 0, every --eval-every steps and at the end), a progress bar\n"
      "on stderr, then a 'sample:' block of generated text.\n"
      "Exit status: 0 on success, 2 for a bad command line, 1 when training fails.\n");
}

}  // namespace ember::gpt
