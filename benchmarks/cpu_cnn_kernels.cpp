// cpu_cnn_kernels: the time of each CPU kernel of one training step of
// ember-train's CNN (examples/train/models.h) at batch 64, float32, as a
// markdown table: where a CPU step's time goes, kernel by kernel, without
// autograd, allocation or the data loader around it.
//
// Rows: for each of the two blocks (Conv2d 3x3 pad 1 without bias on 1 -> 32
// channels at 28x28, then 32 -> 64 at 14x14; BatchNorm2d; ReLU;
// MaxPool2d(2)) the convolution's forward, input gradient (the second block
// only: the first one's input needs none) and weight gradient, batch norm's
// training forward and backward, ReLU's forward, max pooling's forward and
// backward, each called through its kernel stub on preallocated arrays;
// then the first Linear layer's (3136 -> 128) forward, input gradient and
// weight gradient, the Adam step over the CNN's 10 parameters (420K) and
// dropout over a 64x256 activation (ember-train's MLP), through the public
// API. Under the table, the whole training step of the same CNN
// (forward, cross-entropy, backward, Adam; examples/train/models.h) on one
// random batch, first layer by layer (each member's forward and backward as
// the step runs them: their inputs come from memory the step's other layers
// have since passed through, not from the cache a kernel row reuses), then
// whole through the Sequential, and its difference from the kernels'
// total: what the step costs beyond the kernels listed (cache misses,
// autograd, allocation, ReLU and dropout backward, the other small ops; the
// dropout row is the MLP's 64x256, not the CNN's 64x128).
// Timing: the minimum over --repeats calls (after 3 warm-up calls) of the
// call's wall time: the minimum, not the median, because on a shared
// machine the other processes only ever add time; the whole step's median
// and mean follow, as an epoch pays the mean. EMBER_NUM_THREADS sets the
// threads.
//
//   cpu_cnn_kernels [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "ember/core/ops/batch_norm_kernels.h"
#include "ember/core/ops/conv_kernels.h"
#include "ember/core/ops/pool_kernels.h"
#include "ember/ember.h"
#include "examples/train/models.h"

