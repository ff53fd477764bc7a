// train_step: the time of one whole training step (forward, cross-entropy
// loss, zero_grad, backward, optimizer step) of ember-train's networks, in
// float32, as a markdown table. benchmarks/train_step_torch.py prints the
// same table for PyTorch eager on the same card.
//
// Rows:
//   mlp   Flatten, Linear 784-1024, ReLU, Linear 1024-1024, ReLU,
//         Linear 1024-10; SGD lr 0.01, momentum 0.9; batch 64, 256, 4096
//   cnn   examples/train/models.h's CNN (dropout 0.25); Adam lr 1e-3;
//         batch 256, 1024
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
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember.h"
#include "examples/train/models.h"
#include "optim/optim.h"
#if EMBER_WITH_CUDA
#include "core/cuda/caching_allocator.h"
#include "core/cuda/device.h"
#include "core/cuda/event.h"
#endif

namespace {

using namespace ember;

struct Case {
  const char* model;      // "mlp" or "cnn"
  const char* optimizer;  // "sgd" or "adam"
  int64_t batch;
};

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

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

Timing time_case(const Case& c, Device device, int warmup, int steps) {
  manual_seed(0);
  std::shared_ptr<nn::Sequential> model = make_model(c);
  model->to(device);
  std::unique_ptr<optim::Optimizer> optimizer = make_optimizer(c, model->parameters());
  const Tensor input = randn({c.batch, 1, train::kImageSide, train::kImageSide}, DType::Float32, device);
  const Tensor target = randint(0, train::kClasses, {c.batch}, DType::Int64, device);
  auto step = [&] {
    Tensor loss = nn::functional::cross_entropy((*model)(input), target);
    optimizer->zero_grad();
    loss.backward();
    optimizer->step();
  };
  for (int i = 0; i < warmup; ++i) step();

  Timing t;
  std::vector<double> ms;
#if EMBER_WITH_CUDA
  if (device.is_cuda()) {
    cuda::synchronize(device.index);
    const uint64_t allocs_before = cuda::num_device_allocs(device.index);
    for (int i = 0; i < steps; ++i) {
      cuda::Event start(true), stop(true);
      start.record();
      step();
      stop.record();
      stop.synchronize();
      ms.push_back(start.elapsed_time(stop));
    }
    t.device_allocs = int64_t(cuda::num_device_allocs(device.index) - allocs_before);
    t.median_ms = median(ms);
    return t;
  }
#endif
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  t.median_ms = median(ms);
  return t;
}

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "train_step: %s\nusage: train_step [--device cpu|cuda] [--steps N]\n", message.c_str());
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  bool gpu_visible = false;
#if EMBER_WITH_CUDA
  gpu_visible = cuda::is_available();
#endif
  bool use_gpu = gpu_visible;
  int steps = 0;
  for (int i = 1; i < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg != "--device" && arg != "--steps") usage_error("unknown argument '" + arg + "'");
    if (i + 1 == argc) usage_error(arg + " needs a value");
    const std::string value = argv[i + 1];
    if (arg == "--device") {
      if (value != "cpu" && value != "cuda") usage_error("--device: expected cpu or cuda, got '" + value + "'");
      if (value == "cuda" && !gpu_visible) usage_error("--device cuda: no CUDA device is visible");
      use_gpu = value == "cuda";
    } else {
      steps = std::atoi(value.c_str());
      if (steps < 1 || steps > 100000) usage_error("--steps: expected a count from 1 to 100000, got '" + value + "'");
    }
  }
  const Device device = use_gpu ? cuda_device(0) : kCPU;
  const int warmup = use_gpu ? 10 : 2;
  if (steps == 0) steps = use_gpu ? 100 : 10;

  std::string where = "cpu (std::chrono wall time)";
#if EMBER_WITH_CUDA
  if (use_gpu) where = "cuda:0, " + cuda::properties(0).name + " (CUDA events)";
#endif
  std::printf("ember train_step: float32, median of %d steps after %d warm-up steps, on %s\n\n", steps, warmup,
              where.c_str());
  std::printf("| model | optimizer | batch | ms/step | samples/s | cudaMalloc calls |\n");
  std::printf("|---|---|---:|---:|---:|---:|\n");
  const std::vector<Case> cases = {
      {"mlp", "sgd", 64}, {"mlp", "sgd", 256}, {"mlp", "sgd", 4096}, {"cnn", "adam", 256}, {"cnn", "adam", 1024},
  };
  int status = 0;
  for (const Case& c : cases) {
    try {
      const Timing t = time_case(c, device, warmup, steps);
      const std::string allocs = t.device_allocs < 0 ? "n/a" : std::to_string(t.device_allocs);
      std::printf("| %s | %s | %lld | %.3f | %.0f | %s |\n", c.model, c.optimizer, static_cast<long long>(c.batch),
                  t.median_ms, double(c.batch) / (t.median_ms * 1e-3), allocs.c_str());
      if (t.device_allocs > 0) status = 1;
    } catch (const Error& e) {
      std::printf("| %s | %s | %lld | failed | | |\n", c.model, c.optimizer, static_cast<long long>(c.batch));
      std::fprintf(stderr, "%s batch %lld: %s\n", c.model, static_cast<long long>(c.batch), e.what());
      status = 1;
    }
    std::fflush(stdout);
  }
  if (status != 0) std::printf("\nFAILED: a step failed or called cudaMalloc after warm-up (see above)\n");
  return status;
}
