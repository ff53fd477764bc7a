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
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "ember/ember.h"
#include "examples/train/models.h"

namespace {

using namespace ember;

struct Case {
  const char* model;  // "mlp" or "cnn"
  int64_t batch;
};

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
  return bench::median(bench::time_steps(kCPU, 2, steps, step));
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(argc, argv, "data_parallel [--device cpu|cuda] [--replicas N] [--steps N]");
  const bool use_gpu = flags.device().is_cuda();
  const int replicas = int(flags.count("--replicas", 2, 64));
  const int steps = int(flags.count("--steps", 10, 100000));
  flags.finish();
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