namespace {

using namespace ember;

constexpr int64_t kBatch = 64;

constexpr int kWarmupCalls = 3;

using bench::Clock;
using bench::elapsed_us;

double min_us(int repeats, const std::function<void()>& call) {
  for (int i = 0; i < kWarmupCalls; ++i) call();
  double best = 1e300;
  for (int i = 0; i < repeats; ++i) {
    const Clock::time_point start = Clock::now();
    call();
    best = std::min(best, elapsed_us(start, Clock::now()));
  }
  return best;
}

struct Row {
  std::string kernel, shape;
  double us;
};

// One block of the CNN: conv (c_in -> c_out at side x side), batch norm,
// ReLU, max pool 2.
void time_block(int64_t c_in, int64_t c_out, int64_t side, int repeats, std::vector<Row>& rows) {
  Generator gen(static_cast<uint64_t>(c_in));
  const Shape act{kBatch, c_out, side, side}, pooled{kBatch, c_out, side / 2, side / 2};
  Tensor x = randn({kBatch, c_in, side, side}, DType::Float32, kCPU, &gen);
  Tensor w = randn({c_out, c_in, 3, 3}, DType::Float32, kCPU, &gen);
  Tensor y = empty(act), gy = randn(act, DType::Float32, kCPU, &gen), gx = empty_like(x), gw = empty_like(w);
  const std::string conv_shape = bench::format("%lldx%lldx%lldx%lld -> %lld ch", (long long)kBatch, (long long)c_in,
                                               (long long)side, (long long)side, (long long)c_out);
  ConvArgs conv;
  conv.n = kBatch;
  conv.c_in = c_in;
  conv.h = conv.w = conv.out_h = conv.out_w = side;
  conv.c_out = c_out;
  conv.kernel_h = conv.kernel_w = 3;
  conv.padding_h = conv.padding_w = 1;
  conv.input = x.data_ptr();
  conv.weight = w.data_ptr();
  conv.output = y.data_ptr();
  rows.push_back({"conv2d forward", conv_shape, min_us(repeats, [&] { conv2d_forward_stub(DeviceType::CPU)(conv); })});
  ConvArgs input_grad = conv;
  input_grad.grad_output = gy.data_ptr();
  input_grad.grad_input = gx.data_ptr();
  if (c_in > 1) {
    rows.push_back({"conv2d input gradient", conv_shape,
                    min_us(repeats, [&] { conv2d_backward_input_stub(DeviceType::CPU)(input_grad); })});
  }
  ConvArgs weight_grad = conv;
  weight_grad.grad_output = gy.data_ptr();
  weight_grad.grad_weight = gw.data_ptr();
  rows.push_back({"conv2d weight gradient", conv_shape,
                  min_us(repeats, [&] { conv2d_backward_weight_stub(DeviceType::CPU)(weight_grad); })});

  const std::string act_shape =
      bench::format("%lldx%lldx%lldx%lld", (long long)kBatch, (long long)c_out, (long long)side, (long long)side);
  Tensor bn_weight = randn({c_out}, DType::Float32, kCPU, &gen), bn_bias = randn({c_out}, DType::Float32, kCPU, &gen);
  Tensor running_mean = zeros({c_out}), running_var = ones({c_out}), save_mean = empty({c_out}),
         save_invstd = empty({c_out}), normalized = empty(act), bn_gx = empty(act), bn_gw = empty({c_out}),
         bn_gb = empty({c_out});
  BatchNormArgs bn;
  bn.n = kBatch;
  bn.c = c_out;
  bn.inner = side * side;
  bn.input = y.data_ptr();
  bn.weight = bn_weight.data_ptr();
  bn.bias = bn_bias.data_ptr();
  bn.running_mean = running_mean.data_ptr();
  bn.running_var = running_var.data_ptr();
  bn.output = normalized.data_ptr();
  bn.save_mean = save_mean.data_ptr();
  bn.save_invstd = save_invstd.data_ptr();
  rows.push_back(
      {"batch_norm forward", act_shape, min_us(repeats, [&] { batch_norm_forward_stub(DeviceType::CPU)(bn); })});
  BatchNormArgs bn_back = bn;
  bn_back.grad_output = gy.data_ptr();
  bn_back.grad_input = bn_gx.data_ptr();
  bn_back.grad_weight = bn_gw.data_ptr();
  bn_back.grad_bias = bn_gb.data_ptr();
  rows.push_back(
      {"batch_norm backward", act_shape, min_us(repeats, [&] { batch_norm_backward_stub(DeviceType::CPU)(bn_back); })});
  rows.push_back({"relu forward", act_shape, min_us(repeats, [&] { Tensor r = relu(normalized); })});

  Tensor activated = relu(normalized), out = empty(pooled), indices = empty(pooled, DType::Int64),
         pool_gy = randn(pooled, DType::Float32, kCPU, &gen), pool_gx = empty(act);
  PoolArgs pool;
  pool.planes = kBatch * c_out;
  pool.channels = c_out;
  pool.h = pool.w = side;
  pool.out_h = pool.out_w = side / 2;
  pool.kernel_h = pool.kernel_w = pool.stride_h = pool.stride_w = 2;
  pool.input = activated.data_ptr();
  pool.output = out.data_ptr();
  pool.indices = static_cast<int64_t*>(indices.data_ptr());
  pool.grad_output = pool_gy.data_ptr();
  pool.grad_input = pool_gx.data_ptr();
  rows.push_back({"max_pool2d forward", act_shape,
                  min_us(repeats, [&] { pool2d_forward_stub(DeviceType::CPU)(PoolOp::Max, pool); })});
  rows.push_back({"max_pool2d backward", act_shape,
                  min_us(repeats, [&] { pool2d_backward_stub(DeviceType::CPU)(PoolOp::Max, pool); })});
}

// ember-train's CNN with its Adam, one random batch and its labels.
struct CnnStep {
  std::shared_ptr<nn::Sequential> cnn;
  std::unique_ptr<optim::Adam> adam;
  Tensor images, labels;

