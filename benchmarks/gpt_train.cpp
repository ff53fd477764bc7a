// gpt_train: GPT-2 small's training step (ember-gpt's model,
// examples/gpt/model.h, at GptConfig::gpt2_small(): 12 layers, width 768,
// 12 heads, context 1024, vocab 50257, the head tied to the token
// embedding, GELU tanh, GPT-2's initialization; 124,439,808 parameters;
// the MLP's Linear, GELU and Linear run as one linear_gelu_linear) on
// random tokens, at each batch size, as a markdown table:
// ms/step, tokens/s, model FLOP/s, MFU and peak memory.
// benchmarks/gpt_train_torch.py prints the same table for PyTorch eager and
// torch.compile.
//
// The step: the forward and the loss under amp::autocast(bfloat16), zero_grad,
// backward, and AdamW (lr 6e-4, weight decay 0.1, betas 0.9 and 0.95; ember's
// optimizers update every parameter of a device and dtype in one fused
// multi-tensor kernel call). Attention is nn::functional::
// scaled_dot_product_attention(is_causal) on (B, heads, T, head dim) views.
// Each batch size gets a fresh model and optimizer; one that runs out of
// device memory (ember::OutOfMemoryError) reads "OOM", and the next is tried.
//
// Modes (--modes, a list; the table's system column): `ember eager`, each op
// launched as it is called; `ember graph`, one step run eagerly (optimizer
// state, kept weight casts, cuBLAS's first use), then the same whole step
// captured once in a cuda::Graph (ember/core/cuda/graph.h) and replayed on
// the same token tensors: the step's host work paid once. Default: both on
// CUDA, eager on the CPU (graphs are CUDA's). A step that cannot be
// captured reads "capture failed: " and the error, which names the op.
//
// Figures, per batch B of T = --context tokens:
//   ms/step      median of --steps steps after --warmup steps (bench::
//                time_steps: CUDA events, waiting for each step's end)
//   tokens/s     B T / step time
//   TFLOP/s      FLOPs per token x tokens/s, with llm.c's count:
//                6 N + 6 L C T FLOPs per token (N every parameter counted
//                once: the tied head with the token embedding, the position
//                embedding included; L layers, C width; 6 L C T is causal
//                attention's two matmuls, forward and backward)
//   MFU          TFLOP/s / the bf16 matrix rate measured in the same run: a
//                --gemm cubed bfloat16 ember::matmul (8192 on CUDA, 512 on
//                the CPU), 2 n^3 FLOPs, median of 10 after 3 warm-ups
//   peak GiB     cuda::max_memory_allocated over the timed steps (the
//                caching allocator's peak, reset after the warm-up); "-" on
//                the CPU
//
//   gpt_train [--batches 8,16,32,64] [--context 1024] [--steps 20] [--warmup 5]
//             [--layers 12] [--width 768] [--heads 12] [--vocab 50257]
//             [--gemm N] [--modes eager,graph] [--device cpu|cuda]
#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "ember/ember.h"
#include "ember/optim/optim.h"
#include "examples/gpt/model.h"
#if EMBER_WITH_CUDA
#include "ember/core/cuda/caching_allocator.h"
#include "ember/core/cuda/device.h"
#endif

