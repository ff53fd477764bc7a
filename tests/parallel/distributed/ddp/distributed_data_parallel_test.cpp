// DistributedDataParallel and its Reducer (ember/parallel/distributed/ddp/distributed_data_parallel.h,
// ember/parallel/distributed/ddp/reducer.h), with 2 and 4 forked ranks over gloo (and NCCL with
// one rank, skipped until that backend exists): training equals one process
// on the concatenated batch (MLP with SGD and Adam; a CNN with BatchNorm,
// whose buffers come from rank 0), the start-up broadcast, no_sync
// accumulation, unused parameters with and without find_unused_parameters,
// mismatched models, gradients as bucket views, the bucket rebuild in rank
// 0's arrival order, compression and user communication hooks, GradScaler
// with an inf on one rank, activation checkpointing under DDP, a rank that
// exits mid-training, and the bucket assignment itself.
//
// The references are computed inside each rank by a plain model on the
// whole batch, so no expected value is hard-coded.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <thread>

#include "ember/ember.h"
#include "ember/parallel/distributed/ddp/distributed_data_parallel.h"
#include "parallel/distributed/ddp/ddp_test_support.h"
#include "support/error_message.h"

namespace ember::parallel {
namespace {

using namespace std::chrono_literals;
using testing::Batch;
using testing::DistConfig;
using testing::global_batch;
using testing::loss_of;
using testing::make_group;
using testing::max_abs_diff;
using testing::max_param_diff;
using testing::RankContext;
using testing::shard;
using testing::small_cnn;
using testing::small_mlp;
using testing::throws_with;
using DDP = DistributedDataParallel;

constexpr double kTol = 1e-10;  // float64 models

#define REQUIRE_GLOO()                                                                   \
  do {                                                                                   \
    if (!backend_available("gloo")) GTEST_SKIP() << "this ember was built without Gloo"; \
  } while (0)

class DDPConfigs : public ::testing::TestWithParam<DistConfig> {};
INSTANTIATE_TEST_SUITE_P(Backends, DDPConfigs, ::testing::ValuesIn(testing::dist_configs()), testing::config_name);

std::shared_ptr<DDP> wrap(const std::shared_ptr<nn::Module>& m, const std::shared_ptr<ProcessGroup>& g,
                          DistributedDataParallelOptions o = {}) {
  return std::make_shared<DDP>(m, g, o);
}

// Several steps of DDP (each rank on its shard) against one process on the
// concatenated batch, for an optimizer made by make_opt.
template <typename MakeOpt>
void expect_same_training(RankContext& ctx, const DistConfig& c, MakeOpt make_opt, const char* what,
                          DistributedDataParallelOptions options) {
  auto group = make_group(ctx, c);
  // Each rank initializes differently: DDP must start every rank from rank 0's values.
  auto model = small_mlp(100 + ctx.rank, c.device);
  auto reference = small_mlp(100, c.device);
  auto ddp = wrap(model, group, options);
  EXPECT_EQ(max_param_diff(*model, *reference), 0.0) << what << ": the start-up broadcast";
  auto opt = make_opt(ddp->parameters());
  auto ref_opt = make_opt(reference->parameters());
  for (int step = 0; step < 4; ++step) {
    Batch all = global_batch({6}, 8 * ctx.world_size, 1000 + step, c.device);
    opt->zero_grad();
    loss_of(*ddp, shard(all, ctx.rank, ctx.world_size)).backward();
    ref_opt->zero_grad();
    loss_of(*reference, all).backward();
    TensorList g = model->parameters(), rg = reference->parameters();
    for (size_t i = 0; i < g.size(); ++i) {
      ASSERT_TRUE(g[i].grad().defined());
      EXPECT_LT(max_abs_diff(g[i].grad(), rg[i].grad()), kTol) << what << ": step " << step << " grad " << i;
    }
    opt->step();
    ref_opt->step();
  }
  EXPECT_LT(max_param_diff(*model, *reference), kTol) << what;
}

TEST_P(DDPConfigs, MatchesOneProcessOnTheConcatenatedBatch) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto sgd = [](TensorList p) {
      return std::make_unique<optim::SGD>(p, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    };
    expect_same_training(ctx, c, sgd, "SGD", {});
    // Adam, with gradients copied in and out of the buckets instead of being views.
    expect_same_training(ctx, c,
                         [](TensorList p) { return std::make_unique<optim::Adam>(p, optim::AdamOptions{.lr = 0.01}); },
                         "Adam", {.gradient_as_bucket_view = false});
  });
  EXPECT_TRUE(testing::all_passed(results));
}