  CnnStep() {
    manual_seed(0);
    cnn = train::make_cnn(0.25);
    adam = std::make_unique<optim::Adam>(cnn->parameters(), optim::AdamOptions{.lr = 1e-3});
    images = randn({kBatch, 1, train::kImageSide, train::kImageSide});
    labels = randint(0, train::kClasses, {kBatch});
  }
};

// The training step of the CNN (zero_grad, forward, cross-entropy,
// backward, Adam) on one random batch, layer by layer: each member of the
// Sequential called on its own (so without Sequential's fusions of
// neighbours), a layer's forward the time of its forward call, its backward
// the time from the gradient of its output (a hook on the output) to the
// gradient of its input (the end of backward for the first layer). Each
// entry is its minimum over the repeats.
void time_step_by_layer(int repeats) {
  CnnStep s;
  const size_t layers = s.cnn->size();
  std::vector<double> forward_us(layers, 1e300), backward_us(layers, 1e300);
  double loss_forward_us = 1e300, loss_backward_us = 1e300, adam_us = 1e300, step_us = 1e300;
  for (int i = 0; i < kWarmupCalls + repeats; ++i) {
    // forward_at[l]: layer l's forward starts; grad_at[l]: the gradient of layer l's output arrives.
    std::vector<Clock::time_point> forward_at(layers + 1), grad_at(layers);
    const Clock::time_point start = Clock::now();
    s.adam->zero_grad();
    Tensor x = s.images;
    forward_at[0] = Clock::now();
    for (size_t l = 0; l < layers; ++l) {
      x = (*s.cnn)[int64_t(l)]->forward(x);
      forward_at[l + 1] = Clock::now();
      x.register_hook([&grad_at, l](const Tensor&) {
        grad_at[l] = Clock::now();
        return Tensor();
      });
    }
    Tensor loss = nn::functional::cross_entropy(x, s.labels);
    const Clock::time_point backward_at = Clock::now();
    loss.backward();
    const Clock::time_point adam_at = Clock::now();
    s.adam->step();
    const Clock::time_point end = Clock::now();
    if (i < kWarmupCalls) continue;
    for (size_t l = 0; l < layers; ++l) {
      forward_us[l] = std::min(forward_us[l], elapsed_us(forward_at[l], forward_at[l + 1]));
      backward_us[l] = std::min(backward_us[l], elapsed_us(grad_at[l], l == 0 ? adam_at : grad_at[l - 1]));
    }
    loss_forward_us = std::min(loss_forward_us, elapsed_us(forward_at[layers], backward_at));
    loss_backward_us = std::min(loss_backward_us, elapsed_us(backward_at, grad_at[layers - 1]));
    adam_us = std::min(adam_us, elapsed_us(adam_at, end));
    step_us = std::min(step_us, elapsed_us(start, end));
  }
  std::printf("\nThe training step layer by layer, each member called on its own (us, minimum of %d steps):\n\n",
              repeats);
  std::printf("| layer | forward | backward |\n|---|---:|---:|\n");
  for (size_t l = 0; l < layers; ++l) {
    std::printf("| %zu %s | %.0f | %.0f |\n", l, (*s.cnn)[int64_t(l)]->name().c_str(), forward_us[l], backward_us[l]);
  }
  std::printf("| cross-entropy | %.0f | %.0f |\n| Adam | | %.0f |\n| step | | %.0f |\n", loss_forward_us,
              loss_backward_us, adam_us, step_us);
}

// The whole training step through the Sequential (with its fusions), each
// phase the minimum over the repeats of its own time, against `kernels_us`,
// the kernels' total above; then the steps' median and mean, which is what
// an epoch pays: at many threads a step's time varies more than at one.
void time_step(int repeats, double kernels_us) {
  CnnStep s;
  double forward_us = 1e300, backward_us = 1e300, adam_us = 1e300;
  std::vector<double> steps_us;
  for (int i = 0; i < kWarmupCalls + repeats; ++i) {
    const Clock::time_point t0 = Clock::now();
    s.adam->zero_grad();
    Tensor loss = nn::functional::cross_entropy((*s.cnn)(s.images), s.labels);
    const Clock::time_point t1 = Clock::now();
    loss.backward();
    const Clock::time_point t2 = Clock::now();
    s.adam->step();
    const Clock::time_point t3 = Clock::now();
    if (i < kWarmupCalls) continue;
    forward_us = std::min(forward_us, elapsed_us(t0, t1));
    backward_us = std::min(backward_us, elapsed_us(t1, t2));
    adam_us = std::min(adam_us, elapsed_us(t2, t3));
    steps_us.push_back(elapsed_us(t0, t3));
  }
  const double step_us = *std::min_element(steps_us.begin(), steps_us.end());
  const double mean_us = std::accumulate(steps_us.begin(), steps_us.end(), 0.0) / double(steps_us.size());
  std::printf(
      "\nwhole training step (forward, cross-entropy, backward, Adam): %.0f us (forward %.0f, backward %.0f, Adam "
      "%.0f); beyond the kernels above: %.0f us\n"
      "the same step's median %.0f us and mean %.0f us over %zu steps\n",
      step_us, forward_us, backward_us, adam_us, step_us - kernels_us, bench::median(steps_us), mean_us,
      steps_us.size());
}

}  // namespace