namespace {

using namespace ember;

struct Options {
  gpt::GptConfig config = gpt::GptConfig::gpt2_small();
  std::vector<int64_t> batches;
  int steps = 20, warmup = 5;
  int64_t gemm = 8192;
  Device device = kCPU;
  std::vector<std::string> modes;  // "eager", "graph"
};

// One batch size's figures; peak_gib < 0 where no peak is measured (CPU).
struct Measured {
  double ms = 0, peak_gib = -1;
};

// Thrown by measure() when the step cannot be captured in a graph; the row
// then reads "capture failed: " and the message instead of figures.
struct CaptureFailed {
  std::string message;
};

// The model's parameters, each once (the tied head is the token embedding).
int64_t parameter_count(const gpt::GptConfig& config) {
  nn::init::SkipInitGuard shapes_only;
  int64_t n = 0;
  for (const Tensor& p : std::make_shared<gpt::Gpt>(config)->parameters()) n += p.numel();
  return n;
}

// The TFLOP/s of an n x n x n bfloat16 matmul.
double gemm_tflops(int64_t n, Device device) {
  NoGradGuard no_grad;
  const Tensor a = randn({n, n}, DType::Float32, device).to(DType::BFloat16);
  const Tensor b = randn({n, n}, DType::Float32, device).to(DType::BFloat16);
  const double ms = bench::median(bench::time_steps(device, 3, 10, [&] { (void)matmul(a, b); }));
  return 2.0 * double(n) * double(n) * double(n) / (ms * 1e-3) / 1e12;
}

// Runs `step` once eagerly, captures it in `graph` and returns the replay;
// CaptureFailed when some op of the step cannot be captured.
std::function<void()> capture(const std::function<void()>& step, Device device, std::optional<cuda::Graph>& graph) {
  step();
  graph.emplace(device.index);
  try {
    graph->capture(step);
  } catch (const OutOfMemoryError&) {
    throw;
  } catch (const Error& e) {
    throw CaptureFailed{e.what()};
  }
  return [&graph] { graph->replay(); };
}

Measured measure(const Options& o, int64_t batch, bool graph_mode) {
  manual_seed(0);
  auto model = std::make_shared<gpt::Gpt>(o.config);
  model->to(o.device);
  optim::AdamW opt(model->parameters(), {.lr = 6e-4, .betas = {0.9, 0.95}, .weight_decay = 0.1});
  const Tensor ids = randint(0, o.config.vocab, {batch, o.config.context}, DType::Int64, o.device);
  const Tensor next = randint(0, o.config.vocab, {batch, o.config.context}, DType::Int64, o.device);
  const std::function<void()> step = [&] {
    Tensor loss;
    {
      amp::autocast autocast(o.device.type, DType::BFloat16);
      loss = gpt::Gpt::loss(model->forward(ids), next);
    }
    opt.zero_grad();
    loss.backward();
    opt.step();
  };
  std::optional<cuda::Graph> graph;  // declared after what its replays read, so it goes first
  const std::function<void()> timed = graph_mode ? capture(step, o.device, graph) : step;
  bench::time_steps(o.device, o.warmup, 0, timed);
#if EMBER_WITH_CUDA
  if (o.device.is_cuda()) cuda::reset_peak_memory_stats(o.device.index);
#endif
  Measured m;
  m.ms = bench::median(bench::time_steps(o.device, 0, o.steps, timed));
#if EMBER_WITH_CUDA
  if (o.device.is_cuda()) m.peak_gib = double(cuda::max_memory_allocated(o.device.index)) / double(1 << 30);
#endif
  return m;
}

// A message as one table cell: one line, no column bar.
std::string as_cell(std::string text) {
  for (char& c : text) {
    if (c == '\n') c = ' ';
    if (c == '|') c = '/';
  }
  return text;
}

Options parse(int argc, char** argv) {
  bench::Flags flags(argc, argv,
                     "gpt_train [--batches 8,16,32,64] [--context N] [--steps N] [--warmup N] [--layers N] "
                     "[--width N] [--heads N] [--vocab N] [--gemm N] [--modes eager,graph] [--device cpu|cuda]");
  Options o;
  o.device = flags.device();
  o.batches = flags.counts("--batches", {8, 16, 32, 64}, 1 << 20);
  o.config.context = flags.count("--context", o.config.context, 1 << 20);
  o.steps = int(flags.count("--steps", o.steps, 100000));
  o.warmup = int(flags.count("--warmup", o.warmup, 100000));
  o.config.layers = flags.count("--layers", o.config.layers, 1000);
  o.config.width = flags.count("--width", o.config.width, 1 << 16);
  o.config.heads = flags.count("--heads", o.config.heads, 1 << 10);
  o.config.vocab = flags.count("--vocab", o.config.vocab, 1 << 24);
  o.gemm = flags.count("--gemm", o.device.is_cuda() ? 8192 : 512, 1 << 16);
  o.modes = flags.list(
      "--modes", o.device.is_cuda() ? std::vector<std::string>{"eager", "graph"} : std::vector<std::string>{"eager"},
      {"eager", "graph"});
  if (!o.device.is_cuda() && std::find(o.modes.begin(), o.modes.end(), "graph") != o.modes.end())
    flags.fail("--modes graph captures CUDA graphs, so it needs --device cuda");
  if (o.config.width % o.config.heads != 0)
    flags.fail("--width " + std::to_string(o.config.width) + " must be a multiple of --heads " +
               std::to_string(o.config.heads));
  flags.finish();
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  const gpt::GptConfig& s = o.config;
  const int64_t n = parameter_count(s);
  const double flops_per_token = 6.0 * double(n) + 6.0 * double(s.layers * s.width * s.context);
  const double peak_tflops = gemm_tflops(o.gemm, o.device);
  const bool graphs = std::find(o.modes.begin(), o.modes.end(), "graph") != o.modes.end();
  const std::string graph_note = graphs ? "; ember graph: one step run eagerly, then the step captured once in a "
                                          "cuda::Graph and replayed (warm-up and timed steps are replays)"
                                        : "";

  std::printf(
      "ember gpt_train: GPT of %s, GPT-2 style (head tied to the token embedding, GELU tanh, GPT-2's initialization), "
      "%lld parameters; random tokens; "
      "bf16 autocast; AdamW lr 6e-4, weight decay 0.1, betas 0.9/0.95 (one fused multi-tensor step); "
      "median of %d steps after %d warm-up steps, on %s%s\n\n",
      s.str().c_str(), static_cast<long long>(n), o.steps, o.warmup, bench::timing_description(o.device).c_str(),
      graph_note.c_str());
  std::printf(
      "FLOPs per token: 6 N + 6 L C T = %.4g (llm.c's convention: N = every parameter counted once, the tied "
      "head with the token embedding, position embedding included)\n",
      flops_per_token);
  std::printf(
      "bf16 matrix rate: %.1f TFLOP/s (ember::matmul %lldx%lldx%lld bfloat16, the same run); MFU is "
      "model FLOP/s over it\n\n",
      peak_tflops, static_cast<long long>(o.gemm), static_cast<long long>(o.gemm), static_cast<long long>(o.gemm));
  std::printf("| system | batch | ms/step | tokens/s | TFLOP/s | MFU | peak GiB |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|\n");
  std::fflush(stdout);
  bool failed = false;
  for (const int64_t batch : o.batches) {
    for (const std::string& mode : o.modes) {
      const std::string what = mode + " batch " + std::to_string(batch);
      std::string cells;
      try {
        cells = bench::cells_or_error(what, 4, failed, [&] {
          const Measured m = measure(o, batch, mode == "graph");
          const double tokens_per_s = double(batch * s.context) / (m.ms * 1e-3);
          const double tflops = flops_per_token * tokens_per_s / 1e12;
          const std::string peak = m.peak_gib < 0 ? "-" : bench::format("%.2f", m.peak_gib);
          return bench::format(" | %.2f | %.0f | %.1f | %.1f%% | %s", m.ms, tokens_per_s, tflops,
                               100.0 * tflops / peak_tflops, peak.c_str());
        });
      } catch (const CaptureFailed& e) {
        cells = " | capture failed: " + as_cell(e.message) + " | | | |";
        failed = true;
        std::fprintf(stderr, "%s: %s\n", what.c_str(), e.message.c_str());
      }
      std::printf("| ember %s | %lld%s |\n", mode.c_str(), static_cast<long long>(batch), cells.c_str());
      std::fflush(stdout);
    }
  }
  return failed ? 1 : 0;
}
