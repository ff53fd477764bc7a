// SyncBatchNorm (ember/parallel/distributed/ddp/sync_batch_norm.h): without a group it is
// BatchNorm (forward, gradients, running statistics, eval, 2-D to 4-D
// input); its backward passes gradcheck in float64; over 2 and 4 forked
// ranks with uneven batches it equals BatchNorm on the concatenated batch;
// under DDP a converted CNN trains like one process on the whole batch; and
// convert_sync_batchnorm keeps the very tensors and refuses a layer its
// parent would keep calling unsynchronized.
#include <gtest/gtest.h>

#include <memory>

#include "ember/ember.h"
#include "ember/parallel/distributed/ddp/distributed_data_parallel.h"
#include "ember/parallel/distributed/ddp/sync_batch_norm.h"
#include "parallel/distributed/ddp/ddp_test_support.h"
#include "support/error_message.h"
#include "support/gradcheck.h"

namespace ember::parallel {
namespace {

using testing::Batch;
using testing::DistConfig;
using testing::max_abs_diff;
using testing::RankContext;
using testing::throws_with;

constexpr double kTol = 1e-10;

// A BatchNorm of the input's rank and the SyncBatchNorm that shares its tensors.
std::shared_ptr<nn::BatchNormBase> plain_bn(const Tensor& x, std::optional<double> momentum) {
  std::shared_ptr<nn::BatchNormBase> bn;
  if (x.dim() == 4) bn = std::make_shared<nn::BatchNorm2d>(x.size(1), 1e-5, momentum);
  else bn = std::make_shared<nn::BatchNorm1d>(x.size(1), 1e-5, momentum);
  bn->to(DType::Float64);
  return bn;
}

TEST(SyncBatchNorm, WithoutAGroupItIsBatchNorm) {
  for (const Shape& shape : {Shape{8, 3}, Shape{4, 3, 5}, Shape{2, 3, 4, 4}}) {
    for (std::optional<double> momentum : {std::optional<double>(0.1), std::optional<double>()}) {
      auto bn = plain_bn(zeros(shape), momentum);
      manual_seed(2);
      auto sync = std::make_shared<SyncBatchNorm>(shape[1], 1e-5, momentum);
      sync->to(DType::Float64);
      {
        NoGradGuard no_grad;
        Tensor w = randn({shape[1]}, DType::Float64), b = randn({shape[1]}, DType::Float64);
        bn->weight.copy_(w), sync->weight.copy_(w);
        bn->bias.copy_(b), sync->bias.copy_(b);
      }
      for (int step = 0; step < 3; ++step) {
        Tensor x = (randn(shape, DType::Float64) * 3.0 + 1.0).set_requires_grad();
        Tensor xs = x.detach().set_requires_grad();
        Tensor v = randn(shape, DType::Float64);
        Tensor y = bn->forward(x), ys = sync->forward(xs);
        EXPECT_LT(max_abs_diff(y, ys), kTol) << shape_str(shape);
        (y * v).sum().backward();
        (ys * v).sum().backward();
        EXPECT_LT(max_abs_diff(x.grad(), xs.grad()), kTol) << shape_str(shape);
        EXPECT_LT(max_abs_diff(bn->weight.grad(), sync->weight.grad()), kTol);
        EXPECT_LT(max_abs_diff(bn->bias.grad(), sync->bias.grad()), kTol);
        EXPECT_LT(max_abs_diff(bn->running_mean, sync->running_mean), kTol);
        EXPECT_LT(max_abs_diff(bn->running_var, sync->running_var), kTol);
        bn->zero_grad();
        sync->zero_grad();
      }
      EXPECT_EQ(sync->num_batches_tracked.item<int64_t>(), 3);
      bn->eval();
      sync->eval();
      Tensor x = randn(shape, DType::Float64);
      EXPECT_LT(max_abs_diff(bn->forward(x), sync->forward(x)), kTol) << "eval";
    }
  }
}

TEST(SyncBatchNorm, Gradcheck) {
  for (const Shape& shape : {Shape{5, 2}, Shape{3, 2, 2, 3}}) {
    Tensor x = testing::random_leaf(shape, 3);
    Tensor w = testing::random_leaf({2}, 4);
    Tensor b = testing::random_leaf({2}, 5);
    EXPECT_TRUE(testing::gradcheck(
        [](const TensorList& in) { return sync_batch_norm(in[0], in[1], in[2], {}, {}, 0.1, 1e-5, nullptr); },
        {x, w, b}));
    EXPECT_TRUE(testing::gradcheck(
        [](const TensorList& in) { return sync_batch_norm(in[0], {}, {}, {}, {}, 0.1, 1e-5, nullptr); }, {x}));
  }
}

TEST(SyncBatchNorm, Errors) {
  SyncBatchNorm sync(3);
  EXPECT_TRUE(throws_with([&] { sync.forward(ones({4})); }, {"at least 2 dims", "[4]"}));
  EXPECT_TRUE(throws_with([&] { sync.forward(ones({4, 2})); }, {"expected 3 channels", "[4, 2]"}));
  EXPECT_TRUE(throws_with([&] { sync.forward(ones({1, 3})); }, {"more than 1 value per channel"}));
  Tensor x = randn({4, 3}, DType::Float64).set_requires_grad();
  Tensor y = sync_batch_norm(x, {}, {}, {}, {}, 0.1, 1e-5, nullptr);
  EXPECT_TRUE(throws_with([&] { autograd::grad({(y * y).sum()}, {x}, {}, false, /*create_graph=*/true); },
                          {"double backward (create_graph=true)"}));
}

class SyncBatchNormConfigs : public ::testing::TestWithParam<DistConfig> {};
INSTANTIATE_TEST_SUITE_P(Backends, SyncBatchNormConfigs, ::testing::ValuesIn(testing::dist_configs()),
                         testing::config_name);

// Rank r holds 2 + r rows of a (sum of rows, 3, 2, 2) batch.
TEST_P(SyncBatchNormConfigs, UnevenShardsEqualBatchNormOnTheConcatenatedBatch) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = testing::make_group(ctx, c);
    const int w = ctx.world_size;
    int64_t total = 0, start = 0;
    for (int r = 0; r < w; ++r) {
      if (r == ctx.rank) start = total;
      total += 2 + r;
    }
    const int64_t mine = 2 + ctx.rank;
    Generator gen(17);
    Tensor all_x = (randn({total, 3, 2, 2}, DType::Float64, kCPU, &gen) * 2.0 + 0.5).to(c.device);
    Tensor all_v = randn({total, 3, 2, 2}, DType::Float64, kCPU, &gen).to(c.device);
    auto sync = std::make_shared<SyncBatchNorm>(3, 1e-5, 0.1, true, true, group);
    sync->to(c.device, DType::Float64);
    auto bn = std::make_shared<nn::BatchNorm2d>(3);
    bn->to(c.device, DType::Float64);
    for (int step = 0; step < 2; ++step) {
      Tensor x = all_x.narrow(0, start, mine).clone().set_requires_grad();
      Tensor y = sync->forward(x);
      (y * all_v.narrow(0, start, mine)).sum().backward();
      Tensor ref_x = all_x.clone().set_requires_grad();
      Tensor ref_y = bn->forward(ref_x);
      (ref_y * all_v).sum().backward();
      EXPECT_LT(max_abs_diff(y, ref_y.narrow(0, start, mine)), kTol) << "step " << step;
      EXPECT_LT(max_abs_diff(x.grad(), ref_x.grad().narrow(0, start, mine)), kTol) << "step " << step;
      EXPECT_LT(max_abs_diff(sync->running_mean, bn->running_mean), kTol);
      EXPECT_LT(max_abs_diff(sync->running_var, bn->running_var), kTol);
      // Weight and bias get this rank's share; their sum is BatchNorm's.
      for (auto [mine_grad, ref_grad] :
           {std::pair{sync->weight.grad(), bn->weight.grad()}, std::pair{sync->bias.grad(), bn->bias.grad()}}) {
        Tensor summed = mine_grad.clone();
        group->all_reduce(summed)->wait();
        EXPECT_LT(max_abs_diff(summed, ref_grad), kTol);
      }
      sync->zero_grad();
      bn->zero_grad();
      all_x = all_x * 0.5 + 1.0;
    }
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(SyncBatchNormConfigs, ConvertedCNNUnderDDPTrainsLikeOneProcessOnTheWholeBatch) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = testing::make_group(ctx, c);
    const int w = ctx.world_size;
    auto model = testing::small_cnn(9, c.device);
    auto reference = testing::small_cnn(9, c.device);
    Tensor bn_weight = model->at<nn::BatchNorm2d>(1)->weight;
    auto converted = std::dynamic_pointer_cast<nn::Sequential>(convert_sync_batchnorm(model, group));
    ASSERT_EQ(converted, model);
    auto sync = model->at<SyncBatchNorm>(1);
    EXPECT_TRUE(sync->weight.is_same(bn_weight)) << "the converted layer keeps the tensors";
    auto ddp = std::make_shared<DistributedDataParallel>(model, group);
    optim::SGD opt(ddp->parameters(), {.lr = 0.1, .momentum = 0.9});
    optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int step = 0; step < 3; ++step) {
      Batch all = testing::global_batch({1, 5, 5}, 3 * w, 70 + step, c.device);
      opt.zero_grad();
      testing::loss_of(*ddp, testing::shard(all, ctx.rank, w)).backward();
      opt.step();
      ref_opt.zero_grad();
      testing::loss_of(*reference, all).backward();
      ref_opt.step();
    }
    EXPECT_LT(testing::max_param_diff(*model, *reference), kTol);
    auto ref_bn = reference->at<nn::BatchNorm2d>(1);
    EXPECT_LT(max_abs_diff(sync->running_mean, ref_bn->running_mean), kTol);
    EXPECT_LT(max_abs_diff(sync->running_var, ref_bn->running_var), kTol);
  });
  EXPECT_TRUE(testing::all_passed(results));
}

