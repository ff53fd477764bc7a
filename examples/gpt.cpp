// ember-gpt: trains a GPT on text, byte by byte (vocabulary 256, so no
// tokenizer), and prints the validation loss and a sample of generated
// text. `ember-gpt --help` lists every flag with its default.
//
//   ember-gpt --device cpu --steps 300        the small model on the fortunes (Debian's package
//                                             fortunes), a few minutes on two cores
//   ember-gpt --device cuda --amp bf16        GPT-2 small's shape (12 layers, width 768, context 1024)
//   ember-gpt --data book.txt --save run.safetensors
//
// Output on stdout: the setup, `step S/N  train loss X  val loss Y  lr Z`
// at step 0, every --eval-every steps and at the end, then `sample:` and the
// generated text after the prompt. The progress bar (loss, tokens/s, ETA)
// goes to stderr. A run is deterministic for a --seed on the CPU, and a run
// resumed from its checkpoint (--save, then --resume) continues with the
// numbers of a run that never stopped: the batches come from their own
// generator, saved with the model, optimizer and schedule.
//
// Exit status: 0 on success, 2 for a bad command line (an unknown flag, a
// bad value, a missing corpus, a checkpoint of another shape), 1 when
// training fails.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/generator.h"
#include "ember/core/ops.h"
#include "examples/common/run_main.h"
#include "examples/gpt/corpus.h"
#include "examples/gpt/loop.h"
#include "examples/gpt/model.h"
#include "examples/gpt/options.h"
#include "examples/gpt/run_state.h"
#include "examples/train/progress.h"

namespace {

using namespace ember;
using namespace ember::gpt;

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// The CSV log: a header, then one line per evaluation; a resumed run appends.
class Log {
 public:
  Log(const std::string& path, bool append) : out_(path, append ? std::ios::app : std::ios::trunc) {
    if (!out_) throw UsageError("--log: cannot write '" + path + "'");
    if (!append) out_ << "step,train_loss,val_loss,lr,tokens_per_s,seconds\n";
  }
  void write(int64_t step, double train_loss, double val_loss, double lr, double tokens_per_s, double seconds) {
    char line[256];
    std::snprintf(line, sizeof line, "%lld,%.6f,%.6f,%.6g,%.1f,%.2f\n", static_cast<long long>(step), train_loss,
                  val_loss, lr, tokens_per_s, seconds);
    out_ << line << std::flush;
  }

