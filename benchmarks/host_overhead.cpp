// host_overhead: what ember costs the host per op, where the arithmetic is
// negligible and the figure is dispatch, checks, allocation and autograd
// bookkeeping.
//
// Rows:
//   empty kernel  an empty <<<1, 32>>> kernel launched through the CUDA
//                 runtime and checked (CUDA only): the floor under every
//                 op that launches a kernel
//   empty16       empty({16}) and its release: the allocator's round trip
//   add16         out-of-place add of two 16-element float32 tensors
//   add16 + grad  the same with both inputs requiring grad (records AddBackward)
//   add16 graphed 100 such adds captured in one cuda::Graph: the host time
//                 of a replay() divided by 100 (CUDA only; what a step
//                 replayed from a graph costs the host per op)
//   matmul        (32 x 256) @ (256 x 256), float32
//   conv2d        a 3x3 convolution, padding 1, of (1, 32, 14, 14) to 64
//                 channels (the train_step CNN's second layer at batch 1),
//                 in float32, float16 and bfloat16; "+ grad": the forward
//                 of an input and weight that require grad and the backward
//                 of the output from a given gradient (both convolutions
//                 of the backward pass); "channels-last": input, weight
//                 and gradient channels-last (cuDNN's NHWC engines, no
//                 layout transposes)
//   sgd step      a training step of one 16-element parameter: zero_grad,
//                 (w * w).sum(), backward, SGD with momentum; "+ GradScaler":
//                 the same through amp::GradScaler (scale, backward, step,
//                 update): what dynamic loss scaling costs the host a step
//   mlp fwd+bwd   10 layers of relu(matmul(h, W) + b), width 256, batch 32,
//                 then sum().backward(): one training step without the update;
//                 also its forward and its backward alone, the host time to
//                 issue them (the device synchronized after, outside it)
//
// Each figure is the median over many repetitions, in microseconds. The add
// rows time batches of calls and divide by the batch size; on CUDA they are
// the host time to issue the op (launches are asynchronous; the device is
// synchronized between batches, outside the timed region). The MLP row is
// wall time, synchronized at the end of each step on CUDA. A cell whose op
// has no kernel on that device yet reads "n/a", with ember's error below the
// table.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "ember/ember.h"
#if EMBER_WITH_CUDA
#include "benchmarks/launch_floor.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#endif

namespace {

using namespace ember;

void sync([[maybe_unused]] Device device) {
#if EMBER_WITH_CUDA
  if (device.is_cuda()) cuda::synchronize(device.index);
#endif
}

// Median over `reps` batches of the time per call, in microseconds.
double median_us(Device device, int reps, int batch, const std::function<void()>& fn) {
  for (int i = 0; i < std::max(3, reps / 10); ++i) fn();  // warm caches and allocators
  sync(device);
  std::vector<double> per_call(reps);
  for (int r = 0; r < reps; ++r) {
    auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < batch; ++i) fn();
    auto stop = std::chrono::steady_clock::now();
    sync(device);
    per_call[r] = std::chrono::duration<double, std::micro>(stop - start).count() / batch;
  }
  std::nth_element(per_call.begin(), per_call.begin() + reps / 2, per_call.end());
  return per_call[reps / 2];
}

double empty_kernel([[maybe_unused]] Device device) {
#if EMBER_WITH_CUDA
  EMBER_CHECK(device.is_cuda(), "empty kernel: a CUDA launch");
  void* stream = cuda::current_stream(device.index).handle();
  return median_us(device, 200, 100, [&] { bench::launch_empty_kernel(stream); });
#else
  EMBER_FAIL("empty kernel: a CUDA launch (ember was built without CUDA)");
#endif
}

double empty16(Device device) {
  return median_us(device, 200, 100, [&] { Tensor t = empty({16}, DType::Float32, device); });
}

double matmul32(Device device) {
  Tensor a = randn({32, 256}, DType::Float32, device);
  Tensor b = randn({256, 256}, DType::Float32, device);
  Tensor out;
  return median_us(device, 200, 20, [&] { out = matmul(a, b); });
}