// BatchNorm normalizes each rank's batch with its own statistics (as in
// PyTorch), so the reference averages the losses of the shards run one by
// one; the running statistics every rank ends up with are rank 0's (the
// forward broadcasts them), updated by its own shard.
TEST_P(DDPConfigs, CNNWithBatchNormMatchesTheShardsRunOneByOne) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = make_group(ctx, c);
    const int w = ctx.world_size;
    auto model = small_cnn(7 + ctx.rank, c.device);
    auto reference = small_cnn(7, c.device);
    auto ddp = wrap(model, group);
    optim::SGD opt(ddp->parameters(), {.lr = 0.1, .momentum = 0.5});
    optim::SGD ref_opt(reference->parameters(), {.lr = 0.1, .momentum = 0.5});
    auto bn = reference->at<nn::BatchNorm2d>(1);
    for (int step = 0; step < 3; ++step) {
      Batch all = global_batch({1, 5, 5}, 4 * w, 50 + step, c.device);
      opt.zero_grad();
      loss_of(*ddp, shard(all, ctx.rank, w)).backward();
      opt.step();
      // The reference: each shard normalized alone; running stats from shard `ctx.rank`'s
      // update of rank 0's chain (the broadcast restores rank 0's before each forward).
      ref_opt.zero_grad();
      Tensor start_mean = bn->running_mean.clone(), start_var = bn->running_var.clone();
      Tensor mine_mean, mine_var, rank0_mean, rank0_var;
      Tensor total;
      for (int r = 0; r < w; ++r) {
        {
          NoGradGuard no_grad;
          bn->running_mean.copy_(start_mean);
          bn->running_var.copy_(start_var);
        }
        Tensor l = loss_of(*reference, shard(all, r, w)) / double(w);
        total = total.defined() ? total + l : l;
        if (r == 0) rank0_mean = bn->running_mean.clone(), rank0_var = bn->running_var.clone();
        if (r == ctx.rank) mine_mean = bn->running_mean.clone(), mine_var = bn->running_var.clone();
      }
      total.backward();
      ref_opt.step();
      auto ddp_bn = model->at<nn::BatchNorm2d>(1);
      EXPECT_LT(max_abs_diff(ddp_bn->running_mean, mine_mean), kTol) << "step " << step;
      EXPECT_LT(max_abs_diff(ddp_bn->running_var, mine_var), kTol) << "step " << step;
      NoGradGuard no_grad;
      bn->running_mean.copy_(rank0_mean);  // the chain the next broadcast continues
      bn->running_var.copy_(rank0_var);
    }
    EXPECT_LT(max_param_diff(*model, *reference), kTol);
    EXPECT_EQ(model->at<nn::BatchNorm2d>(1)->num_batches_tracked.item<int64_t>(), 3);
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(DistributedDataParallel, BroadcastsBuffersAtEachTrainingForwardOnly) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(2, [](RankContext& ctx) {
    auto group = new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = 10s});
    for (bool broadcast : {true, false}) {
      manual_seed(3);
      // momentum 0: the forward leaves the running statistics as they are.
      auto net = std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(3, 2),
                                                  std::make_shared<nn::BatchNorm1d>(2, 1e-5, 0.0));
      auto ddp = wrap(net, group, {.broadcast_buffers = broadcast});
      auto bn = net->at<nn::BatchNorm1d>(1);
      auto planted = [&] {
        NoGradGuard no_grad;
        if (ctx.rank == 1) bn->running_mean.fill_(7.0);
      };
      planted();
      {
        NoGradGuard no_grad;
        ddp->eval();
        ddp->forward(ones({4, 3}));  // eval: no broadcast
      }
      EXPECT_EQ(bn->running_mean.max().item<float>(), ctx.rank == 1 ? 7.0f : 0.0f);
      ddp->train();
      {
        NoGradGuard no_grad;
        ddp->forward(randn({4, 3}));
      }
      const float want = ctx.rank == 1 && !broadcast ? 7.0f : 0.0f;
      EXPECT_EQ(bn->running_mean.max().item<float>(), want) << "broadcast_buffers " << broadcast;
      EXPECT_EQ(bn->running_mean.min().item<float>(), want) << "broadcast_buffers " << broadcast;
    }
    group->barrier()->wait();
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(DDPConfigs, NoSyncAccumulationEqualsABiggerBatch) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = make_group(ctx, c);
    const int w = ctx.world_size;
    auto model = small_mlp(5, c.device);
    auto reference = small_mlp(5, c.device);
    auto ddp = wrap(model, group);
    optim::SGD opt(ddp->parameters(), {.lr = 0.2});
    optim::SGD ref_opt(reference->parameters(), {.lr = 0.2});
    for (int step = 0; step < 3; ++step) {
      // Two micro-batches per rank: the first under no_sync.
      Batch first = global_batch({6}, 4 * w, 200 + step, c.device);
      Batch second = global_batch({6}, 4 * w, 300 + step, c.device);
      opt.zero_grad();
      const uint64_t before = group->sequence_number();
      {
        auto guard = ddp->no_sync();
        (loss_of(*ddp, shard(first, ctx.rank, w)) / 2.0).backward();
      }
      EXPECT_EQ(group->sequence_number(), before) << "no_sync must not communicate";
      (loss_of(*ddp, shard(second, ctx.rank, w)) / 2.0).backward();
      EXPECT_GT(group->sequence_number(), before);
      opt.step();
      Batch both{cat({first.x, second.x}), cat({first.y, second.y})};
      ref_opt.zero_grad();
      loss_of(*reference, both).backward();
      ref_opt.step();
    }
    EXPECT_LT(max_param_diff(*model, *reference), kTol);
  });
  EXPECT_TRUE(testing::all_passed(results));
}