// A module that calls its BatchNorm through a member of its own.
class Holder : public nn::UnaryModule {
 public:
  Holder() { bn = register_module("bn", std::make_shared<nn::BatchNorm1d>(2)); }
  Tensor forward(const Tensor& x) override { return bn->forward(x); }
  std::shared_ptr<Module> clone() const override { return nullptr; }
  std::shared_ptr<nn::BatchNorm1d> bn;
};

TEST(ConvertSyncBatchnorm, ReplacesEveryBatchNormInTheTreeKeepingTheTensors) {
  auto inner =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::BatchNorm1d>(4));
  auto net =
      std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(1, 2, 3), std::make_shared<nn::BatchNorm2d>(2),
                                       std::make_shared<nn::Flatten>(), inner);
  net->at<nn::BatchNorm2d>(1)->eval();
  const TensorList params = net->parameters(), buffers = net->buffers();
  const std::vector<std::string> names = net->state_dict().keys();
  EXPECT_EQ(convert_sync_batchnorm(net), net);
  EXPECT_NE(std::dynamic_pointer_cast<SyncBatchNorm>(net->named_modules().at("1")), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<SyncBatchNorm>(net->named_modules().at("3.1")), nullptr);
  EXPECT_FALSE(net->at<SyncBatchNorm>(1)->is_training());
  EXPECT_EQ(net->state_dict().keys(), names);
  TensorList after = net->parameters(), after_buffers = net->buffers();
  ASSERT_EQ(after.size(), params.size());
  for (size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(after[i].is_same(params[i])) << i;
  for (size_t i = 0; i < buffers.size(); ++i) EXPECT_TRUE(after_buffers[i].is_same(buffers[i])) << i;
  EXPECT_EQ(net->at<SyncBatchNorm>(1)->str(),
            "SyncBatchNorm(2, eps=1e-05, momentum=0.1, affine=true, "
            "track_running_stats=true)");
  // A module that is a BatchNorm itself comes back converted.
  auto bn = std::make_shared<nn::BatchNorm1d>(3);
  auto sync = std::dynamic_pointer_cast<SyncBatchNorm>(convert_sync_batchnorm(bn));
  ASSERT_NE(sync, nullptr);
  EXPECT_TRUE(sync->running_var.is_same(bn->running_var));
  // A parent that calls the old layer through its member would never synchronize.
  auto holder = std::make_shared<Holder>();
  EXPECT_TRUE(throws_with([&] { convert_sync_batchnorm(holder); },
                          {"'bn' (a BatchNorm1d in a Holder) is still referenced outside the module tree",
                           "SyncBatchNorm in that module directly"}));
}

}  // namespace
}  // namespace ember::parallel
