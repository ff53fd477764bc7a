// train_step: the time of one whole training step (forward, cross-entropy
// loss, zero_grad, backward, optimizer step) of ember-train's networks, in
// float32 and in mixed precision, as a markdown table.
// benchmarks/train_step_torch.py prints the same table for PyTorch eager on
// the same card.
//
// Rows:
//   mlp   Flatten, Linear 784-1024, ReLU, Linear 1024-1024, ReLU,
//         Linear 1024-10; SGD lr 0.01, momentum 0.9; batch 64, 256, 4096
//   cnn   examples/train/models.h's CNN (dropout 0.25); Adam lr 1e-3;
//         batch 64 (ember-train's), 256, 1024
// Precisions (--precision, a list): fp32; amp-fp16, the forward and the
// loss under amp::autocast(float16) with an amp::GradScaler; amp-bf16,
// autocast(bfloat16) without one. Default: all three on a GPU, fp32 on the
// CPU.
// Modes (--mode, a list): eager, each op launched as it is called; graph,
// the whole step captured once in a cuda::Graph after the warm-up and
// replayed (CUDA only). Default: both on a GPU. --model and --batch (lists)
// keep only some of the rows.
// Inputs are random (N, 1, 28, 28) images and labels made on the device once.
// --layout (a list: nchw, channels-last) lays out the CNN's weights and
// input (Module::to(MemoryFormat::ChannelsLast)): its convolutions then run
// cuDNN's NHWC engines without layout transposes, and batch norm, ReLU and
// pooling keep the layout; the MLP rows ignore it.
// --interleave R prints another table instead: each AMP precision against
// fp32, the two set up side by side and timed in R alternating rounds of
// --steps steps (which goes first alternates too), with the median of the
// rounds' AMP / fp32 ratios and their range; a host whose speed drifts
// between rounds moves both alike, as it does not in the one-after-the-
// other rows of the default table. --fp32-layout sets the layout of the
// fp32 side (default: the row's own), to set AMP in channels-last against
// fp32 in NCHW.
// --host-phases on prints another table instead (eager steps whatever
// --mode says; CUDA only; not with --interleave): each phase
// of a step (the forward and the loss, zero_grad, backward, the optimizer
// step with the scaler's) timed on the host and on the device (between
// events recorded at its ends), the median of --steps steps, each issued
// onto an idle device: where a host-bound step's time goes.
//
// Timing: on cuda:0 when a GPU is visible, the median over 100 steps (after
// 10 warm-up steps) of the time between CUDA events recorded before and
// after the step, waiting for the second event after each step, so a step
// that the host cannot issue as fast as the GPU runs it shows as such.
// Without a GPU, the median of 10 steps' wall time (std::chrono) after 2
// warm-up steps. `--device cpu` forces the CPU, `--steps N` sets the count.
//
// The last column is the number of cudaMalloc calls the caching allocator
// made during the timed steps (ember::cuda::num_device_allocs): it must be
// 0, since after warm-up every tensor of a step reuses cached memory.
#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "ember/ember.h"
#include "ember/optim/optim.h"
#include "examples/train/models.h"
#if EMBER_WITH_CUDA
#include "ember/core/cuda/caching_allocator.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/graph.h"
#endif