// A module with a layer no forward uses, and one only some ranks use.
class Branchy : public nn::UnaryModule {
 public:
  Branchy(bool use_extra, Device device) : use_extra(use_extra) {
    manual_seed(11);
    a = register_module("a", std::make_shared<nn::Linear>(6, 8));
    extra = register_module("extra", std::make_shared<nn::Linear>(8, 8));
    b = register_module("b", std::make_shared<nn::Linear>(8, 4));
    never = register_module("never", std::make_shared<nn::Linear>(8, 8));
    to(device, DType::Float64);
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = relu(a->forward(x));
    if (use_extra) h = relu(extra->forward(h));
    return b->forward(h);
  }
  std::shared_ptr<Module> clone() const override { return nullptr; }

  bool use_extra;
  std::shared_ptr<nn::Linear> a, extra, b, never;
};

TEST_P(DDPConfigs, UnusedParametersWithFindUnusedParameters) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = make_group(ctx, c);
    const int w = ctx.world_size;
    // "extra" is used on even ranks only, "never" by no rank.
    auto uses_extra = [](int r) { return r % 2 == 0; };
    for (bool views : {true, false}) {
      SCOPED_TRACE(views ? "gradients as bucket views" : "gradients copied");
      auto model = std::make_shared<Branchy>(uses_extra(ctx.rank), c.device);
      auto ddp = wrap(model, group, {.find_unused_parameters = true, .gradient_as_bucket_view = views});
      optim::SGD opt(ddp->parameters(), {.lr = 0.1});
      auto reference = std::make_shared<Branchy>(true, c.device);
      optim::SGD ref_opt(reference->parameters(), {.lr = 0.1});
      for (int step = 0; step < 3; ++step) {
        Batch all = global_batch({6}, 4 * w, 400 + step, c.device);
        if (step == 2) {
          // A defined gradient of a parameter no rank uses stays exactly as it
          // is, even where the ranks' values differ (their mean would not).
          model->never->weight.set_grad(full({8, 8}, 1.0 + ctx.rank, DType::Float64, c.device));
        } else {
          opt.zero_grad();
          ref_opt.zero_grad();
        }
        loss_of(*ddp, shard(all, ctx.rank, w)).backward();
        Tensor total;
        for (int r = 0; r < w; ++r) {
          reference->use_extra = uses_extra(r);
          Tensor l = loss_of(*reference, shard(all, r, w)) / double(w);
          total = total.defined() ? total + l : l;
        }
        total.backward();
        EXPECT_FALSE(model->never->bias.grad().defined()) << "an undefined grad must stay undefined";
        if (step == 2) {
          EXPECT_EQ(max_abs_diff(model->never->weight.grad(), full({8, 8}, 1.0 + ctx.rank, DType::Float64)), 0.0);
          model->never->weight.set_grad(Tensor());  // not to be stepped: the reference has no such gradient
        } else {
          EXPECT_FALSE(model->never->weight.grad().defined());
        }
        for (const auto& [name, p] : std::vector<std::pair<std::string, Tensor>>{
                 {"a.weight", model->a->weight}, {"extra.weight", model->extra->weight}, {"b.bias", model->b->bias}}) {
          const Tensor rp = reference->named_parameters().at(name);
          ASSERT_TRUE(p.grad().defined()) << name;
          EXPECT_LT(max_abs_diff(p.grad(), rp.grad()), kTol) << name << " step " << step;
        }
        opt.step();
        ref_opt.step();
      }
      EXPECT_LT(max_param_diff(*model, *reference), kTol);
    }
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(DistributedDataParallel, UnusedParametersWithoutTheOptionAreAnErrorNamingThem) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(2, [](RankContext& ctx) {
    auto group = new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = 10s});
    auto model = std::make_shared<Branchy>(true, kCPU);
    auto ddp = wrap(model, group);
    Batch b = global_batch({6}, 4, 1, kCPU);
    EXPECT_TRUE(
        throws_with([&] { loss_of(*ddp, b).backward(); },
                    {"DistributedDataParallel: rank " + std::to_string(ctx.rank), "2 of 8 parameters got no gradient",
                     "never.weight, never.bias", "find_unused_parameters = true"}));
    // The reducer is unusable afterwards, and says why.
    EXPECT_TRUE(throws_with([&] { ddp->forward(b.x); }, {"unusable since an earlier error", "never.weight"}));
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(DistributedDataParallel, AParameterUsedOutsideTheForwardIsAnErrorWithFindUnused) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(2, [](RankContext& ctx) {
    auto group = new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = 10s});
    auto model = std::make_shared<Branchy>(true, kCPU);
    auto ddp = wrap(model, group, {.find_unused_parameters = true});
    Batch b = global_batch({6}, 4, 1, kCPU);
    Tensor loss = loss_of(*ddp, b) + model->never->weight.sum();
    EXPECT_TRUE(throws_with([&] { loss.backward(); }, {"parameter 'never.weight' got a gradient after DDP had "
                                                       "marked it unused"}));
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(DistributedDataParallel, MismatchedModelsAreAnErrorNamingTheRankAndTheParameter) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(3, [](RankContext& ctx) {
    auto group = new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = 10s});
    // Rank 2's last layer has 5 outputs.
    auto shape_differs =
        std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 12), std::make_shared<nn::ReLU>(),
                                         std::make_shared<nn::Linear>(12, ctx.rank == 2 ? 5 : 4));
    EXPECT_TRUE(throws_with([&] { wrap(shape_differs, group); },
                            {"the ranks wrap different models: rank 2 has parameter '2.weight' [5, 12] float32 where "
                             "rank 0 has parameter '2.weight' [4, 12] float32"}));
    // Rank 1 has an extra layer; rank 2 stores float64.
    auto extra = small_mlp(1, kCPU);
    if (ctx.rank == 1) extra->push_back(std::make_shared<nn::Linear>(4, 4));
    if (ctx.rank == 2) extra->to(DType::Float32);
    EXPECT_TRUE(throws_with([&] { wrap(extra, group); },
                            {"rank 1 has the extra parameter '3.weight' [4, 4] float32 that rank 0 lacks"}));
    // Equal models still wrap (the group is fine after the errors).
    auto same = small_mlp(1, kCPU);
    wrap(same, group);
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(DistributedDataParallel, ConstructionErrors) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(1, [](RankContext& ctx) {
    auto group = new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = 10s});
    auto frozen = std::make_shared<nn::Linear>(2, 2);
    for (Tensor p : frozen->parameters()) p.set_requires_grad(false);
    EXPECT_TRUE(throws_with([&] { wrap(frozen, group); }, {"no parameter that requires grad"}));
    auto lin = std::make_shared<nn::Linear>(2, 2);
    auto ddp = wrap(lin, group);
    EXPECT_TRUE(throws_with([&] { ddp->clone(); }, {"cannot be cloned", "nn::clone(ddp->module())"}));
    EXPECT_EQ(ddp->module(), lin);
    EXPECT_EQ(ddp->state_dict().keys(), (std::vector<std::string>{"module.weight", "module.bias"}));
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(DDPConfigs, GradientsAreViewsOfTheBuckets) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = make_group(ctx, c);
    auto model = small_mlp(1, c.device);
    // 200-byte caps: several buckets.
    auto ddp = wrap(model, group, {.bucket_cap_bytes = 200, .first_bucket_cap_bytes = 100});
    Reducer& reducer = ddp->reducer();
    ASSERT_GT(reducer.bucket_indices().size(), 1u);
    optim::SGD opt(ddp->parameters(), {.lr = 0.1});
    for (int step = 0; step < 4; ++step) {
      opt.zero_grad(/*set_to_none=*/step % 2 == 0);  // dropped grads are re-viewed, zeroed ones stay views
      loss_of(*ddp, shard(global_batch({6}, 4 * ctx.world_size, step, c.device), ctx.rank, ctx.world_size)).backward();
      const auto buckets = reducer.bucket_indices();
      for (size_t b = 0; b < buckets.size(); ++b) {
        for (size_t i : buckets[b]) {
          const Tensor g = reducer.parameters()[i].grad();
          EXPECT_EQ(g.storage(), reducer.bucket_buffer(b).storage()) << "step " << step << " param " << i;
        }
      }
      opt.step();
    }
  });
  EXPECT_TRUE(testing::all_passed(results));
}

