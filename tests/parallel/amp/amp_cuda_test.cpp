// Mixed precision and checkpointing on a GPU: autocast's dtypes on cuda:0,
// GradScaler steps that match the CPU's and do not wait for the device, and
// a lower peak of memory_allocated with checkpoint_sequential. Each test
// skips when no CUDA device is visible.
//
// tests/CMakeLists.txt globs this file into CPU-only builds too, where the
// CUDA runtime is not compiled; hence the guard.
#ifdef EMBER_WITH_CUDA

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <limits>
#include <memory>

#include "ember/core/cuda/busy_wait.h"
#include "ember/core/cuda/caching_allocator.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/cuda/stream.h"
#include "ember/ember.h"

namespace ember {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible"

TEST(AmpCuda, AutocastPicksTheDtypesOnTheGpu) {
  SKIP_WITHOUT_GPU();
  const Device d = cuda_device(0);
  Tensor a = randn({8, 16}, DType::Float32, d), w = randn({4, 16}, DType::Float32, d);
  amp::autocast guard(DType::Float16);
  EXPECT_EQ(linear(a, w).dtype(), DType::Float16);
  EXPECT_EQ(matmul(a, w.t()).dtype(), DType::Float16);
  EXPECT_EQ(softmax(linear(a, w), 1).dtype(), DType::Float32);
  EXPECT_EQ(nn::functional::cross_entropy(linear(a, w), randint(0, 4, {8}, DType::Int64, d)).dtype(), DType::Float32);
  // CPU tensors are not touched by CUDA autocast.
  EXPECT_EQ(linear(a.cpu(), w.cpu()).dtype(), DType::Float32);
}

TEST(AmpCuda, ScaledStepsMatchTheCpu) {
  SKIP_WITHOUT_GPU();
  manual_seed(1);
  Tensor w_cpu = randn({64, 32}).set_requires_grad();
  Tensor w_gpu = w_cpu.detach().cuda().set_requires_grad();
  Tensor x = randn({16, 64});
  optim::Adam a(TensorList{w_cpu}), b(TensorList{w_gpu});
  amp::GradScaler sa, sb;
  for (int step = 0; step < 4; ++step) {
    a.zero_grad();
    b.zero_grad();
    sa.scale(square(matmul(x, w_cpu)).mean()).backward();
    sb.scale(square(matmul(x.cuda(), w_gpu)).mean()).backward();
    if (step == 2) {  // a planted overflow on both
      NoGradGuard no_grad;
      w_cpu.grad().view({-1}).narrow(0, 5, 1).fill_(std::numeric_limits<double>::infinity());
      w_gpu.grad().view({-1}).narrow(0, 5, 1).fill_(std::numeric_limits<double>::infinity());
    }
    sa.step(a);
    sa.update();
    sb.step(b);
    sb.update();
    EXPECT_TRUE(allclose(w_gpu.cpu(), w_cpu, 1e-5, 1e-6)) << "step " << step;
  }
  EXPECT_EQ(sb.get_scale(), sa.get_scale());
  EXPECT_EQ(sb.skipped_steps(), 1);
}

TEST(AmpCuda, StepAndUpdateDoNotWaitForTheGpu) {
  SKIP_WITHOUT_GPU();
  const Device d = cuda_device(0);
  Tensor w = randn({256, 256}, DType::Float32, d).set_requires_grad();
  optim::AdamW opt(TensorList{w});
  amp::GradScaler scaler;
  // One whole iteration first: it makes the optimizer's state and the
  // scaler's tensors and launches each kernel for the first time (the first
  // launch of a kernel loads its module, which may wait for the device). The
  // steady state of a training loop is what must not wait.
  scaler.scale(square(w).sum()).backward();
  scaler.step(opt);
  scaler.update();
  opt.zero_grad();
  scaler.scale(square(w).sum()).backward();
  cuda::synchronize(0);
  constexpr int64_t kBusy = 200'000'000;  // 200 ms of GPU time queued before the step
  cuda::busy_wait(cuda::current_stream(0), kBusy);
  const auto start = std::chrono::steady_clock::now();
  scaler.step(opt);
  scaler.update();
  const double host_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  cuda::synchronize(0);
  EXPECT_LT(host_ms, 100.0) << "step() + update() waited for the device";
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

// linear's kept weight casts under CUDA graphs: a capture makes its casts
// itself, so each replay multiplies by casts of the weights the previous
// replay's step updated (the weights after 3 eager steps and 3 replays are
// those of 6 eager steps of a twin); and a replay marks the kept casts
// stale, so an eager forward after replays sees the current weights.
TEST(AmpCuda, KeptWeightCastsFollowGraphReplays) {
  SKIP_WITHOUT_GPU();
  manual_seed(3);
  const Device d = cuda_device(0);
  auto model = std::make_shared<nn::Linear>(64, 32);
  model->to(d);
  auto twin = nn::clone(model);
  Tensor x = randn({16, 64}, DType::Float32, d);
  auto forward = [&](nn::Linear& m) {
    amp::autocast guard(DType::Float16);
    return m.forward(x);
  };
  auto stepper = [&](nn::Linear& m, optim::SGD& sgd) {
    return [&m, &sgd, &forward] {
      sgd.zero_grad();
      square(forward(m).to(DType::Float32)).mean().backward();
      sgd.step();
    };
  };
  optim::SGD sgd(model->parameters(), optim::SGDOptions{0.5}), twin_sgd(twin->parameters(), optim::SGDOptions{0.5});
  auto step = stepper(*model, sgd), twin_step = stepper(*twin, twin_sgd);
  for (int i = 0; i < 3; ++i) step();  // eager: casts kept and recast in batches
  cuda::Graph graph(0);
  graph.capture(step);
  for (int i = 0; i < 3; ++i) graph.replay();
  for (int i = 0; i < 6; ++i) twin_step();
  EXPECT_TRUE(allclose(model->weight, twin->weight, 1e-6, 1e-7));
  EXPECT_TRUE(allclose(model->bias, twin->bias, 1e-6, 1e-7));
  Tensor eager = forward(*model);
  amp::clear_autocast_cache();
  Tensor fresh = forward(*model);
  EXPECT_TRUE(equal(eager, fresh)) << "an eager forward after replays used a stale cast";
}

TEST(AmpCuda, CheckpointLowersPeakMemory) {
  SKIP_WITHOUT_GPU();
  manual_seed(2);
  constexpr int kPairs = 32;
  auto model = std::make_shared<nn::Sequential>();
  for (int i = 0; i < kPairs; ++i) {
    model->push_back(std::make_shared<nn::Linear>(1024, 1024));
    model->push_back(std::make_shared<nn::GELU>());
  }
  model->to(cuda_device(0));
  Tensor x = randn({512, 1024}, DType::Float32, cuda_device(0));  // 2 MiB, as is every activation
  // The weight gradients (4 MiB a layer, 128 MiB in all) are made here once
  // and then zeroed in place, so that the peaks below measure what the
  // forward saves and backward's temporaries, not the gradients that both
  // runs end with.
  model->forward(x).sum().backward();
  auto peak = [&](const std::function<Tensor(const Tensor&)>& forward) {
    model->zero_grad(/*set_to_none=*/false);
    cuda::synchronize(0);
    const size_t base = cuda::memory_allocated(0);
    cuda::reset_peak_memory_stats(0);
    forward(x).sum().backward();
    cuda::synchronize(0);
    return cuda::max_memory_allocated(0) - base;
  };
  const size_t plain = peak([&](const Tensor& in) { return model->forward(in); });
  const size_t ckpt = peak([&](const Tensor& in) { return parallel::checkpoint_sequential(*model, 8, in); });
  // Plain keeps 2 activations per pair: 128 MiB. In 8 segments of 4 pairs:
  // the 7 checkpointed segments' inputs (14 MiB), the last segment's 8
  // activations (16 MiB) and, in backward, one recomputed segment's 8 (16
  // MiB): about 46 MiB.
  EXPECT_GE(plain, size_t(kPairs) * 2 * (2 << 20)) << "plain " << plain << " bytes";
  EXPECT_LT(ckpt, plain / 2) << "plain " << plain << " bytes, checkpointed " << ckpt;
}

}  // namespace
}  // namespace ember

#endif  // EMBER_WITH_CUDA
