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
//         batch 256, 1024
// Precisions (--precision, a list): fp32; amp-fp16, the forward and the
// loss under amp::autocast(float16) with an amp::GradScaler; amp-bf16,
// autocast(bfloat16) without one. Default: all three on a GPU, fp32 on the
// CPU.
// Modes (--mode, a list): eager, each op launched as it is called; graph,
// the whole step captured once in a cuda::Graph after the warm-up and
// replayed (CUDA only). Default: both on a GPU. --model and --batch (lists)
// keep only some of the rows.
// Inputs are random (N, 1, 28, 28) images and labels made on the device once.
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
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "ember.h"
#include "examples/train/models.h"
#include "optim/optim.h"
#if EMBER_WITH_CUDA
#include "core/cuda/caching_allocator.h"
#include "core/cuda/device.h"
#include "core/cuda/graph.h"
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

Timing time_case(const Case& c, const std::string& precision, bool graphed, Device device, int warmup, int steps) {
  manual_seed(0);
  std::shared_ptr<nn::Sequential> model = make_model(c);
  model->to(device);
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(c, model->parameters());
  const Tensor input = randn({c.batch, 1, train::kImageSide, train::kImageSide}, DType::Float32, device);
  const Tensor target = randint(0, train::kClasses, {c.batch}, DType::Int64, device);
  const std::optional<DType> low = autocast_dtype(precision);
  std::optional<amp::GradScaler> scaler;
  if (low == DType::Float16) scaler.emplace();
  auto step = [&] {
    Tensor loss;
    {
      std::optional<amp::autocast> autocast;
      if (low) autocast.emplace(device.type, *low);
      loss = nn::functional::cross_entropy((*model)(input), target);
    }
    optimizer->zero_grad();
    bench::backward_and_step(loss, *optimizer, scaler ? &*scaler : nullptr);
  };
  for (int i = 0; i < warmup; ++i) step();
#if EMBER_WITH_CUDA
  std::optional<cuda::Graph> graph;
  std::function<void()> timed = step;
  if (graphed) {
    EMBER_CHECK(device.is_cuda(), "train_step: --mode graph needs a CUDA device");
    graph.emplace(device.index);
    graph->capture(step);
    timed = [&graph] { graph->replay(); };
  }
#else
  EMBER_CHECK(!graphed, "train_step: --mode graph needs CUDA");
  const std::function<void()>& timed = step;
#endif
  Timing t;
#if EMBER_WITH_CUDA
  // cudaMalloc happens on the host, inside step(): no need to synchronize.
  const uint64_t allocs_before = device.is_cuda() ? cuda::num_device_allocs(device.index) : 0;
#endif
  t.median_ms = bench::median(bench::time_steps(device, 1, steps, timed));
#if EMBER_WITH_CUDA
  if (device.is_cuda()) t.device_allocs = int64_t(cuda::num_device_allocs(device.index) - allocs_before);
#endif
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(argc, argv,
                     "train_step [--device cpu|cuda] [--steps N] [--precision fp32,amp-fp16,amp-bf16] "
                     "[--mode eager,graph] [--model mlp,cnn] [--batch 64,256,...]");
  const Device device = flags.device();
  const bool use_gpu = device.is_cuda();
  const int warmup = use_gpu ? 10 : 2;
  const int steps = int(flags.count("--steps", use_gpu ? 100 : 10, 100000));
  const std::vector<std::string> precisions =
      flags.list("--precision", use_gpu ? std::vector<std::string>{"fp32", "amp-fp16", "amp-bf16"}
                                        : std::vector<std::string>{"fp32"},
                 {"fp32", "amp-fp16", "amp-bf16"});
  const std::vector<std::string> modes =
      flags.list("--mode", use_gpu ? std::vector<std::string>{"eager", "graph"} : std::vector<std::string>{"eager"},
                 {"eager", "graph"});
  const std::vector<std::string> models = flags.list("--model", {"mlp", "cnn"}, {"mlp", "cnn"});
  const std::vector<std::string> batches = flags.list("--batch", {"64", "256", "1024", "4096"}, {"64", "256", "1024", "4096"});
  flags.finish();

  std::string where = "cpu (std::chrono wall time)";
#if EMBER_WITH_CUDA
  if (use_gpu) where = "cuda:0, " + cuda::properties(0).name + " (CUDA events)";
#endif
  std::printf("ember train_step: median of %d steps after %d warm-up steps, on %s\n\n", steps, warmup,
              where.c_str());
  std::printf("| model | optimizer | precision | mode | batch | ms/step | samples/s | cudaMalloc calls |\n");
  std::printf("|---|---|---|---|---:|---:|---:|---:|\n");
  const std::vector<Case> cases = {
      {"mlp", "sgd", 64}, {"mlp", "sgd", 256}, {"mlp", "sgd", 4096}, {"cnn", "adam", 256}, {"cnn", "adam", 1024},
  };
  int status = 0;
  for (const Case& c : cases) {
    const auto picked = [](const std::vector<std::string>& from, const std::string& v) {
      return std::find(from.begin(), from.end(), v) != from.end();
    };
    if (!picked(models, c.model) || !picked(batches, std::to_string(c.batch))) continue;
    for (const std::string& precision : precisions) {
      for (const std::string& mode : modes) {
        const auto batch = static_cast<long long>(c.batch);
        try {
          const Timing t = time_case(c, precision, mode == "graph", device, warmup, steps);
          const std::string allocs = t.device_allocs < 0 ? "n/a" : std::to_string(t.device_allocs);
          std::printf("| %s | %s | %s | %s | %lld | %.3f | %.0f | %s |\n", c.model, c.optimizer, precision.c_str(),
                      mode.c_str(), batch, t.median_ms, double(c.batch) / (t.median_ms * 1e-3), allocs.c_str());
          if (t.device_allocs > 0) status = 1;
        } catch (const Error& e) {
          std::printf("| %s | %s | %s | %s | %lld | failed | | |\n", c.model, c.optimizer, precision.c_str(),
                      mode.c_str(), batch);
          std::fprintf(stderr, "%s %s %s batch %lld: %s\n", c.model, precision.c_str(), mode.c_str(), batch, e.what());
          status = 1;
        }
        std::fflush(stdout);
      }
    }
  }
  if (status != 0) std::printf("\nFAILED: a step failed or called cudaMalloc after warm-up (see above)\n");
  return status;
}