 private:
  std::ofstream out_;
};

// Printable text for the terminal: bytes as they are, except control bytes
// other than newline and tab, which show as '?'.
std::string printable(const std::vector<int64_t>& tokens) {
  std::string s;
  for (int64_t t : tokens) {
    const char c = char(t);
    s += (t < 32 && c != '\n' && c != '\t') || t == 127 ? '?' : c;
  }
  return s;
}

int run(const Options& o) {
  const Device device = o.device;
  manual_seed(o.seed);
  const Corpus corpus = load_corpus(o.data, o.val_fraction);
  const std::vector<TokenBatch> val_set =
      evaluation_batches(corpus.val, o.batch_size, o.context, o.eval_batches, device);

  GptConfig config{.layers = o.layers, .width = o.width, .heads = o.heads, .context = o.context, .dropout = o.dropout};
  auto model = std::make_shared<Gpt>(config);  // GPT-2's initialization
  model->to(device);
  std::unique_ptr<optim::AdamW> optimizer = make_optimizer(*model, o.lr, o.weight_decay);
  optim::LambdaLR scheduler(*optimizer, warmup_cosine(o.warmup, o.steps, o.min_lr_ratio));
  std::optional<amp::GradScaler> scaler;
  Precision precision;
  if (o.amp != Amp::None) precision.dtype = o.amp == Amp::FP16 ? DType::Float16 : DType::BFloat16;
  if (o.amp == Amp::FP16) precision.scaler = &scaler.emplace();

  Generator data_generator(o.seed);  // the batches' offsets
  const RunState state{*model, *optimizer, scheduler, data_generator, default_generator(device), precision.scaler};
  const RunFlags flags = {{"layers", std::to_string(o.layers)},  {"width", std::to_string(o.width)},
                          {"heads", std::to_string(o.heads)},    {"context", std::to_string(o.context)},
                          {"dropout", format_number(o.dropout)}, {"amp", amp_name(o.amp)}};
  int64_t step = 0;
  if (!o.resume.empty()) step = load_run(o.resume, state, flags);

  int64_t num_params = 0;
  for (const Tensor& p : model->parameters()) num_params += p.numel();
  std::printf("ember-gpt: %s (%s, %lld parameters, head tied to the token embedding) on %s, amp %s\n", o.preset.c_str(),
              config.str().c_str(), static_cast<long long>(num_params), device.str().c_str(), amp_name(o.amp));
  std::printf("data: %s (%lld files): %zu training and %zu validation bytes\n", corpus.source.c_str(),
              static_cast<long long>(corpus.files), corpus.train.size(), corpus.val.size());
  std::printf("AdamW lr %g (warmup %lld steps, cosine to %g), weight decay %g, batch %lld x %lld tokens, %lld steps\n",
              o.lr, static_cast<long long>(o.warmup), o.lr * o.min_lr_ratio, o.weight_decay,
              static_cast<long long>(o.batch_size), static_cast<long long>(o.context), static_cast<long long>(o.steps));
  if (!o.resume.empty()) std::printf("resumed from %s at step %lld\n", o.resume.c_str(), static_cast<long long>(step));
  std::fflush(stdout);

  std::optional<Log> log;
  if (!o.log.empty()) log.emplace(o.log, !o.resume.empty());
  const int64_t last_step = o.stop_after > 0 ? o.stop_after : o.steps;
  const int64_t tokens_per_step = o.batch_size * o.context;
  const auto start = std::chrono::steady_clock::now();
  std::optional<train::Progress> bar;
  if (step < last_step) bar.emplace("train", last_step - step, train::Progress::Mode::Lines, "tokens");
  const int64_t first_step = step;
  Tensor window_loss;  // the losses since the last report, on the device
  int64_t window_steps = 0;
  double train_loss = -1;  // the mean over the last report's window

  // Prints (and logs, and saves) the validation loss at `step`.
  auto report = [&] {
    if (window_steps > 0) train_loss = window_loss.item<double>() / double(window_steps);
    window_loss = Tensor();
    window_steps = 0;
    const double val = validation_loss(*model, val_set, precision.dtype);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double rate = seconds > 0 ? double((step - first_step) * tokens_per_step) / seconds : 0.0;
    const double lr = optimizer->param_groups().front().lr();
    if (bar) bar->finish();
    std::printf("step %*lld/%lld  ", int(std::to_string(o.steps).size()), static_cast<long long>(step),
                static_cast<long long>(o.steps));
    if (train_loss >= 0) std::printf("train loss %.4f  ", train_loss);
    std::printf("val loss %.4f  lr %.3g  %.1f s\n", val, lr, seconds);
    std::fflush(stdout);
    // A resumed run's first line repeats the last one its checkpoint's run logged.
    if (log && !(step == first_step && !o.resume.empty())) log->write(step, train_loss, val, lr, rate, seconds);
    if (!o.save.empty() && step > first_step) save_run(o.save, state, flags, step);
  };

  report();
  while (step < last_step) {
    const Tensor loss = train_step(*model, random_batch(corpus.train, o.batch_size, o.context, device, data_generator),
                                   *optimizer, scheduler, o.grad_clip, precision);
    ++step;
    window_loss = window_loss.defined() ? window_loss + loss.to(DType::Float64) : loss.to(DType::Float64);
    ++window_steps;
    const int64_t done = step - first_step;
    if (bar->due(done)) bar->draw(done, done * tokens_per_step, window_loss.item<double>() / double(window_steps));
    if (step % o.eval_every == 0 || step == last_step) report();
  }
  if (bar) bar->finish();
  if (step < o.steps) {
    std::printf("stopped after step %lld of %lld; continue with --resume %s\n", static_cast<long long>(step),
                static_cast<long long>(o.steps), o.save.c_str());
  }

  if (o.sample > 0) {
    const std::string prompt = o.prompt.empty() ? "\n" : o.prompt;
    std::vector<int64_t> prompt_tokens;
    for (unsigned char c : prompt) prompt_tokens.push_back(c);
    Generator sample_generator(o.seed);
    const std::vector<int64_t> text =
        generate(*model, prompt_tokens, o.sample, {.temperature = o.temperature, .top_k = o.top_k}, sample_generator);
    std::printf("sample: %lld bytes, temperature %g, top-k %lld, after the prompt %s\n",
                static_cast<long long>(o.sample), o.temperature, static_cast<long long>(o.top_k),
                o.prompt.empty() ? "(a new line)" : ("'" + o.prompt + "'").c_str());
    std::printf("----\n%s%s\n----\n", o.prompt.c_str(), printable(text).c_str());
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // A corpus that cannot be read is the command line's fault, but needs no usage hint.
  auto run_reporting_corpus = [](const Options& options) {
    try {
      return run(options);
    } catch (const CorpusError& e) {
      std::fprintf(stderr, "ember-gpt: %s\n", e.what());
      return 2;
    }
  };
  return examples::run_main("ember-gpt", argc, argv, parse_options, usage, run_reporting_corpus);
}