// Two layers whose order of use depends on the rank: rank 0's gradients
// arrive for A first, the others' for B first.
class Crossed : public nn::UnaryModule {
 public:
  Crossed(bool a_last, Device device) : a_last(a_last) {
    manual_seed(21);
    a = register_module("A", std::make_shared<nn::Linear>(4, 4));
    b = register_module("B", std::make_shared<nn::Linear>(4, 4));
    to(device, DType::Float64);
  }
  Tensor forward(const Tensor& x) override {
    return a_last ? a->forward(relu(b->forward(x))) : b->forward(relu(a->forward(x)));
  }
  std::shared_ptr<Module> clone() const override { return nullptr; }
  bool a_last;
  std::shared_ptr<nn::Linear> a, b;
};

TEST(DistributedDataParallel, BucketsAreRebuiltInRankZerosArrivalOrderOnEveryRank) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(3, [](RankContext& ctx) {
    auto group = new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = 10s});
    const int w = ctx.world_size;
    auto model = std::make_shared<Crossed>(ctx.rank == 0, kCPU);
    // One parameter per bucket: the bucket order is the gradient order.
    auto ddp = wrap(model, group, {.bucket_cap_bytes = 1, .first_bucket_cap_bytes = 1});
    using Names = std::vector<std::vector<std::string>>;
    EXPECT_EQ(ddp->bucket_parameter_names(), (Names{{"B.bias"}, {"B.weight"}, {"A.bias"}, {"A.weight"}}));
    // Rank 0's arrival order, recorded here on a plain copy.
    auto probe = std::make_shared<Crossed>(true, kCPU);
    std::vector<std::string> arrival;
    for (const auto& p : probe->named_parameters()) {
      Tensor t = p.value;
      std::string name = p.key;
      t.register_post_accumulate_grad_hook([&arrival, name](const Tensor&) { arrival.push_back(name); });
    }
    Batch first = global_batch({4}, 2 * w, 1, kCPU);
    loss_of(*probe, shard(first, 0, w)).backward();
    ASSERT_EQ(arrival.size(), 4u);
    EXPECT_EQ(arrival.front().substr(0, 1), "A");  // A is used last on rank 0

    optim::SGD opt(ddp->parameters(), {.lr = 0.1});
    auto reference_grads = [&](const Batch& all) {
      // The mean over the ranks of each rank's own computation.
      auto ref = std::make_shared<Crossed>(true, kCPU);
      ref->load_state_dict(model->state_dict());
      Tensor total;
      for (int r = 0; r < w; ++r) {
        ref->a_last = r == 0;
        Tensor l = loss_of(*ref, shard(all, r, w)) / double(w);
        total = total.defined() ? total + l : l;
      }
      total.backward();
      return ref;
    };
    for (int step = 0; step < 3; ++step) {
      Batch all = global_batch({4}, 2 * w, 1 + step, kCPU);
      auto ref = reference_grads(all);
      opt.zero_grad();
      loss_of(*ddp, shard(all, ctx.rank, w)).backward();
      EXPECT_EQ(ddp->reducer().buckets_rebuilt(), step > 0);
      if (step > 0) {
        Names want;
        for (const std::string& n : arrival) want.push_back({n});
        EXPECT_EQ(ddp->bucket_parameter_names(), want) << "step " << step;
      }
      for (const auto& p : model->named_parameters()) {
        EXPECT_LT(max_abs_diff(p.value.grad(), ref->named_parameters().at(p.key).grad()), kTol) << p.key;
      }
      opt.step();
    }
  });
  EXPECT_TRUE(testing::all_passed(results));
}

