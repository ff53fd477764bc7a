// data_parallel: the time of one training step (forward, cross-entropy,
// zero_grad, backward, SGD momentum step) through parallel::DataParallel in
// its classic and fast modes, beside the plain module on one device, as a
// markdown table.
//
// Devices: every visible GPU (the module on cuda:0, the batch made on the
// CPU as a DataLoader gives it) when there is one, else `--replicas N` CPU
// replicas (default 2: ember's CPU kernels are single-threaded, so CPU
// replicas on threads use N cores). `--device cpu` forces the CPU.
// Rows: ember-train's MLP widened to 784-1024-1024-10 at batch 256 and
// 1024, and its CNN at batch 64.
// Timing: the median wall time (std::chrono) of --steps steps (default 10)
// after 2 warm-up steps; on GPUs each step ends with a synchronize of every
// device used, so the time includes all of its GPU work.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ember.h"
#include "examples/train/models.h"

namespace {

using namespace ember;

struct Case {
  const char* model;  // "mlp" or "cnn"
  int64_t batch;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::shared_ptr<nn::Sequential> make_model(const Case& c) {
  manual_seed(0);
  return std::string(c.model) == "mlp" ? train::make_mlp({1024, 1024}, 0) : train::make_cnn(0);
}

// Milliseconds per step; mode empty: the plain module on devices[0].
double time_case(const Case& c, const std::vector<Device>& devices, std::optional<parallel::ReplicationMode> mode,
                 int steps) {
  std::shared_ptr<nn::Sequential> net = make_model(c);
  net->to(devices[0]);
  std::shared_ptr<nn::UnaryModule> model = net;
  if (mode) {
    parallel::DataParallelOptions o;
    o.mode = *mode;
    model = std::make_shared<parallel::DataParallel>(net, devices, o);
  }
  optim::SGD opt(net->parameters(), {.lr = 0.01, .momentum = 0.9});
  const Tensor input = randn({c.batch, 1, train::kImageSide, train::kImageSide});
  const Tensor target = randint(0, train::kClasses, {c.batch}, DType::Int64, devices[0]);
  const Tensor plain_input = input.to(devices[0]);
  auto step = [&] {
    Tensor loss = nn::functional::cross_entropy(model->forward(mode ? input : plain_input), target);
    opt.zero_grad();
    loss.backward();
    opt.step();
    for (const Device& d : devices) {
      if (d.is_cuda()) cuda::synchronize(d.index);
    }
  };
  for (int i = 0; i < 2; ++i) step();
  std::vector<double> ms;
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return median(ms);
}

[[noreturn]] void usage_error(const std::string& message) {
  std::fprintf(stderr, "data_parallel: %s\nusage: data_parallel [--device cpu|cuda] [--replicas N] [--steps N]\n",
               message.c_str());
  std::exit(2);
}

int parse_count(const std::string& flag, const std::string& value, int max) {
  const int n = std::atoi(value.c_str());
  if (n < 1 || n > max)
    usage_error(flag + ": expected a count from 1 to " + std::to_string(max) + ", got '" + value + "'");
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  const bool gpu_visible = cuda::is_available();
  bool use_gpu = gpu_visible;
  int steps = 10, replicas = 2;
  for (int i = 1; i < argc; i += 2) {
    const std::string arg = argv[i];
    if (i + 1 == argc) usage_error(arg + " needs a value");
    const std::string value = argv[i + 1];
    if (arg == "--device") {
      if (value != "cpu" && value != "cuda") usage_error("--device: expected cpu or cuda, got '" + value + "'");
      if (value == "cuda" && !gpu_visible) usage_error("--device cuda: no CUDA device is visible");
      use_gpu = value == "cuda";
    } else if (arg == "--replicas") {
      replicas = parse_count(arg, value, 64);
    } else if (arg == "--steps") {
      steps = parse_count(arg, value, 100000);
    } else {
      usage_error("unknown argument '" + arg + "'");
    }
  }
  std::vector<Device> devices;
  std::string where;
  if (use_gpu) {
    for (int i = 0; i < cuda::device_count(); ++i) devices.push_back(cuda_device(i));
    where = std::to_string(devices.size()) + " x " + cuda::properties(0).name;
  } else {
    devices.assign(size_t(replicas), kCPU);
    where = std::to_string(replicas) + " CPU replicas on threads";
  }
  std::printf("ember data_parallel: float32, SGD momentum, median of %d steps after 2 warm-up steps, %s\n\n", steps,
              where.c_str());
  std::printf("| model | batch | plain ms/step (%s) | classic ms/step | fast ms/step | fast vs classic |\n",
              devices[0].str().c_str());
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  int status = 0;
  for (const Case& c : {Case{"mlp", 256}, Case{"mlp", 1024}, Case{"cnn", 64}}) {
    try {
      const double plain = time_case(c, devices, std::nullopt, steps);
      const double classic = time_case(c, devices, parallel::ReplicationMode::Classic, steps);
      const double fast = time_case(c, devices, parallel::ReplicationMode::Fast, steps);
      std::printf("| %s | %lld | %.2f | %.2f | %.2f | %.2fx |\n", c.model, static_cast<long long>(c.batch), plain,
                  classic, fast, classic / fast);
    } catch (const Error& e) {
      std::printf("| %s | %lld | failed | | | |\n", c.model, static_cast<long long>(c.batch));
      std::fprintf(stderr, "%s batch %lld: %s\n", c.model, static_cast<long long>(c.batch), e.what());
      status = 1;
    }
    std::fflush(stdout);
  }
  return status;
}