int main(int argc, char** argv) {
  bench::Flags flags(argc, argv, "cpu_cnn_kernels [--repeats N]");
  const int repeats = int(flags.count("--repeats", 40, 100000));
  flags.finish();

  std::vector<Row> rows;
  time_block(1, 32, 28, repeats, rows);
  time_block(32, 64, 14, repeats, rows);

  // The CNN's parameters, with gradients, for the Adam step.
  std::vector<Tensor> params = {randn({128, 64 * 7 * 7}),
                                randn({128}),
                                randn({64, 32, 3, 3}),
                                randn({32, 1, 3, 3}),
                                randn({10, 128}),
                                randn({10}),
                                randn({64}),
                                randn({64}),
                                randn({32}),
                                randn({32})};
  for (Tensor& p : params) {
    p.set_requires_grad();
    (p * p).sum().backward();
  }
  Tensor flat = randn({kBatch, 64 * 7 * 7}), hidden_grad = randn({kBatch, 128});
  const std::string linear_shape = "64x3136 -> 128";
  {
    NoGradGuard no_grad;  // the products alone, no autograd records
    rows.push_back(
        {"linear forward", linear_shape, min_us(repeats, [&] { Tensor y = linear(flat, params[0], params[1]); })});
    rows.push_back(
        {"linear input gradient", linear_shape, min_us(repeats, [&] { Tensor g = matmul(hidden_grad, params[0]); })});
    rows.push_back(
        {"linear weight gradient", linear_shape, min_us(repeats, [&] { Tensor g = matmul(hidden_grad.t(), flat); })});
  }
  optim::Adam adam(params, {.lr = 1e-3});
  rows.push_back({"Adam step", "the CNN's 10 parameters", min_us(repeats, [&] { adam.step(); })});
  Tensor hidden = randn({kBatch, 256});
  rows.push_back({"dropout (p 0.1)", "64x256", min_us(repeats, [&] { Tensor d = dropout(hidden, 0.1, true); })});

  std::printf("ember cpu_cnn_kernels: minimum of %d calls, %d threads, float32\n\n", repeats, get_num_threads());
  std::printf("| kernel | shape | us |\n|---|---|---:|\n");
  double total = 0;
  for (const Row& r : rows) {
    std::printf("| %s | %s | %.0f |\n", r.kernel.c_str(), r.shape.c_str(), r.us);
    total += r.us;
  }
  std::printf("| total | | %.0f |\n", total);

  time_step_by_layer(repeats);
  time_step(repeats, total);
}