namespace {

using namespace ember;

struct Case {
  const char* model;      // "mlp" or "cnn"
  const char* optimizer;  // "sgd" or "adam"
  int64_t batch;
};

// "fp32", "amp-fp16" or "amp-bf16": the autocast dtype, if any.
std::optional<DType> autocast_dtype(const std::string& precision) {
  if (precision == "amp-fp16") return DType::Float16;
  if (precision == "amp-bf16") return DType::BFloat16;
  return std::nullopt;
}

struct Timing {
  double median_ms = 0;
  int64_t device_allocs = -1;  // -1: not on a GPU
};

std::shared_ptr<nn::Sequential> make_model(const Case& c) {
  return std::strcmp(c.model, "mlp") == 0 ? train::make_mlp({1024, 1024}, 0) : train::make_cnn(0.25);
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Case& c, const TensorList& params) {
  if (std::strcmp(c.optimizer, "sgd") == 0) {
    optim::SGDOptions sgd;
    sgd.lr = 0.01;
    sgd.momentum = 0.9;
    return std::make_unique<optim::SGD>(params, sgd);
  }
  return std::make_unique<optim::Adam>(params, optim::AdamOptions{});
}

bool picked(const std::vector<std::string>& from, const std::string& v) {
  return std::find(from.begin(), from.end(), v) != from.end();
}

// One case's model, optimizer, inputs and step, warmed up (and captured in
// a graph when graphed), ready to time.
struct Prepared {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::Optimizer> optimizer;
  Tensor input, target;
  std::optional<amp::GradScaler> scaler;
  std::function<Tensor()> forward;  // the forward and the loss (under autocast for AMP)
  std::function<void()> step;
#if EMBER_WITH_CUDA
  std::optional<cuda::Graph> graph;
#endif
  std::function<void()> timed;
};

// Whether the row runs channels-last: only the CNN has 4-D weights.
bool channels_last(const Case& c, const std::string& layout) {
  return layout == "channels-last" && std::strcmp(c.model, "cnn") == 0;
}

using bench::format;

// A row's cells after its leading ones, and whether its steps were clean (no
// cudaMalloc after warm-up).
struct Cells {
  std::string text;
  bool clean = true;
};

// Prints one table row: `lead` (its first cells, "| a | b"), then the cells
// `measure` returns (" | x | y"). When measure throws an ember::Error, the
// row reads "failed" followed by `blanks` empty cells and the error goes to
// stderr after `what`. Returns whether the row was measured and clean.
bool print_row(const std::string& lead, int blanks, const std::string& what, const std::function<Cells()>& measure) {
  bool ok = false;
  try {
    const Cells cells = measure();
    std::printf("%s%s |\n", lead.c_str(), cells.text.c_str());
    ok = cells.clean;
  } catch (const Error& e) {
    std::string empty;
    for (int i = 0; i < blanks; ++i) empty += " |";
    std::printf("%s | failed%s |\n", lead.c_str(), empty.c_str());
    std::fprintf(stderr, "%s: %s\n", what.c_str(), e.what());
  }
  std::fflush(stdout);
  return ok;
}

// A row's name in an error message: "cnn amp-fp16 eager batch 64".
std::string row_name(const Case& c, const std::string& precision, const std::string& mode) {
  return format("%s %s %s batch %lld", c.model, precision.c_str(), mode.c_str(), static_cast<long long>(c.batch));
}

// The cudaMalloc cell: the count, or n/a where none is counted (the CPU).
std::string allocs_cell(int64_t allocs) { return allocs < 0 ? "n/a" : std::to_string(allocs); }

// Calls f(case, precision, layout) for every row the flags keep: the cases
// of the models and batches picked, in each precision and layout (the MLP
// has one layout, nchw).
template <typename F>
void for_each_row(const std::vector<Case>& cases, const std::vector<std::string>& models,
                  const std::vector<std::string>& batches, const std::vector<std::string>& precisions,
                  const std::vector<std::string>& layouts, F&& f) {
  for (const Case& c : cases) {
    if (!picked(models, c.model) || !picked(batches, std::to_string(c.batch))) continue;
    for (const std::string& precision : precisions) {
      for (const std::string& layout : layouts) {
        if (layout != layouts.front() && !channels_last(c, layout)) continue;
        f(c, precision, channels_last(c, layout) ? layout : std::string("nchw"));
      }
    }
  }
}

std::unique_ptr<Prepared> prepare(const Case& c, const std::string& precision, const std::string& layout, bool graphed,
                                  Device device, int warmup) {
  manual_seed(0);
  auto p = std::make_unique<Prepared>();
  p->model = make_model(c);
  p->model->to(device);
  if (channels_last(c, layout)) p->model->to(MemoryFormat::ChannelsLast);
  p->optimizer = make_optimizer(c, p->model->parameters());
  p->input = randn({c.batch, 1, train::kImageSide, train::kImageSide}, DType::Float32, device);
  if (channels_last(c, layout)) p->input = p->input.to(MemoryFormat::ChannelsLast);
  p->target = randint(0, train::kClasses, {c.batch}, DType::Int64, device);
  const std::optional<DType> low = autocast_dtype(precision);
  if (low == DType::Float16) p->scaler.emplace();
  Prepared* r = p.get();
  p->forward = [r, low, device] {
    std::optional<amp::autocast> autocast;
    if (low) autocast.emplace(device.type, *low);
    return nn::functional::cross_entropy((*r->model)(r->input), r->target);
  };
  p->step = [r] {
    Tensor loss = r->forward();
    r->optimizer->zero_grad();
    bench::backward_and_step(loss, *r->optimizer, r->scaler ? &*r->scaler : nullptr);
  };
  for (int i = 0; i < warmup; ++i) p->step();
  p->timed = p->step;
  if (graphed) {
#if EMBER_WITH_CUDA
    EMBER_CHECK(device.is_cuda(), "train_step: --mode graph needs a CUDA device");
    p->graph.emplace(device.index);
    p->graph->capture(p->step);
    p->timed = [r] { r->graph->replay(); };
#else
    EMBER_CHECK(false, "train_step: --mode graph needs CUDA");
#endif
  }
  return p;
}

uint64_t device_allocs(Device device) {
#if EMBER_WITH_CUDA
  // cudaMalloc happens on the host, inside step(): no need to synchronize.
  if (device.is_cuda()) return cuda::num_device_allocs(device.index);
#endif
  (void)device;
  return 0;
}

Timing time_case(const Case& c, const std::string& precision, const std::string& layout, bool graphed, Device device,
                 int warmup, int steps) {
  const std::unique_ptr<Prepared> p = prepare(c, precision, layout, graphed, device, warmup);
  Timing t;
  const uint64_t allocs_before = device_allocs(device);
  t.median_ms = bench::median(bench::time_steps(device, 1, steps, p->timed));
  if (device.is_cuda()) t.device_allocs = int64_t(device_allocs(device) - allocs_before);
  return t;
}

// AMP against fp32 in alternating rounds of `steps` steps each, so that a
// host whose speed drifts from one minute to the next moves both alike.
struct Interleaved {
  double fp32_ms = 0, amp_ms = 0;                  // medians over every round's steps
  double ratio = 0, ratio_min = 0, ratio_max = 0;  // amp / fp32, per round: median and range
  int64_t device_allocs = -1;
};

Interleaved interleave(const Case& c, const std::string& precision, const std::string& layout,
                       const std::string& fp32_layout, bool graphed, Device device, int warmup, int steps, int rounds) {
  const std::unique_ptr<Prepared> base = prepare(c, "fp32", fp32_layout, graphed, device, warmup);
  const std::unique_ptr<Prepared> amp = prepare(c, precision, layout, graphed, device, warmup);
  // Untimed rounds in both orders first, so the allocator's cache holds
  // what either interleaving needs.
  for (int r = 0; r < 2; ++r) {
    for (int i = 0; i < warmup; ++i) (r == 0 ? base : amp)->timed();
    for (int i = 0; i < warmup; ++i) (r == 0 ? amp : base)->timed();
  }
  std::vector<double> all_base, all_amp, ratios;
  const uint64_t allocs_before = device_allocs(device);
  for (int r = 0; r < rounds; ++r) {
    // Which goes first alternates too.
    const bool amp_first = r % 2 == 1;
    std::vector<double> b, a;
    if (amp_first) a = bench::time_steps(device, 1, steps, amp->timed);
    b = bench::time_steps(device, 1, steps, base->timed);
    if (!amp_first) a = bench::time_steps(device, 1, steps, amp->timed);
    ratios.push_back(bench::median(a) / bench::median(b));
    all_base.insert(all_base.end(), b.begin(), b.end());
    all_amp.insert(all_amp.end(), a.begin(), a.end());
  }
  Interleaved out;
  if (device.is_cuda()) out.device_allocs = int64_t(device_allocs(device) - allocs_before);
  out.fp32_ms = bench::median(all_base);
  out.amp_ms = bench::median(all_amp);
  out.ratio = bench::median(ratios);
  out.ratio_min = *std::min_element(ratios.begin(), ratios.end());
  out.ratio_max = *std::max_element(ratios.begin(), ratios.end());
  return out;
}

// The microseconds of each phase of an eager step (--host-phases): on the
// host, and on the device from the event recorded at its start to the
// event recorded at its end (the device's span waits for the host's issue
// where the host is slower, and exceeds it where the device is).
struct Phase {
  double host = 0, device = 0;
};
struct HostPhases {
  Phase forward, zero_grad, backward, step, total;
};

HostPhases host_phases(const Case& c, const std::string& precision, const std::string& layout, Device device,
                       int warmup, int steps) {
  HostPhases out;
#if EMBER_WITH_CUDA
  const std::unique_ptr<Prepared> p = prepare(c, precision, layout, /*graphed=*/false, device, warmup);
  amp::GradScaler* scaler = p->scaler ? &*p->scaler : nullptr;
  using Clock = std::chrono::steady_clock;
  const cuda::Stream stream = cuda::current_stream(device.index);
  constexpr int kMarks = 5;  // before the forward, after it, zero_grad, backward and the step
  std::vector<double> host[kMarks], gpu[kMarks];
  // Made (at their first record) before the timing: a record is then only cudaEventRecord.
  std::array<cuda::Event, kMarks> marks{cuda::Event(true), cuda::Event(true), cuda::Event(true), cuda::Event(true),
                                        cuda::Event(true)};
  for (cuda::Event& e : marks) e.record(stream);
  for (int i = 0; i < steps; ++i) {
    cuda::synchronize(device.index);
    std::array<Clock::time_point, kMarks> at;
    auto mark = [&](int k) {
      marks[size_t(k)].record(stream);
      at[size_t(k)] = Clock::now();
    };
    mark(0);
    Tensor loss = p->forward();
    mark(1);
    p->optimizer->zero_grad();
    mark(2);
    bench::backward(loss, scaler);
    mark(3);
    bench::step(*p->optimizer, scaler);
    mark(4);
    marks[kMarks - 1].synchronize();
    for (int k = 1; k < kMarks; ++k) {
      host[k].push_back(std::chrono::duration<double, std::micro>(at[size_t(k)] - at[size_t(k - 1)]).count());
      gpu[k].push_back(1e3 * double(marks[size_t(k - 1)].elapsed_time(marks[size_t(k)])));
    }
    host[0].push_back(std::chrono::duration<double, std::micro>(at[kMarks - 1] - at[0]).count());
    gpu[0].push_back(1e3 * double(marks[0].elapsed_time(marks[kMarks - 1])));
  }
  auto phase = [&](int k) { return Phase{bench::median(host[k]), bench::median(gpu[k])}; };
  out = {phase(1), phase(2), phase(3), phase(4), phase(0)};
#else
  (void)c, (void)precision, (void)layout, (void)device, (void)warmup, (void)steps;
#endif
  return out;
}

int print_host_phases(const std::vector<Case>& cases, const std::vector<std::string>& precisions,
                      const std::vector<std::string>& models, const std::vector<std::string>& batches,
                      const std::vector<std::string>& layouts, Device device, int warmup, int steps,
                      const std::string& where) {
  std::printf(
      "ember train_step --host-phases: each phase of an eager step, host us / device us (the device's span "
      "between events recorded at the phase's ends), median of %d steps (after %d warm-up steps), each "
      "issued onto an idle device, on %s\n\n",
      steps, warmup, where.c_str());
  std::printf(
      "| model | optimizer | precision | layout | batch | forward + loss | zero_grad | backward | "
      "optimizer step | whole step |\n");
  std::printf("|---|---|---|---|---:|---:|---:|---:|---:|---:|\n");
  int status = 0;
  for_each_row(cases, models, batches, precisions, layouts,
               [&](const Case& c, const std::string& precision, const std::string& layout) {
                 const auto batch = static_cast<long long>(c.batch);
                 const std::string lead = format("| %s | %s | %s | %s | %lld", c.model, c.optimizer, precision.c_str(),
                                                 layout.c_str(), batch);
                 const std::string what = format("%s %s batch %lld", c.model, precision.c_str(), batch);
                 const bool ok = print_row(lead, 4, what, [&] {
                   const HostPhases h = host_phases(c, precision, layout, device, warmup, steps);
                   Cells cells;
                   for (const Phase& ph : {h.forward, h.zero_grad, h.backward, h.step, h.total}) {
                     cells.text += format(" | %.1f / %.1f", ph.host, ph.device);
                   }
                   return cells;
                 });
                 if (!ok) status = 1;
               });
  return status;
}

// The --interleave table: each AMP precision against fp32, case by case.
int print_interleaved(const std::vector<Case>& cases, const std::vector<std::string>& precisions,
                      const std::vector<std::string>& modes, const std::vector<std::string>& models,
                      const std::vector<std::string>& batches, const std::vector<std::string>& layouts,
                      const std::string& fp32_layout, Device device, int warmup, int steps, int rounds,
                      const std::string& where) {
  std::printf(
      "ember train_step --interleave: AMP against fp32 in %d alternating rounds of %d steps each "
      "(after %d warm-up steps each), on %s\n\n",
      rounds, steps, warmup, where.c_str());
  std::printf(
      "| model | optimizer | precision | layout (fp32's) | mode | batch | fp32 ms/step | AMP ms/step | AMP / "
      "fp32, median of rounds | min | max | cudaMalloc calls |\n");
  std::printf("|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
  int status = 0;
  for_each_row(cases, models, batches, precisions, layouts,
               [&](const Case& c, const std::string& precision, const std::string& layout) {
                 if (precision == "fp32") return;
                 const std::string base_layout = fp32_layout.empty()             ? layout
                                                 : channels_last(c, fp32_layout) ? fp32_layout
                                                                                 : "nchw";
                 const std::string layouts_str = layout + " (" + base_layout + ")";
                 for (const std::string& mode : modes) {
                   const auto batch = static_cast<long long>(c.batch);
                   const std::string lead = format("| %s | %s | %s | %s | %s | %lld", c.model, c.optimizer,
                                                   precision.c_str(), layouts_str.c_str(), mode.c_str(), batch);
                   const bool ok = print_row(lead, 5, row_name(c, precision, mode), [&] {
                     const Interleaved t =
                         interleave(c, precision, layout, base_layout, mode == "graph", device, warmup, steps, rounds);
                     return Cells{format(" | %.3f | %.3f | %.3f | %.3f | %.3f | %s", t.fp32_ms, t.amp_ms, t.ratio,
                                         t.ratio_min, t.ratio_max, allocs_cell(t.device_allocs).c_str()),
                                  t.device_allocs <= 0};
                   });
                   if (!ok) status = 1;
                 }
               });
  if (status != 0) std::printf("\nFAILED: a step failed or called cudaMalloc after warm-up (see above)\n");
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(argc, argv,
                     "train_step [--device cpu|cuda] [--steps N] [--precision fp32,amp-fp16,amp-bf16] "
                     "[--mode eager,graph] [--model mlp,cnn] [--batch 64,256,...] [--layout nchw,channels-last] "
                     "[--interleave ROUNDS [--fp32-layout nchw|channels-last] | --host-phases on]");
  const Device device = flags.device();
  const bool use_gpu = device.is_cuda();
  const int warmup = use_gpu ? 10 : 2;
  const int steps = int(flags.count("--steps", use_gpu ? 100 : 10, 100000));
  const std::vector<std::string> precisions =
      flags.list("--precision",
                 use_gpu ? std::vector<std::string>{"fp32", "amp-fp16", "amp-bf16"} : std::vector<std::string>{"fp32"},
                 {"fp32", "amp-fp16", "amp-bf16"});
  const std::vector<std::string> modes =
      flags.list("--mode", use_gpu ? std::vector<std::string>{"eager", "graph"} : std::vector<std::string>{"eager"},
                 {"eager", "graph"});
  const std::vector<std::string> models = flags.list("--model", {"mlp", "cnn"}, {"mlp", "cnn"});
  const std::vector<std::string> batches =
      flags.list("--batch", {"64", "256", "1024", "4096"}, {"64", "256", "1024", "4096"});
  const std::vector<std::string> layouts = flags.list("--layout", {"nchw"}, {"nchw", "channels-last"});
  const std::vector<std::string> fp32_layouts = flags.list("--fp32-layout", {}, {"nchw", "channels-last"});
  EMBER_CHECK(fp32_layouts.size() <= 1, "train_step: --fp32-layout takes one layout");
  const std::string fp32_layout = fp32_layouts.empty() ? "" : fp32_layouts[0];
  const int rounds = int(flags.count("--interleave", 0, 1000));
  const bool phases = flags.text("--host-phases", "off", {"on", "off"}) == "on";
  if (phases && !use_gpu) flags.fail("--host-phases: times the host issuing GPU work, so it needs a CUDA device");
  if (phases && rounds > 0) flags.fail("--host-phases and --interleave print different tables; give one");
  flags.finish();

  std::string where = "cpu (std::chrono wall time)";
#if EMBER_WITH_CUDA
  if (use_gpu) where = "cuda:0, " + cuda::properties(0).name + " (CUDA events)";
#endif
  const std::vector<Case> cases = {
      {"mlp", "sgd", 64},  {"mlp", "sgd", 256},  {"mlp", "sgd", 4096},
      {"cnn", "adam", 64}, {"cnn", "adam", 256}, {"cnn", "adam", 1024},
  };
  if (phases) return print_host_phases(cases, precisions, models, batches, layouts, device, warmup, steps, where);
  if (rounds > 0) {
    return print_interleaved(cases, precisions, modes, models, batches, layouts, fp32_layout, device, warmup, steps,
                             rounds, where);
  }
  std::printf("ember train_step: median of %d steps after %d warm-up steps, on %s\n\n", steps, warmup, where.c_str());
  std::printf("| model | optimizer | precision | layout | mode | batch | ms/step | samples/s | cudaMalloc calls |\n");
  std::printf("|---|---|---|---|---|---:|---:|---:|---:|\n");
  int status = 0;
  for_each_row(cases, models, batches, precisions, layouts,
               [&](const Case& c, const std::string& precision, const std::string& layout) {
                 for (const std::string& mode : modes) {
                   const auto batch = static_cast<long long>(c.batch);
                   const std::string lead = format("| %s | %s | %s | %s | %s | %lld", c.model, c.optimizer,
                                                   precision.c_str(), layout.c_str(), mode.c_str(), batch);
                   const bool ok = print_row(lead, 2, row_name(c, precision, mode), [&] {
                     const Timing t = time_case(c, precision, layout, mode == "graph", device, warmup, steps);
                     return Cells{format(" | %.3f | %.0f | %s", t.median_ms, double(c.batch) / (t.median_ms * 1e-3),
                                         allocs_cell(t.device_allocs).c_str()),
                                  t.device_allocs <= 0};
                   });
                   if (!ok) status = 1;
                 }
               });
  if (status != 0) std::printf("\nFAILED: a step failed or called cudaMalloc after warm-up (see above)\n");
  return status;
}