double add16(Device device, bool requires_grad) {
  Tensor a = randn({16}, DType::Float32, device);
  Tensor b = randn({16}, DType::Float32, device);
  a.set_requires_grad(requires_grad);
  b.set_requires_grad(requires_grad);
  Tensor out;
  return median_us(device, 200, 100, [&] { out = add(a, b); });
}

double add16_graphed(Device device) {
  EMBER_CHECK(device.is_cuda(), "add16 graphed: CUDA graphs record GPU work only");
  constexpr int kOps = 100;
  Tensor a = randn({16}, DType::Float32, device);
  Tensor b = randn({16}, DType::Float32, device);
  std::vector<Tensor> out(kOps);
  auto adds = [&] {
    for (Tensor& o : out) o = add(a, b);
  };
  adds();  // warm-up, eagerly
  cuda::Graph graph(device.index);
  graph.capture(adds);
  return median_us(device, 200, 1, [&] { graph.replay(); }) / kOps;
}

constexpr MemoryFormat kChannelsLast = MemoryFormat::ChannelsLast;

double conv(Device device, DType dtype, bool with_backward, MemoryFormat format = MemoryFormat::Contiguous) {
  Tensor input = randn({1, 32, 14, 14}, DType::Float32, device).to(dtype).to(format).set_requires_grad(with_backward);
  Tensor weight =
      (randn({64, 32, 3, 3}, DType::Float32, device) * 0.05).to(dtype).to(format).set_requires_grad(with_backward);
  Tensor grad = randn({1, 64, 14, 14}, DType::Float32, device).to(dtype).to(format);
  return median_us(device, 200, 20, [&] {
    Tensor out = conv2d(input, weight, {}, {1, 1}, {1, 1});
    if (with_backward) out.backward(grad);
  });
}

double sgd_step(Device device, bool scaled) {
  Tensor w = randn({16}, DType::Float32, device).set_requires_grad();
  optim::SGD sgd(TensorList{w}, optim::SGDOptions{1e-3, 0.9});
  amp::GradScaler scaler;
  return median_us(device, 200, 20, [&] {
    sgd.zero_grad();
    Tensor loss = (w * w).sum();
    if (scaled) {
      scaler.scale(loss).backward();
      scaler.step(sgd);
      scaler.update();
    } else {
      loss.backward();
      sgd.step();
    }
  });
}

enum class MlpPart { Forward, Backward, Step };

// The MLP row's figure: the median host time to issue the forward or the
// backward, or the wall time of the whole step.
double mlp(Device device, MlpPart part) {
  constexpr int kLayers = 10, kWidth = 256, kBatch = 32, kReps = 21;
  std::vector<Tensor> weights, biases;
  for (int i = 0; i < kLayers; ++i) {
    // Scaled so activations keep their magnitude through the layers.
    weights.push_back(
        (randn({kWidth, kWidth}, DType::Float32, device) * (1.0 / std::sqrt(kWidth))).set_requires_grad());
    biases.push_back(zeros({kWidth}, DType::Float32, device).set_requires_grad());
  }
  Tensor input = randn({kBatch, kWidth}, DType::Float32, device);
  using Clock = std::chrono::steady_clock;
  std::vector<double> times;
  for (int r = -3; r < kReps; ++r) {  // three warm-up steps
    const auto start = Clock::now();
    Tensor h = input;
    for (int i = 0; i < kLayers; ++i) h = relu(matmul(h, weights[i]) + biases[i]);
    Tensor loss = h.sum();
    const auto forward = Clock::now();
    loss.backward();
    const auto backward = Clock::now();
    sync(device);
    const auto stop = Clock::now();
    if (r < 0) continue;
    const auto from = part == MlpPart::Backward ? forward : start;
    const auto to = part == MlpPart::Forward ? forward : part == MlpPart::Backward ? backward : stop;
    times.push_back(std::chrono::duration<double, std::micro>(to - from).count());
  }
  std::nth_element(times.begin(), times.begin() + kReps / 2, times.end());
  return times[kReps / 2];
}