// Float32 gradients through a 16-bit hook are close to the exact mean.
void expect_compressed_close(const DistConfig& c, const CommHook& hook, double rtol, const char* what) {
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = make_group(ctx, c);
    auto model = small_mlp(3, c.device);
    model->to(DType::Float32);
    auto reference = small_mlp(3, c.device);
    reference->to(DType::Float32);
    auto ddp = wrap(model, group, {.bucket_cap_bytes = 256, .first_bucket_cap_bytes = 128});
    ddp->register_comm_hook(hook);
    Batch all = global_batch({6}, 8 * ctx.world_size, 9, c.device);
    Batch mine = shard(all, ctx.rank, ctx.world_size);
    mine.x = mine.x.to(DType::Float32);
    all.x = all.x.to(DType::Float32);
    loss_of(*ddp, mine).backward();
    loss_of(*reference, all).backward();
    TensorList g = model->parameters(), rg = reference->parameters();
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(g[i].grad().dtype(), DType::Float32);
      const double scale = rg[i].grad().abs().max().item<double>();
      EXPECT_LE(max_abs_diff(g[i].grad(), rg[i].grad()), rtol * scale + 1e-6) << what << " grad " << i;
    }
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(DDPConfigs, CompressionHooksAreCloseToTheExactMean) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  expect_compressed_close(GetParam(), fp16_compress_hook, 2e-3, "fp16");
  expect_compressed_close(GetParam(), bf16_compress_hook, 2e-2, "bf16");
}

