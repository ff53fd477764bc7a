// CUDA graphs: replays equal the eager ops they recorded (training steps with
// SGD, Adam, BatchNorm and dropout included), the graph's memory pool, and
// the errors for work that cannot be captured or would replay stale values.
#include "ember/core/cuda/graph.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "ember/core/error.h"
#include "ember/ember.h"
#include "ember/optim/optim.h"
#include "examples/train/models.h"
#include "tests/support/error_message.h"
#if EMBER_WITH_CUDA
#include "ember/core/cuda/caching_allocator.h"
#include "ember/core/cuda/device.h"
#endif

namespace ember::cuda {
namespace {

using testing::throws_with;

TEST(CudaGraph, NeedsADevice) {
  if (is_available()) GTEST_SKIP() << "a CUDA device is visible; this checks the error without one";
  EXPECT_TRUE(throws_with([] { Graph graph(0); }, {"Invalid device id 0"}));
}

#if EMBER_WITH_CUDA

#define REQUIRE_GPU() \
  if (!is_available()) GTEST_SKIP() << "no CUDA device"

const Device kGpu = cuda_device(0);

TEST(CudaGraph, ReplayRecomputesFromTheStaticInput) {
  REQUIRE_GPU();
  Tensor x = randn({1000, 7}, DType::Float32, kGpu);
  Tensor y;
  Graph graph;
  graph.capture([&] { y = (x * 2.0 + 1.0).relu().sum({1}); });
  EXPECT_TRUE(graph.captured());
  EXPECT_GE(graph.num_nodes(), 3u);
  for (int i = 0; i < 3; ++i) {
    Tensor fresh = randn({1000, 7});
    x.copy_(fresh);
    graph.replay();
    EXPECT_TRUE(allclose(y.cpu(), (fresh * 2.0 + 1.0).relu().sum({1}), 1e-5, 1e-5)) << "replay " << i;
  }
}

// Trains two copies of a model on the same batches, one eagerly and one by
// replaying a captured step; the parameters must agree after every step.
void expect_graph_matches_eager(const std::function<std::shared_ptr<nn::Sequential>()>& make_model,
                                const std::function<std::unique_ptr<optim::Optimizer>(const TensorList&)>& make_opt,
                                const Shape& input_shape, int64_t classes, double rtol, double atol) {
  manual_seed(1);
  std::shared_ptr<nn::Sequential> eager = make_model();
  std::shared_ptr<nn::Sequential> graphed = std::dynamic_pointer_cast<nn::Sequential>(eager->clone());
  eager->to(kGpu);
  graphed->to(kGpu);
  std::unique_ptr<optim::Optimizer> eager_opt = make_opt(eager->parameters());
  std::unique_ptr<optim::Optimizer> graph_opt = make_opt(graphed->parameters());
  const int64_t batch = input_shape[0];
  Tensor input = zeros(input_shape, DType::Float32, kGpu);
  Tensor target = zeros({batch}, DType::Int64, kGpu);
  Tensor graph_loss;
  auto step = [&](nn::Sequential& model, optim::Optimizer& opt) {
    opt.zero_grad();
    Tensor loss = nn::functional::cross_entropy(model(input), target);
    loss.backward();
    opt.step();
    return loss;
  };
  Graph graph;
  for (int i = 0; i < 5; ++i) {
    input.copy_(randn(input_shape));
    target.copy_(randint(0, classes, {batch}));
    // Both copies draw dropout masks from the default generator: the eager
    // step draws, then the graphed one from the same generator state.
    Generator& generator = default_generator(kGpu);
    const GeneratorState before = generator.get_state();
    const Tensor eager_loss = step(*eager, *eager_opt);
    generator.set_state(before);
    if (i == 0) {
      step(*graphed, *graph_opt);  // warm-up: optimizer state, cuDNN algorithms, gradients
    } else {
      if (i == 1) {
        graph.capture([&] { graph_loss = step(*graphed, *graph_opt); });
        generator.set_state(before);  // the capture drew numbers; the replay draws the eager step's
      }
      graph.replay();
      EXPECT_NEAR(graph_loss.item<double>(), eager_loss.item<double>(), 1e-5) << "step " << i;
    }
    const auto a = eager->named_parameters();
    const auto b = graphed->named_parameters();
    for (const std::string& name : a.keys()) {
      EXPECT_TRUE(allclose(a[name].cpu(), b[name].cpu(), rtol, atol)) << name << " after step " << i;
    }
  }
}

TEST(CudaGraph, MlpStepWithSgdMomentumMatchesEager) {
  REQUIRE_GPU();
  expect_graph_matches_eager(
      [] {
        auto net = std::make_shared<nn::Sequential>();
        net->push_back(std::make_shared<nn::Linear>(37, 65));
        net->push_back(std::make_shared<nn::ReLU>());
        net->push_back(std::make_shared<nn::Dropout>(0.3));
        net->push_back(std::make_shared<nn::Linear>(65, 9));
        return net;
      },
      [](const TensorList& params) {
        optim::SGDOptions o;
        o.lr = 0.05;
        o.momentum = 0.9;
        return std::make_unique<optim::SGD>(params, o);
      },
      {33, 37}, 9, 1e-5, 1e-6);
}

TEST(CudaGraph, CnnStepWithAdamBatchNormAndDropoutMatchesEager) {
  REQUIRE_GPU();
  expect_graph_matches_eager(
      [] { return train::make_cnn(0.25); },
      [](const TensorList& params) { return std::make_unique<optim::Adam>(params, optim::AdamOptions{}); },
      {16, 1, train::kImageSide, train::kImageSide}, train::kClasses, 1e-3, 1e-4);
}

TEST(CudaGraph, DropoutDrawsTheMasksTheEagerOpsWould) {
  REQUIRE_GPU();
  const Tensor x = ones({4099}, DType::Float32, kGpu);
  manual_seed(7);
  const Tensor first = dropout(x, 0.5, true).cpu();
  const Tensor second = dropout(x, 0.5, true).cpu();
  const Tensor third = dropout(x, 0.5, true).cpu();
  ASSERT_FALSE(equal(second, third));

  manual_seed(7);
  Tensor y;
  Graph graph;
  graph.capture([&] { y = dropout(x, 0.5, true); });  // draws the first mask's numbers, runs nothing
  graph.replay();
  EXPECT_TRUE(equal(y.cpu(), second));
  graph.replay();
  EXPECT_TRUE(equal(y.cpu(), third));
  EXPECT_FALSE(equal(y.cpu(), first));

  manual_seed(8);
  EXPECT_TRUE(throws_with([&] { graph.replay(); }, {"reseeded", "capture the graph again"}));
}

TEST(CudaGraph, ReplaysAllocateNothing) {
  REQUIRE_GPU();
  Tensor x = randn({256, 300}, DType::Float32, kGpu);
  Tensor w = randn({300, 200}, DType::Float32, kGpu).set_requires_grad();
  Tensor loss;
  auto step = [&] {
    w.set_grad(Tensor());
    loss = matmul(x, w).relu().mean();
    loss.backward();
  };
  step();
  Graph graph;
  graph.capture(step);
  synchronize(0);
  const uint64_t mallocs = num_device_allocs(0);
  const size_t allocated = memory_allocated(0);
  for (int i = 0; i < 20; ++i) graph.replay();
  synchronize(0);
  EXPECT_EQ(num_device_allocs(0), mallocs);
  EXPECT_EQ(memory_allocated(0), allocated);
  EXPECT_TRUE(
      allclose(w.grad().cpu(),
               matmul(x.cpu().t(), (matmul(x.cpu(), w.detach().cpu()) > 0.0).to(DType::Float32)) / double(256 * 200),
               1e-4, 1e-5));
}

TEST(CudaGraph, ATensorFreedDuringCaptureIsHeldUntilReset) {
  REQUIRE_GPU();
  const int64_t n = 3 << 20;  // 12 MiB: a block of its own
  Tensor x = full({n}, 3.0, DType::Float32, kGpu);
  const void* x_memory = x.data_ptr();
  Tensor y;
  Graph graph;
  graph.capture([&] {
    y = x * 2.0;
    x = Tensor();  // the replays still read it
  });
  Tensor other = empty({n}, DType::Float32, kGpu);
  EXPECT_NE(other.data_ptr(), x_memory) << "the held block was handed out again";
  graph.replay();
  EXPECT_EQ(y.max().item<double>(), 6.0);
  const size_t before = memory_allocated(0);
  graph.reset();
  EXPECT_FALSE(graph.captured());
  EXPECT_LT(memory_allocated(0), before);
}

// The graph's intermediate buffers are free blocks of its pool between
// replays; releasing them (empty_cache, or the retry after a failed
// cudaMalloc when the device is nearly full) made the replays write to freed
// memory: an illegal address, the context lost.
TEST(CudaGraph, EmptyCacheKeepsALiveGraphsPoolAndReleasesItAfterReset) {
  REQUIRE_GPU();
  const int64_t n = 4 << 20;  // 16 MiB: segments of their own
  Tensor x = full({n}, 3.0, DType::Float32, kGpu);
  Tensor y;
  Graph graph;
  graph.capture([&] {
    Tensor scratch = x * 2.0;  // freed inside the capture: a free block of the graph's pool
    y = scratch + 1.0;
  });
  synchronize(0);
  empty_cache();
  const size_t reserved = memory_reserved(0);
  x.fill_(5.0);
  graph.replay();
  synchronize(0);
  EXPECT_EQ(memory_reserved(0), reserved);  // before min() and max() take a small segment
  EXPECT_EQ(y.min().item<double>(), 11.0);
  EXPECT_EQ(y.max().item<double>(), 11.0);
  graph.reset();
  y = Tensor();
  empty_cache();
  EXPECT_LE(memory_reserved(0) + 2 * n * sizeof(float), reserved) << "the reset graph's pool was not released";
}

TEST(CudaGraph, WaitingForTheDeviceInsideACaptureIsAnErrorAndTheDeviceKeepsWorking) {
  REQUIRE_GPU();
  Tensor x = full({100}, 2.0, DType::Float32, kGpu);
  Graph graph;
  EXPECT_TRUE(throws_with([&] { graph.capture([&] { (void)(x * 3.0).sum().item<double>(); }); },
                          {"a copy from the GPU to the host", "cannot run while a CUDA graph is captured on cuda:0",
                           "capture was abandoned"}));
  EXPECT_TRUE(throws_with([&] { graph.capture([&] { synchronize(0); }); }, {"cuda::synchronize", "captured"}));
  EXPECT_TRUE(throws_with([&] { graph.capture([&] { (void)x.cpu(); }); }, {"GPU to the host"}));
  EXPECT_TRUE(throws_with([&] { graph.capture([&] { (void)ones({3}).to(kGpu); }); }, {"host to the GPU"}));
  EXPECT_TRUE(throws_with([&] { graph.capture([&] { (void)randn({3}, DType::Float32, kGpu); }); },
                          {"randn", "every replay would repeat them"}));
  EXPECT_FALSE(graph.captured());
  EXPECT_FALSE(is_capturing(0));
  EXPECT_EQ((x * 3.0).sum().item<double>(), 600.0);  // eager work goes on

  Tensor y;
  graph.capture([&] { y = x + 1.0; });
  graph.replay();
  EXPECT_EQ(y.sum().item<double>(), 300.0);
  EXPECT_TRUE(throws_with([&] { graph.capture([&] {}); }, {"already holds a capture", "reset()"}));
  Graph nested;
  EXPECT_TRUE(throws_with(
      [&] {
        nested.capture([&] {
          Graph inner;
          inner.capture([] {});
        });
      },
      {"another graph is being captured on cuda:0"}));
  EXPECT_TRUE(throws_with([&] { Graph().replay(); }, {"nothing is captured", "capture(work) first"}));
}

// A thread's first convolution on a device takes its cuDNN handle, which may
// allocate on the device: under a capture that is an error saying so. Once
// the thread has run one, a capture may hold a convolution of a shape it has
// never run (its cuDNN plan is made in the capture), and replays match the
// eager results.
TEST(CudaGraph, AThreadsFirstConvolutionRunsBeforeItsCaptures) {
  REQUIRE_GPU();
  Tensor x = randn({2, 3, 9, 8}, DType::Float32, kGpu);
  Tensor x2 = randn({3, 3, 11, 7}, DType::Float32, kGpu);
  Tensor w = randn({4, 3, 3, 3}, DType::Float32, kGpu);
  synchronize(0);
  std::thread worker([&] {
    try {
      Graph first;
      EXPECT_TRUE(throws_with([&] { first.capture([&] {
                                      conv2d(x, w, {}, {1, 1}, {1, 1});
                                    }); },
                              {"the first convolution of a thread on a device", "run the work once before capturing"}));
      const Tensor eager = conv2d(x, w, {}, {1, 1}, {1, 1});
      Tensor y, y2;
      Graph graph;
      graph.capture([&] {
        y = conv2d(x, w, {}, {1, 1}, {1, 1});
        y2 = conv2d(x2, w, {}, {2, 1}, {0, 1});
      });
      graph.replay();
      const Tensor eager2 = conv2d(x2, w, {}, {2, 1}, {0, 1});
      EXPECT_EQ((y - eager).abs().max().item<double>(), 0.0);
      EXPECT_EQ((y2 - eager2).abs().max().item<double>(), 0.0);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  });
  worker.join();
}

// SGD without momentum keeps no state: even its first update creates
// nothing, so it may be captured at once, and each replay takes a step.
TEST(CudaGraph, AStatelessOptimizerStepIsCapturedAtOnce) {
  REQUIRE_GPU();
  Tensor w = full({4}, 1.0, DType::Float32, kGpu).set_requires_grad();
  optim::SGD sgd(TensorList{w}, optim::SGDOptions{0.25});
  Graph graph;
  graph.capture([&] {
    sgd.zero_grad();
    (w * 2.0).sum().backward();
    sgd.step();
  });
  for (int i = 0; i < 3; ++i) graph.replay();
  EXPECT_EQ(to_vector<float>(w.cpu()), std::vector<float>(4, 1.0f - 3 * 0.25f * 2.0f));
}

TEST(CudaGraph, StaleOptimizerValuesAreErrorsAtReplay) {
  REQUIRE_GPU();
  Tensor w = randn({10}, DType::Float32, kGpu).set_requires_grad();
  auto opt = std::make_unique<optim::Adam>(TensorList{w}, optim::AdamOptions{});
  Graph first_step;
  EXPECT_TRUE(throws_with(
      [&] {
        first_step.capture([&] {
          (w * w).sum().backward();
          opt->step();
        });
      },
      {"Adam.step (the first update of a parameter", "run one step before capturing"}));
  auto step = [&] {
    opt->zero_grad();
    (w * w).sum().backward();
    opt->step();
  };
  step();
  Graph graph;
  graph.capture(step);
  graph.replay();
  opt->param_groups()[0].set_lr(1e-4);  // as a scheduler does
  EXPECT_TRUE(throws_with([&] { graph.replay(); }, {"options of Adam's parameter group 0 changed", "capture again"}));
  opt->param_groups()[0].set_lr(1e-3);
  graph.replay();
  opt.reset();
  EXPECT_TRUE(throws_with([&] { graph.replay(); }, {"Adam optimizer whose step the graph captured was destroyed"}));
}

#endif  // EMBER_WITH_CUDA

}  // namespace
}  // namespace ember::cuda
