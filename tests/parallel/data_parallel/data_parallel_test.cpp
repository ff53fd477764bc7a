// parallel::DataParallel on CPU replicas (the CPU listed 2 or 3 times):
// outputs and gradients equal the plain module's for ember-train's MLP and
// CNN, uneven batches, nested inputs, explicit and custom scatters, the
// fast mode against the classic one over optimizer steps, and every error
// and warning users meet.
#include "ember/parallel/data_parallel/data_parallel.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>

#include "core/cuda/fake_device_system.h"
#include "ember/ember.h"
#include "ember/parallel/data_parallel/scatter_gather.h"
#include "ember/parallel/data_parallel/warn_once.h"
#include "examples/train/models.h"
#include "support/error_message.h"

namespace ember::parallel {
namespace {

using ember::testing::error_of;
using ember::testing::fake_gpu;
using ember::testing::fake_runtime;
using ember::testing::ScopedDeviceSystem;
using ember::testing::throws_with;
using ::testing::HasSubstr;
using ::testing::StartsWith;

std::vector<Device> cpus(size_t n) { return std::vector<Device>(n, kCPU); }

std::shared_ptr<DataParallel> wrap(std::shared_ptr<nn::Module> m, size_t devices, DataParallelOptions o = {}) {
  return std::make_shared<DataParallel>(std::move(m), cpus(devices), std::move(o));
}

Tensor images(int64_t n, uint64_t seed) {
  Generator g(seed);
  return randn({n, 1, 28, 28}, kDefaultFloat, kCPU, &g);
}

Tensor labels(int64_t n, uint64_t seed) {
  Generator g(seed);
  return randint(0, 10, {n}, DType::Int64, kCPU, &g);
}

Tensor loss_of(const Tensor& logits, const Tensor& target) { return nn::functional::cross_entropy(logits, target); }

std::shared_ptr<nn::Sequential> mlp() {
  manual_seed(3);
  return train::make_mlp({32, 16}, 0);
}

std::shared_ptr<nn::Sequential> cnn() {
  manual_seed(4);
  return train::make_cnn(0);
}

::testing::AssertionResult close_tensors(const nn::OrderedDict<Tensor>& got, const nn::OrderedDict<Tensor>& want,
                                         double rtol, double atol, bool grads) {
  for (const auto& item : want) {
    Tensor a = grads ? got.at(item.key).grad() : got.at(item.key);
    Tensor b = grads ? item.value.grad() : item.value;
    if (a.defined() != b.defined()) return ::testing::AssertionFailure() << item.key << ": defined only on one side";
    if (!a.defined()) continue;
    if (!allclose(a.to(DType::Float64), b.to(DType::Float64), rtol, atol)) {
      return ::testing::AssertionFailure()
             << item.key
             << " differs: max |a - b| = " << (a.to(DType::Float64) - b.to(DType::Float64)).abs().max().item<double>();
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult same_grads(const nn::Module& a, const nn::Module& b, double rtol = 1e-4,
                                      double atol = 1e-5) {
  return close_tensors(a.named_parameters(), b.named_parameters(), rtol, atol, true);
}

::testing::AssertionResult same_state(const nn::Module& a, const nn::Module& b, double rtol = 1e-4,
                                      double atol = 1e-5) {
  return close_tensors(a.state_dict(), b.state_dict(), rtol, atol, false);
}

TEST(ParallelDataParallel, MlpMatchesThePlainModule) {
  WarningCapture warnings;  // the uneven batches warn
  for (size_t devices : {2, 3}) {
    for (int64_t batch : {12, 10, 7}) {
      auto net = mlp();
      auto ref = nn::clone(net);
      auto dp = wrap(net, devices);
      Tensor x = images(batch, 1), y = labels(batch, 2);
      Tensor out = dp->forward(x);
      Tensor expect = ref->forward(x);
      ASSERT_EQ(out.shape(), expect.shape());
      EXPECT_TRUE(allclose(out, expect, 1e-5, 1e-6)) << devices << " devices, batch " << batch;
      loss_of(out, y).backward();
      loss_of(expect, y).backward();
      EXPECT_TRUE(same_grads(*net, *ref)) << devices << " devices, batch " << batch;
    }
  }
}

TEST(ParallelDataParallel, CnnInEvalModeMatchesThePlainModule) {
  auto net = cnn();
  {
    // Give the running statistics values of their own first.
    NoGradGuard no_grad;
    net->forward(images(6, 9));
  }
  net->eval();
  auto ref = nn::clone(net);
  auto dp = wrap(net, 3);
  Tensor x = images(6, 5), y = labels(6, 6);
  Tensor out = dp->forward(x), expect = ref->forward(x);
  EXPECT_TRUE(allclose(out, expect, 1e-4, 1e-5));
  loss_of(out, y).backward();
  loss_of(expect, y).backward();
  EXPECT_TRUE(same_grads(*net, *ref));
  EXPECT_TRUE(same_state(*net, *ref)) << "eval mode leaves the running statistics alone";
}

// In training mode each replica normalizes its piece with that piece's
// statistics: DataParallel is the module applied piece by piece, and the
// running statistics kept are replica 0's.
TEST(ParallelDataParallel, CnnInTrainModeIsThePieceByPieceModule) {
  auto net = cnn();
  auto ref = nn::clone(net), first_piece_only = nn::clone(net);
  auto dp = wrap(net, 2);
  Tensor x = images(8, 7), y = labels(8, 8);
  Tensor out = dp->forward(x);
  Tensor expect = cat({ref->forward(x.narrow(0, 0, 4)), ref->forward(x.narrow(0, 4, 4))}, 0);
  EXPECT_TRUE(allclose(out, expect, 1e-4, 1e-5));
  loss_of(out, y).backward();
  loss_of(expect, y).backward();
  EXPECT_TRUE(same_grads(*net, *ref));

  first_piece_only->forward(x.narrow(0, 0, 4));
  EXPECT_TRUE(close_tensors(net->named_buffers(), first_piece_only->named_buffers(), 1e-5, 1e-6, false))
      << "replica 0's running statistics are kept";
  EXPECT_EQ(net->at<nn::BatchNorm2d>(1)->num_batches_tracked.item<int64_t>(), 1);
}

TEST(ParallelDataParallel, AnOptimizerOnTheModuleJustWorks) {
  auto net = mlp();
  auto ref = nn::clone(net);
  auto dp = wrap(net, 3);
  optim::SGD opt(dp->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (uint64_t step = 0; step < 3; ++step) {
    Tensor x = images(9, 10 + step), y = labels(9, 20 + step);
    opt.zero_grad();
    ref_opt.zero_grad();
    loss_of(dp->forward(x), y).backward();
    loss_of(ref->forward(x), y).backward();
    opt.step();
    ref_opt.step();
  }
  EXPECT_TRUE(same_state(*net, *ref, 1e-4, 1e-5));
}

// The fast mode keeps its replicas and sends parameters only after they
// changed; its numbers must be the classic mode's exactly. The MLP with SGD
// momentum and Adam, the CNN (slow under the sanitizers) with Adam.
TEST(ParallelDataParallel, FastModeEqualsClassicOverOptimizerSteps) {
  for (bool use_cnn : {false, true}) {
    for (bool adam : {false, true}) {
      if (use_cnn && !adam) continue;
      auto classic_net = use_cnn ? cnn() : mlp();
      auto fast_net = nn::clone(classic_net);
      const size_t devices = use_cnn ? 2 : 3;
      auto classic = wrap(classic_net, devices);
      auto fast = wrap(fast_net, devices, {.mode = ReplicationMode::Fast, .bucket_bytes = 4096});
      auto make_opt = [&](const TensorList& params) -> std::unique_ptr<optim::Optimizer> {
        if (adam) return std::make_unique<optim::Adam>(params, optim::AdamOptions{.lr = 1e-2});
        return std::make_unique<optim::SGD>(params, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
      };
      auto opt_c = make_opt(classic->parameters()), opt_f = make_opt(fast->parameters());
      const uint64_t steps = use_cnn ? 2 : 3;
      const int64_t batch = use_cnn ? 4 : 6;
      for (uint64_t step = 0; step < steps; ++step) {
        Tensor x = images(batch, 30 + step), y = labels(batch, 40 + step);
        for (auto [dp, opt] : {std::pair{classic.get(), opt_c.get()}, std::pair{fast.get(), opt_f.get()}}) {
          opt->zero_grad();
          loss_of(dp->forward(x), y).backward();
          opt->step();
        }
        for (const auto& item : classic_net->state_dict()) {
          EXPECT_TRUE(equal(item.value, fast_net->state_dict().at(item.key)))
              << (use_cnn ? "cnn" : "mlp") << (adam ? " adam" : " sgd") << " step " << step << ": " << item.key;
        }
      }
    }
  }
}

// Gradient accumulation over two forwards before one backward.
TEST(ParallelDataParallel, TwoForwardsThenOneBackward) {
  for (ReplicationMode mode : {ReplicationMode::Classic, ReplicationMode::Fast}) {
    auto net = mlp();
    auto ref = nn::clone(net);
    auto dp = wrap(net, 2, {.mode = mode});
    Tensor x1 = images(4, 50), x2 = images(6, 51), y1 = labels(4, 52), y2 = labels(6, 53);
    (loss_of(dp->forward(x1), y1) + loss_of(dp->forward(x2), y2)).backward();
    (loss_of(ref->forward(x1), y1) + loss_of(ref->forward(x2), y2)).backward();
    EXPECT_TRUE(same_grads(*net, *ref));
  }
}

// y = x * w * w where the piece is positive (else x): replica 0 gets the
// negative rows and never saves w, replica 1 saves its copy of w.
struct Gated : nn::UnaryModule {
  Tensor w;
  Gated() { w = register_parameter("w", full({3}, 2.0)); }
  Tensor forward(const Tensor& x) override { return x.min().item<float>() > 0 ? x * w * w : x * 1.0; }
  std::shared_ptr<Module> clone() const override { return clone_as<Gated>(); }
};

TEST(ParallelDataParallel, AnEarlierGraphKeepsTheValuesItSaw) {
  Tensor x = cat({full({2, 3}, -1.0), full({2, 3}, 1.0)}, 0);
  {
    auto net = std::make_shared<Gated>();
    auto dp = wrap(net, 2);
    Tensor out1 = dp->forward(x);
    {
      NoGradGuard no_grad;
      net->w.fill_(5.0);  // a step before out1's backward
    }
    dp->forward(x);  // builds a fresh replica 1: out1's graph still holds the old one
    out1.sum().backward();
    EXPECT_TRUE(allclose(net->w.grad(), full({3}, 2 * 2 * 2.0)))
        << "d/dw sum(x w^2) = 2 x w with the old w, x = 1 twice";
  }
  {
    auto net = std::make_shared<Gated>();
    auto dp = wrap(net, 2, {.mode = ReplicationMode::Fast});
    Tensor out1 = dp->forward(x);
    {
      NoGradGuard no_grad;
      net->w.fill_(5.0);
    }
    dp->forward(x);  // the fast mode writes the new w into replica 1's copy
    EXPECT_TRUE(throws_with([&] { out1.sum().backward(); }, {"modified by an in-place operation"}));
  }
}

struct WithUnused : nn::UnaryModule {
  std::shared_ptr<nn::Linear> used, unused;
  WithUnused() {
    used = register_module("used", std::make_shared<nn::Linear>(3, 2));
    unused = register_module("unused", std::make_shared<nn::Linear>(3, 2));
  }
  Tensor forward(const Tensor& x) override { return used->forward(x); }
  std::shared_ptr<Module> clone() const override { return clone_as<WithUnused>(); }
};

TEST(ParallelDataParallel, AnUnusedParameterKeepsNoGradient) {
  for (ReplicationMode mode : {ReplicationMode::Classic, ReplicationMode::Fast}) {
    auto net = std::make_shared<WithUnused>();
    wrap(net, 3, {.mode = mode})->forward(randn({6, 3})).sum().backward();
    EXPECT_TRUE(net->used->weight.grad().defined());
    EXPECT_FALSE(net->unused->weight.grad().defined());
  }
}

TEST(ParallelDataParallel, NoGraphWithGradModeOff) {
  auto net = mlp();
  auto dp = wrap(net, 2);
  {
    NoGradGuard no_grad;
    Tensor out = dp->forward(images(4, 1));
    EXPECT_FALSE(out.requires_grad());
    EXPECT_TRUE(allclose(out, net->forward(images(4, 1)), 1e-5, 1e-6));
  }
  EXPECT_TRUE(dp->forward(images(4, 1)).requires_grad());
}

// Two tensors in, a list out: (x W^T + b + y, sum of x over features).
struct PairNet : nn::Module {
  std::shared_ptr<nn::Linear> fc;
  PairNet() { fc = register_module("fc", std::make_shared<nn::Linear>(4, 3)); }
  Value forward(const Tensor& x, const Tensor& y) { return Value::list({fc->forward(x) + y, x.sum({1})}); }
  std::shared_ptr<Module> clone() const override { return clone_as<PairNet>(); }
};

TEST(ParallelDataParallel, NestedInputsAndOutputs) {
  manual_seed(5);
  auto net = std::make_shared<PairNet>();
  auto ref = nn::clone(net);
  DataParallelOptions o;
  o.forward = [](nn::Module& m, const Value& in) {
    return static_cast<PairNet&>(m).forward(in[0].tensor(), in[1][0].tensor());
  };
  auto dp = wrap(net, 3, o);
  Tensor x = randn({7, 4}), y = randn({7, 3});
  Value out = dp->forward(Value::list({x, Value::list({y})}));
  Value expect = ref->forward(x, y);
  ASSERT_TRUE(out.is_list());
  EXPECT_TRUE(allclose(out[0].tensor(), expect[0].tensor(), 1e-5, 1e-6));
  EXPECT_TRUE(allclose(out[1].tensor(), expect[1].tensor(), 1e-5, 1e-6));
  (square(out[0].tensor()).sum() + out[1].tensor().sum()).backward();
  (square(expect[0].tensor()).sum() + expect[1].tensor().sum()).backward();
  EXPECT_TRUE(same_grads(*net, *ref));
  EXPECT_TRUE(throws_with([&] { dp->forward(x); }, {"replica 0 on cpu failed", "expected a list"}));
}

TEST(ParallelDataParallel, ExplicitChunkSizes) {
  WarningCapture warnings;
  auto net = mlp();
  auto ref = nn::clone(net);
  auto dp = wrap(net, 2, {.chunk_sizes = {2, 6}});
  Tensor x = images(8, 3), y = labels(8, 4);
  Tensor out = dp->forward(x), expect = ref->forward(x);
  EXPECT_TRUE(allclose(out, expect, 1e-5, 1e-6));
  loss_of(out, y).backward();
  loss_of(expect, y).backward();
  EXPECT_TRUE(same_grads(*net, *ref));
  EXPECT_TRUE(warnings.messages().empty()) << "chosen sizes are not warned about";
  EXPECT_TRUE(throws_with([&] { dp->forward(images(9, 1)); }, {"the chunk sizes [2, 6] sum to 8", "have 9"}));
}

TEST(ParallelDataParallel, CustomScatterCallable) {
  auto net = mlp();
  auto ref = nn::clone(net);
  std::vector<int64_t> seen;
  DataParallelOptions o;
  // Uneven pieces for devices of different speed: 1 : 2 : 3.
  o.scatter = [&](const Value& in, const std::vector<Device>& devices, int64_t dim) {
    const int64_t n = in.tensor().size(dim);
    std::vector<int64_t> sizes{n / 6, n / 3, n - n / 6 - n / 3};
    std::vector<Value> pieces = scatter(in, devices, dim, sizes);
    for (const Value& p : pieces) seen.push_back(p.tensor().size(0));
    return pieces;
  };
  auto dp = wrap(net, 3, o);
  Tensor x = images(12, 3), y = labels(12, 4);
  Tensor out = dp->forward(x), expect = ref->forward(x);
  EXPECT_EQ(seen, (std::vector<int64_t>{2, 4, 6}));
  EXPECT_TRUE(allclose(out, expect, 1e-5, 1e-6));
  loss_of(out, y).backward();
  loss_of(expect, y).backward();
  EXPECT_TRUE(same_grads(*net, *ref));

  o.scatter = [](const Value& in, const std::vector<Device>& devices, int64_t) {
    return std::vector<Value>(devices.size() + 1, in);
  };
  EXPECT_TRUE(throws_with([&] { wrap(mlp(), 2, o)->forward(x); }, {"scatter gave 3 pieces for 2 devices"}));
}

// The subclass hook: all but one row on the last device.
class LastDeviceHeavy : public DataParallel {
 public:
  using DataParallel::DataParallel;
  int calls = 0;

 protected:
  std::vector<Value> scatter(const Value& inputs, const std::vector<Device>& devices) override {
    ++calls;
    const int64_t n = inputs.tensor().size(0);
    return parallel::scatter(inputs, devices, 0, {1, n - 1});
  }
};

TEST(ParallelDataParallel, CustomScatterSubclass) {
  auto net = mlp();
  auto ref = nn::clone(net);
  auto dp = std::make_shared<LastDeviceHeavy>(net, cpus(2));
  Tensor x = images(5, 3);
  Tensor out = dp->forward(x);
  EXPECT_EQ(dp->calls, 1);
  EXPECT_TRUE(allclose(out, ref->forward(x), 1e-5, 1e-6));
}

TEST(ParallelDataParallel, IsAModuleLikePyTorchs) {
  auto net = mlp();
  auto dp = wrap(net, 2);
  std::vector<std::string> keys = dp->state_dict().keys();
  ASSERT_FALSE(keys.empty());
  for (const std::string& k : keys) EXPECT_THAT(k, StartsWith("module.")) << k;
  EXPECT_EQ(dp->state_dict().size(), net->state_dict().size());
  TensorList mine = dp->parameters(), theirs = net->parameters();
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) EXPECT_TRUE(mine[i].is_same(theirs[i]));
  EXPECT_THAT(dp->str(), StartsWith("DataParallel(\n  (module): Sequential(\n"));
  EXPECT_EQ(dp->module().get(), net.get());
  EXPECT_EQ(dp->device_ids(), cpus(2));
  EXPECT_EQ(dp->output_device(), kCPU);

  auto copy = nn::clone(dp);
  EXPECT_NE(copy->module().get(), net.get());
  EXPECT_EQ(copy->device_ids(), cpus(2));
  Tensor x = images(4, 2);
  EXPECT_TRUE(allclose(copy->forward(x), dp->forward(x), 1e-6, 1e-7));
  EXPECT_FALSE(copy->parameters()[0].is_same(dp->parameters()[0]));

  dp->eval();
  EXPECT_FALSE(net->is_training()) << "eval() reaches the module";
  auto seq = std::make_shared<nn::Sequential>(dp, std::make_shared<nn::ReLU>());
  EXPECT_EQ(seq->forward(x).shape(), (Shape{4, 10})) << "a DataParallel chains like any UnaryModule";
}

TEST(ParallelDataParallel, SmallAndUnevenBatchesWarnOnce) {
  WarningCapture warnings;
  auto net = mlp();
  auto ref = nn::clone(net);
  auto dp = wrap(net, 3);
  Tensor x = images(2, 1);
  EXPECT_TRUE(allclose(dp->forward(x), ref->forward(x), 1e-5, 1e-6)) << "runs on 2 of the 3 devices";
  dp->forward(x);
  EXPECT_EQ(warnings.count("the batch of 2 along dim 0 splits into 2 pieces [1, 1] for 3 devices, so it runs on the "
                           "first 2 devices only (as PyTorch does)"),
            1u);
  dp->forward(images(10, 2));
  dp->forward(images(10, 2));
  EXPECT_EQ(warnings.count("the batch of 10 along dim 0 is not a multiple of the 3 devices, so its pieces [4, 4, 2] "
                           "are uneven"),
            1u);
  EXPECT_EQ(warnings.count("a multiple of 3 (9 or 12) balances them"), 1u);
  EXPECT_EQ(warnings.messages().size(), 2u);
}

// torch.chunk gives 5 rows over 4 devices as [2, 2, 1]: 3 devices only.
TEST(ParallelDataParallel, ChunkingCanLeaveADeviceIdle) {
  WarningCapture warnings;
  auto dp = wrap(mlp(), 4);
  EXPECT_EQ(dp->forward(images(5, 1)).size(0), 5);
  EXPECT_EQ(warnings.count("the batch of 5 along dim 0 splits into 3 pieces [2, 2, 1] for 4 devices"), 1u);
}

struct Picky : nn::UnaryModule {
  Tensor forward(const Tensor& x) override {
    EMBER_CHECK(x.min().item<float>() >= 0, "Picky: got a negative input");
    return x * 2.0;
  }
  std::shared_ptr<Module> clone() const override { return clone_as<Picky>(); }
};

TEST(ParallelDataParallel, AReplicasErrorNamesItAndItsDevice) {
  auto dp = wrap(std::make_shared<Picky>(), 2);
  Tensor x = cat({ones({2, 3}), -ones({2, 3})}, 0);
  EXPECT_THAT(error_of([&] { dp->forward(x); }), HasSubstr("replica 1 on cpu failed: Picky: got a negative input"));
}

TEST(ParallelDataParallel, DeviceListErrors) {
  auto net = mlp();
  EXPECT_TRUE(throws_with([&] { DataParallel(net, std::vector<Device>{}); },
                          {"DataParallel: device_ids is empty", "DataParallel(module) for every visible GPU"}));
  EXPECT_TRUE(throws_with([&] { DataParallel(net, std::vector<int>{}); }, {"device_ids is empty"}));
  EXPECT_TRUE(throws_with([&] { DataParallel(nullptr, cpus(2)); }, {"the module is null"}));
  EXPECT_TRUE(throws_with([&] { DataParallel(std::make_shared<nn::CrossEntropyLoss>(), cpus(2)); },
                          {"CrossEntropyLoss is not a UnaryModule", "DataParallelOptions::forward"}));

  ScopedDeviceSystem sys;
  sys->runtime = {fake_runtime(fake_gpu(1, 0x21, 0)), fake_runtime(fake_gpu(2, 0x22, 0))};
  sys->env["CUDA_VISIBLE_DEVICES"] = "1,2";
  EXPECT_THAT(error_of([&] {
                DataParallel(net, std::vector<int>{0, 2});
              }),
              HasSubstr("DataParallel: device_ids has cuda:2: Invalid device id 2: 2 CUDA devices are visible "
                        "(CUDA_VISIBLE_DEVICES=1,2 maps physical GPUs 1,2 to logical ids 0,1); use ids in [0, 1]"));
  EXPECT_TRUE(throws_with(
      [&] {
        DataParallel(net, std::vector<int>{0, 1, 1});
      },
      {"device_ids {cuda:0, cuda:1, cuda:1} lists cuda:1 twice", "list each GPU once"}));
  EXPECT_TRUE(throws_with(
      [&] {
        DataParallel(net, std::vector<Device>{kCPU, cuda_device(0)});
      },
      {"mix the CPU and CUDA devices"}));
  EXPECT_TRUE(throws_with(
      [&] {
        DataParallel(net, std::vector<int>{0, 1}, 3);
      },
      {"output_device cuda:3: Invalid device id 3"}));

  // The module was not moved to device_ids[0]: the check runs before any
  // CUDA work, so it is the error even without a GPU.
  auto dp = std::make_shared<DataParallel>(net, std::vector<int>{0, 1});
  EXPECT_THAT(error_of([&] { dp->forward(images(4, 1)); }),
              HasSubstr("module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found one "
                        "of them on device: cpu (parameter '1.weight'); call module->to(cuda:0) before wrapping it"));

  // DataParallel(module) takes every visible GPU; with none it runs the module as it is.
  EXPECT_EQ(DataParallel(net).device_ids(), (std::vector<Device>{cuda_device(0), cuda_device(1)}));
  sys->runtime.clear();
  DataParallel plain(net);
  EXPECT_TRUE(plain.device_ids().empty());
  Tensor x = images(3, 1);
  EXPECT_TRUE(allclose(plain.forward(x), net->forward(x)));
}

TEST(ParallelDataParallel, ImbalancedGpusWarn) {
  ScopedDeviceSystem sys;
  auto net = mlp();
  cuda::RuntimeDevice big = fake_runtime(fake_gpu(0, 1, 0)), small = big, slow = big;
  small.total_memory = big.total_memory / 2;
  slow.multiprocessor_count = 66;
  {
    WarningCapture warnings;
    sys->runtime = {big, small};
    DataParallel(net, std::vector<int>{0, 1});
    EXPECT_EQ(warnings.count("there is an imbalance between your GPUs. You may want to exclude GPU 1 which has less "
                             "than 75% of the memory or cores of GPU 0"),
              1u);
  }
  {
    WarningCapture warnings;
    sys->runtime = {slow, big};
    DataParallel(net, std::vector<int>{0, 1});
    EXPECT_EQ(warnings.count("exclude GPU 0 which has less than 75% of the memory or cores of GPU 1"), 1u);
  }
  {
    WarningCapture warnings;
    sys->runtime = {big, big, big};
    DataParallel(net, std::vector<int>{0, 2});
    EXPECT_TRUE(warnings.messages().empty());
  }
}

}  // namespace
}  // namespace ember::parallel