TEST_P(DDPConfigs, AUserHookSeesEveryBucketInOrderAndItsResultIsUsed) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = make_group(ctx, c);
    const int w = ctx.world_size;
    auto model = small_mlp(4, c.device);
    auto ddp = wrap(model, group, {.bucket_cap_bytes = 300, .first_bucket_cap_bytes = 100});
    const size_t num_buckets = ddp->reducer().bucket_indices().size();
    ASSERT_GT(num_buckets, 1u);
    std::vector<size_t> seen;
    // The element-wise maximum over the ranks, into a tensor of the hook's own.
    ddp->register_comm_hook([&](ProcessGroup& g, GradBucket& bucket) {
      seen.push_back(bucket.index());
      EXPECT_EQ(bucket.is_last(), bucket.index() + 1 == num_buckets);
      EXPECT_EQ(bucket.gradients().size(), bucket.parameters().size());
      Tensor mine = bucket.buffer().clone();
      return BucketFuture(g.all_reduce(mine, ReduceOp::Max), mine);
    });
    EXPECT_TRUE(throws_with([&] { ddp->register_comm_hook(allreduce_hook); }, {"registered already"}));
    Batch all = global_batch({6}, 2 * w, 77, c.device);
    loss_of(*ddp, shard(all, ctx.rank, w)).backward();
    std::vector<size_t> in_order(num_buckets);
    for (size_t i = 0; i < num_buckets; ++i) in_order[i] = i;
    EXPECT_EQ(seen, in_order);
    // Every rank's own gradients, computed here, and their maximum.
    auto plain = small_mlp(4, c.device);
    std::vector<Tensor> most;
    for (int r = 0; r < w; ++r) {
      plain->zero_grad();
      loss_of(*plain, shard(all, r, w)).backward();
      TensorList ps = plain->parameters();
      for (size_t i = 0; i < ps.size(); ++i) {
        if (r == 0) most.push_back(ps[i].grad().clone());
        else most[i] = maximum(most[i], ps[i].grad());
      }
    }
    TensorList g = model->parameters();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_EQ(max_abs_diff(g[i].grad(), most[i]), 0.0) << i;
  });
  EXPECT_TRUE(testing::all_passed(results));
}