struct Column {
  std::string name;
  Device device;
};

}  // namespace

int main() {
  manual_seed(0);
  std::vector<Column> columns{{"cpu", kCPU}};
#if EMBER_WITH_CUDA
  if (cuda::is_available()) columns.push_back({"cuda:0 (" + cuda::properties(0).name + ")", cuda_device(0)});
#endif

  struct Row {
    const char* name;
    std::function<double(Device)> run;
  };
  std::vector<Row> rows{
      {"empty kernel launch (runtime floor)", empty_kernel},
      {"empty16 (allocate + free 16 floats)", empty16},
      {"add16 (16 x float32, out-of-place)", [](Device d) { return add16(d, false); }},
      {"add16 + grad (inputs require grad)", [](Device d) { return add16(d, true); }},
      {"add16 graphed (100 per cuda::Graph)", add16_graphed},
      {"matmul (32 x 256) @ (256 x 256)", matmul32},
      {"conv2d 3x3 32->64 14x14, float32", [](Device d) { return conv(d, DType::Float32, false); }},
      {"conv2d 3x3 32->64 14x14, float16", [](Device d) { return conv(d, DType::Float16, false); }},
      {"conv2d 3x3 32->64 14x14, bfloat16", [](Device d) { return conv(d, DType::BFloat16, false); }},
      {"conv2d + grad, float32", [](Device d) { return conv(d, DType::Float32, true); }},
      {"conv2d + grad, float16", [](Device d) { return conv(d, DType::Float16, true); }},
      {"conv2d + grad, bfloat16", [](Device d) { return conv(d, DType::BFloat16, true); }},
      {"conv2d channels-last, float32", [](Device d) { return conv(d, DType::Float32, false, kChannelsLast); }},
      {"conv2d channels-last, float16", [](Device d) { return conv(d, DType::Float16, false, kChannelsLast); }},
      {"conv2d channels-last, bfloat16", [](Device d) { return conv(d, DType::BFloat16, false, kChannelsLast); }},
      {"conv2d channels-last + grad, float32", [](Device d) { return conv(d, DType::Float32, true, kChannelsLast); }},
      {"conv2d channels-last + grad, float16", [](Device d) { return conv(d, DType::Float16, true, kChannelsLast); }},
      {"conv2d channels-last + grad, bfloat16", [](Device d) { return conv(d, DType::BFloat16, true, kChannelsLast); }},
      {"sgd step (16 floats, momentum)", [](Device d) { return sgd_step(d, false); }},
      {"sgd step + GradScaler", [](Device d) { return sgd_step(d, true); }},
      {"mlp fwd (issue, 10 x 256, batch 32)", [](Device d) { return mlp(d, MlpPart::Forward); }},
      {"mlp bwd (issue)", [](Device d) { return mlp(d, MlpPart::Backward); }},
      {"mlp fwd+bwd (wall, synchronized)", [](Device d) { return mlp(d, MlpPart::Step); }},
  };

  std::printf("ember host overhead: median time per call, microseconds (us)\n\n");
  std::printf("%-38s", "op");
  for (const Column& c : columns) std::printf(" | %22s", c.name.c_str());
  std::printf("\n%s", std::string(38, '-').c_str());
  for (size_t i = 0; i < columns.size(); ++i) std::printf("-|-%s", std::string(22, '-').c_str());
  std::printf("\n");
  std::vector<std::string> notes;
  for (const Row& row : rows) {
    std::printf("%-38s", row.name);
    for (const Column& c : columns) {
      try {
        std::printf(" | %19.2f us", row.run(c.device));
      } catch (const Error& e) {
        std::printf(" | %22s", "n/a");
        notes.push_back(std::string(row.name) + " on " + c.device.str() + ": " + e.what());
      }
      std::fflush(stdout);
    }
    std::printf("\n");
  }
  for (const std::string& note : notes) std::printf("\nn/a: %s\n", note.c_str());
#if EMBER_WITH_CUDA
  if (!cuda::is_available()) std::printf("\n(no CUDA device visible: cuda column left out)\n");
#endif
  return 0;
}