// A channels-last conv weight's gradient is a bucket view strided like the
// weight, and the hook's gradients() are those views (a flat reading of the
// bucket would permute C, H and W); the reduced gradients are the mean of
// each rank's own, computed by an NCHW twin.
TEST_P(DDPConfigs, ChannelsLastGradientsAreBucketViewsAsTheHookSeesThem) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = make_group(ctx, c);
    const int w = ctx.world_size;
    auto make = [&] {
      manual_seed(21);
      auto net =
          std::make_shared<nn::Sequential>(std::make_shared<nn::Conv2d>(2, 3, 3, 1, 1), std::make_shared<nn::ReLU>(),
                                           std::make_shared<nn::Flatten>(), std::make_shared<nn::Linear>(75, 4));
      net->to(c.device, DType::Float64);
      return net;
    };
    auto model = make(), twin = make();
    model->to(MemoryFormat::ChannelsLast);
    auto ddp = wrap(model, group);
    int channels_last_seen = 0;
    ddp->register_comm_hook([&](ProcessGroup& g, GradBucket& bucket) {
      for (size_t i = 0; i < bucket.parameters().size(); ++i) {
        const Tensor& p = bucket.parameters()[i];
        const Tensor& view = bucket.gradients()[i];
        EXPECT_EQ(view.data_ptr(), p.grad().data_ptr()) << i;
        EXPECT_EQ(max_abs_diff(view, p.grad()), 0.0) << i;
        if (p.suggest_memory_format() == MemoryFormat::ChannelsLast) {
          EXPECT_EQ(view.strides(), p.strides()) << i;
          ++channels_last_seen;
        }
      }
      return allreduce_hook(g, bucket);
    });
    Batch all = global_batch({2, 5, 5}, 2 * w, 31, c.device);
    loss_of(*ddp, shard(all, ctx.rank, w)).backward();
    EXPECT_EQ(channels_last_seen, 1);
    std::vector<Tensor> mean;
    for (int r = 0; r < w; ++r) {
      twin->zero_grad();
      loss_of(*twin, shard(all, r, w)).backward();
      TensorList ps = twin->parameters();
      for (size_t i = 0; i < ps.size(); ++i) {
        Tensor share = ps[i].grad() / double(w);
        if (r == 0) mean.push_back(share);
        else mean[i] = mean[i] + share;
      }
    }
    TensorList g = model->parameters();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_LT(max_abs_diff(g[i].grad(), mean[i]), kTol) << i;
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(DistributedDataParallel, GradScalerSkipsTheSameStepOnEveryRank) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(3, [](RankContext& ctx) {
    auto group = new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = 10s});
    auto model = small_mlp(8, kCPU);
    model->to(DType::Float32);
    auto ddp = wrap(model, group);
    optim::SGD opt(ddp->parameters(), {.lr = 0.05});
    amp::GradScaler scaler({.init_scale = 1024.0, .growth_interval = 2});
    std::vector<double> scales;
    for (int step = 0; step < 6; ++step) {
      Batch b = shard(global_batch({6}, 12, 60 + step, kCPU), ctx.rank, 3);
      b.x = b.x.to(DType::Float32);
      if (step == 3 && ctx.rank == 1) {
        NoGradGuard no_grad;
        b.x.narrow(0, 0, 1).fill_(std::numeric_limits<float>::infinity());  // only rank 1 overflows
      }
      opt.zero_grad();
      scaler.scale(loss_of(*ddp, b)).backward();
      scaler.step(opt);
      scaler.update();
      scales.push_back(scaler.get_scale());
    }
    EXPECT_EQ(scaler.skipped_steps(), 1);
    // Grown at steps 1 and 5 (every 2 good steps), halved at step 3.
    EXPECT_EQ(scales, (std::vector<double>{1024, 2048, 2048, 1024, 1024, 2048}));
    // Every rank took the same steps.
    for (const Tensor& p : model->parameters()) {
      auto all = testing::gather_all(*group, p);
      for (int r = 1; r < 3; ++r) EXPECT_EQ(all[r], all[0]);
    }
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(DDPConfigs, ActivationCheckpointingUnderDDPEqualsPlainDDP) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = make_group(ctx, c);
    auto deep = [&] {
      manual_seed(31);
      auto net = std::make_shared<nn::Sequential>();
      for (int i = 0; i < 4; ++i) {
        net->push_back(std::make_shared<nn::Linear>(6, 6));
        net->push_back(std::make_shared<nn::Tanh>());
      }
      net->push_back(std::make_shared<nn::Linear>(6, 4));
      net->to(c.device, DType::Float64);
      return net;
    };
    auto plain_model = deep(), ckpt_model = deep();
    auto plain = wrap(plain_model, group), ckpt = wrap(ckpt_model, group);
    optim::Adam plain_opt(plain->parameters(), {.lr = 0.01}), ckpt_opt(ckpt->parameters(), {.lr = 0.01});
    int fired = 0;
    for (Tensor p : ckpt_model->parameters()) p.register_post_accumulate_grad_hook([&](const Tensor&) { ++fired; });
    for (int step = 0; step < 3; ++step) {
      Batch b = shard(global_batch({6}, 4 * ctx.world_size, 90 + step, c.device), ctx.rank, ctx.world_size);
      plain_opt.zero_grad();
      loss_of(*plain, b).backward();
      plain_opt.step();
      ckpt_opt.zero_grad();
      Tensor out = ckpt->forward_with([&] { return checkpoint_sequential(*ckpt_model, 3, b.x); });
      nn::functional::cross_entropy(out, b.y).backward();
      ckpt_opt.step();
    }
    EXPECT_EQ(fired, 3 * int(ckpt_model->parameters().size())) << "each hook fires once per backward";
    EXPECT_EQ(max_param_diff(*plain_model, *ckpt_model), 0.0);
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(DDPConfigs, AutogradGradSynchronizesNothing) {
  SKIP_UNLESS_RUNNABLE(GetParam());
  const DistConfig c = GetParam();
  auto results = testing::run_ranks(c.world_size, [&](RankContext& ctx) {
    auto group = make_group(ctx, c);
    auto model = small_mlp(2, c.device);
    auto ddp = wrap(model, group);
    Batch all = global_batch({6}, 2 * ctx.world_size, 5, c.device);
    Batch mine = shard(all, ctx.rank, ctx.world_size);
    Tensor loss = loss_of(*ddp, mine);
    const uint64_t before = group->sequence_number();
    TensorList g = autograd::grad({loss}, {model->at<nn::Linear>(0)->weight}, {}, /*retain_graph=*/true);
    EXPECT_EQ(group->sequence_number(), before);
    auto plain = small_mlp(2, c.device);
    loss_of(*plain, mine).backward();
    EXPECT_EQ(max_abs_diff(g[0], plain->at<nn::Linear>(0)->weight.grad()), 0.0) << "this rank's own gradient";
    // The backward that follows is synchronized as usual.
    loss.backward();
    EXPECT_GT(group->sequence_number(), before);
  });
  EXPECT_TRUE(testing::all_passed(results));
}

// A rank that exits mid-training: the others fail with the process group's
// error within its timeout, out of backward().
TEST(DistributedDataParallel, ARankExitingMidTrainingFailsTheOthersWithinTheTimeout) {
  REQUIRE_GLOO();
  const int64_t timeout_ms = 3000;
  auto results = testing::run_ranks(3, [&](RankContext& ctx) {
    auto group =
        new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = std::chrono::milliseconds(timeout_ms)});
    auto model = small_mlp(1, kCPU);
    auto ddp = wrap(model, group);
    optim::SGD opt(ddp->parameters(), {.lr = 0.1});
    std::string error;
    auto start = std::chrono::steady_clock::now();
    for (int step = 0; step < 20; ++step) {
      if (ctx.rank == 1 && step == 3) {
        std::this_thread::sleep_for(300ms);
        _exit(3);
      }
      try {
        opt.zero_grad();
        loss_of(*ddp, shard(global_batch({6}, 12, step, kCPU), ctx.rank, 3)).backward();
        opt.step();
      } catch (const Error& e) {
        error = e.what();
        EXPECT_EQ(step, 3) << error;
        break;
      }
    }
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    EXPECT_LT(waited.count(), timeout_ms + 2000);
    EXPECT_NE(error.find("gloo all_reduce"), std::string::npos) << error;
    EXPECT_NE(error.find("failed on rank " + std::to_string(ctx.rank)), std::string::npos) << error;
    // The next forward says the reduction broke.
    EXPECT_TRUE(throws_with([&] { ddp->forward(ones({1, 6}, DType::Float64)); }, {"unusable since an earlier error"}));
  });
  for (const auto& r : results) {
    if (r.rank == 1) {
      EXPECT_FALSE(r.reported);
      EXPECT_EQ(r.exit_code, 3);
    } else {
      EXPECT_TRUE(r.passed) << "rank " << r.rank << ": " << r.message;
      EXPECT_FALSE(r.hit_deadline);
    }
  }
}

TEST(Reducer, BucketsFollowTheOrderTheCapsAndTheDTypes) {
  // 4-byte float32 elements: sizes 100, 200, 300 floats and a float64 pair.
  TensorList params = {zeros({100}), zeros({200}), zeros({300}), zeros({2}, DType::Float64), zeros({50})};
  std::vector<size_t> reverse = {4, 3, 2, 1, 0};
  using Buckets = std::vector<std::vector<size_t>>;
  // First float32 bucket closes at >= 1000 bytes (50 + 300 floats = 1400), later ones at 1600.
  EXPECT_EQ(compute_buckets(params, reverse, 1000, 1600), (Buckets{{4, 2}, {3}, {1, 0}}));
  // Huge caps: one bucket per dtype, ordered by their first parameter.
  EXPECT_EQ(compute_buckets(params, reverse, 1 << 30, 1 << 30), (Buckets{{4, 2, 1, 0}, {3}}));
  // Tiny caps: one parameter each, in the given order.
  EXPECT_EQ(compute_buckets(params, {0, 1, 2, 3, 4}, 1, 1), (Buckets{{0}, {1}, {2}, {3}, {4}}));
  EXPECT_TRUE(throws_with([&] { compute_buckets(params, reverse, 0, 10); }, {"bucket caps must be positive"}));
}

}  // namespace
}  // namespace ember::parallel
