// The gloo backend with 2 and 4 ranks (forked processes): every collective,
// reduction and dtype against values computed here independently,
// coalesced lists, asynchronous Work, barrier, numbering, argument errors,
// the EMBER_DISTRIBUTED_DEBUG check, group creation that times out, a rank
// that is too slow, and ranks that exit in the middle of a loop of
// collectives (an ordinary rank and rank 0, which serves the store).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "ember/parallel/distributed/init.h"
#include "ember/parallel/distributed/store/socket.h"
#include "support/collective_values.h"
#include "support/error_message.h"
#include "support/multiprocess.h"

namespace ember::parallel {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::error_of;
using testing::expected_reduction;
using testing::rank_tensor;
using testing::rank_value;
using testing::rank_values;
using testing::RankContext;
using testing::throws_with;
using testing::values_of;

const DType kDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64};

// Skips the test when this ember has no gloo backend.
#define REQUIRE_GLOO()                                                                   \
  do {                                                                                   \
    if (!backend_available("gloo")) GTEST_SKIP() << "this ember was built without Gloo"; \
  } while (0)

std::shared_ptr<ProcessGroup> group_of(RankContext& ctx, std::chrono::milliseconds timeout = 10s,
                                       std::optional<bool> debug = false) {
  return new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = timeout, .debug = debug});
}

class GlooRanks : public ::testing::TestWithParam<int> {};
INSTANTIATE_TEST_SUITE_P(Sizes, GlooRanks, ::testing::Values(2, 4),
                         [](const auto& info) { return std::to_string(info.param) + "ranks"; });

TEST_P(GlooRanks, AllReduceEveryOpAndDType) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(GetParam(), [](RankContext& ctx) {
    auto group = group_of(ctx);
    for (DType dtype : kDTypes) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
        if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
        Tensor t = rank_tensor(ctx.rank, 37, dtype);
        group->all_reduce(t, op)->wait();
        EXPECT_EQ(t.dtype(), dtype);
        EXPECT_EQ(values_of(t), expected_reduction(op, ctx.world_size, 37))
            << dtype_name(dtype) << " " << reduce_op_name(op);
      }
    }
    group->barrier()->wait();
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(GlooRanks, AllReduceOfALargeTensorAndOfNaN) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(GetParam(), [](RankContext& ctx) {
    auto group = group_of(ctx);
    // Several of Gloo's 1 MiB segments.
    const int64_t n = 3 * (1 << 18) + 5;
    Tensor big = rank_tensor(ctx.rank, n, DType::Float32);
    group->all_reduce(big)->wait();
    EXPECT_EQ(values_of(big), expected_reduction(ReduceOp::Sum, ctx.world_size, n));
    // NaN wins max and min, whichever rank has it.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min}) {
      Tensor t = from_vector<float>({ctx.rank == 1 ? nan : 1.0f, float(ctx.rank)});
      group->all_reduce(t, op)->wait();
      std::vector<float> v = to_vector<float>(t);
      EXPECT_TRUE(std::isnan(v[0])) << reduce_op_name(op);
      EXPECT_EQ(v[1], op == ReduceOp::Max ? float(ctx.world_size - 1) : 0.0f);
    }
    group->barrier()->wait();
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(GlooRanks, CoalescedAllReduceAndBroadcastOfTensorLists) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(GetParam(), [](RankContext& ctx) {
    auto group = group_of(ctx);
    TensorList ts = {rank_tensor(ctx.rank, 6, DType::Float64).view({2, 3}), rank_tensor(ctx.rank, 1, DType::Float64, 6),
                     rank_tensor(ctx.rank, 5, DType::Float64, 7)};
    auto work = group->all_reduce(ts, ReduceOp::Max);
    work->wait();
    std::vector<double> all = expected_reduction(ReduceOp::Max, ctx.world_size, 12);
    EXPECT_EQ(values_of(ts[0]), std::vector<double>(all.begin(), all.begin() + 6));
    EXPECT_EQ(ts[0].shape(), (Shape{2, 3}));
    EXPECT_EQ(values_of(ts[1]), std::vector<double>(all.begin() + 6, all.begin() + 7));
    EXPECT_EQ(values_of(ts[2]), std::vector<double>(all.begin() + 7, all.end()));
    EXPECT_EQ(work->sequence_number(), 1u);  // one collective for the whole list

    for (int root = 0; root < ctx.world_size; ++root) {
      TensorList bs = {rank_tensor(ctx.rank, 4, DType::Int32), rank_tensor(ctx.rank, 3, DType::Int32, 4)};
      group->broadcast(bs, root)->wait();
      std::vector<double> want;
      for (int64_t i = 0; i < 7; ++i) want.push_back(rank_value(root, i));
      EXPECT_EQ(values_of(bs[0]), std::vector<double>(want.begin(), want.begin() + 4)) << "root " << root;
      EXPECT_EQ(values_of(bs[1]), std::vector<double>(want.begin() + 4, want.end())) << "root " << root;
    }
    group->barrier()->wait();
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(GlooRanks, BroadcastEveryDTypeFromEveryRoot) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(GetParam(), [](RankContext& ctx) {
    auto group = group_of(ctx);
    for (DType dtype : kDTypes) {
      for (int root = 0; root < ctx.world_size; ++root) {
        Tensor t = rank_tensor(ctx.rank, 9, dtype).view({3, 3});
        group->broadcast(t, root)->wait();
        EXPECT_EQ(values_of(t), values_of(rank_tensor(root, 9, dtype))) << dtype_name(dtype) << " root " << root;
      }
    }
    group->barrier()->wait();
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(GlooRanks, AllGatherIntoListsAndTensors) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(GetParam(), [](RankContext& ctx) {
    auto group = group_of(ctx);
    const int n = ctx.world_size;
    for (DType dtype : kDTypes) {
      Tensor input = rank_tensor(ctx.rank, 6, dtype).view({2, 3});
      // Outputs that are separate allocations.
      TensorList outs;
      for (int r = 0; r < n; ++r) outs.push_back(zeros({2, 3}, dtype));
      group->all_gather(outs, input)->wait();
      for (int r = 0; r < n; ++r) EXPECT_EQ(values_of(outs[r]), values_of(rank_tensor(r, 6, dtype))) << r;
      // One tensor, stacked and concatenated.
      Tensor stacked = zeros({n, 2, 3}, dtype);
      Tensor concatenated = zeros({2 * n, 3}, dtype);
      group->all_gather_into_tensor(stacked, input)->wait();
      group->all_gather_into_tensor(concatenated, input)->wait();
      std::vector<double> want;
      for (int r = 0; r < n; ++r) {
        std::vector<double> v = values_of(rank_tensor(r, 6, dtype));
        want.insert(want.end(), v.begin(), v.end());
      }
      EXPECT_EQ(values_of(stacked), want) << dtype_name(dtype);
      EXPECT_EQ(values_of(concatenated), want) << dtype_name(dtype);
    }
    // The input may be this rank's block of the output already.
    Tensor out = zeros({n, 4});
    Tensor mine = out[ctx.rank];
    mine.copy_(rank_tensor(ctx.rank, 4, DType::Float32));
    group->all_gather_into_tensor(out, mine)->wait();
    for (int r = 0; r < n; ++r) EXPECT_EQ(values_of(out[r]), values_of(rank_tensor(r, 4, DType::Float32)));
    group->barrier()->wait();
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(GlooRanks, ReduceScatterEveryOpAndDType) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(GetParam(), [](RankContext& ctx) {
    auto group = group_of(ctx);
    const int n = ctx.world_size;
    const int64_t block = 5;
    for (DType dtype : kDTypes) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
        if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
        // Block b of every rank's data holds that rank's values at offset b * block.
        TensorList inputs;
        for (int b = 0; b < n; ++b) inputs.push_back(rank_tensor(ctx.rank, block, dtype, b * block));
        Tensor output = zeros({block}, dtype);
        group->reduce_scatter(output, inputs, op)->wait();
        std::vector<double> want = expected_reduction(op, n, block, ctx.rank * block);
        EXPECT_EQ(values_of(output), want) << dtype_name(dtype) << " " << reduce_op_name(op);
        // The inputs are untouched.
        EXPECT_EQ(values_of(inputs[0]), values_of(rank_tensor(ctx.rank, block, dtype)));

        Tensor flat = rank_tensor(ctx.rank, n * block, dtype).view({n, block});
        Tensor out2 = zeros({block}, dtype);
        group->reduce_scatter_tensor(out2, flat, op)->wait();
        EXPECT_EQ(values_of(out2), want) << dtype_name(dtype) << " " << reduce_op_name(op);
      }
    }
    group->barrier()->wait();
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST_P(GlooRanks, CollectivesAreAsynchronousAndRunInIssueOrder) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(GetParam(), [](RankContext& ctx) {
    auto group = group_of(ctx);
    group->barrier()->wait();
    // The last rank starts late: the others' calls must return at once anyway.
    if (ctx.rank == ctx.world_size - 1) std::this_thread::sleep_for(300ms);
    auto start = Clock::now();
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<Work>> works;
    for (int k = 0; k < 8; ++k) {
      ts.push_back(full({16}, double(ctx.rank + k), DType::Float64));
      works.push_back(group->all_reduce(ts.back()));
    }
    auto issued = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    if (ctx.rank != ctx.world_size - 1) {
      EXPECT_LT(issued, 150) << "issuing blocked";
      EXPECT_FALSE(works[0]->is_completed());
    }
    for (int k = 7; k >= 0; --k) works[k]->wait();  // any order of waiting
    const int n = ctx.world_size;
    for (int k = 0; k < 8; ++k) {
      EXPECT_TRUE(works[k]->is_completed());
      EXPECT_TRUE(works[k]->is_success());
      EXPECT_EQ(works[k]->exception(), nullptr);
      EXPECT_EQ(works[k]->op(), "all_reduce");
      EXPECT_EQ(works[k]->sequence_number(), uint64_t(k + 2));
      EXPECT_EQ(values_of(ts[k]), std::vector<double>(16, n * (n - 1) / 2.0 + n * k));
    }
    EXPECT_EQ(group->sequence_number(), 9u);
    group->barrier()->wait();
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(GlooProcessGroup, BarrierWaitsForTheLastRank) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(3, [](RankContext& ctx) {
    auto group = group_of(ctx);
    group->barrier()->wait();
    auto start = Clock::now();
    if (ctx.rank == 2) std::this_thread::sleep_for(300ms);
    group->barrier()->wait();
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    EXPECT_GE(waited, 200) << "rank " << ctx.rank << " left the barrier before rank 2 arrived";
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(GlooProcessGroup, ZeroSizedTensorsAndOneRankGroups) {
  REQUIRE_GLOO();
  auto store = std::make_shared<TCPStore>("127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = 5s});
  auto group = new_group("gloo", store, 0, 1, {.timeout = 5s});
  EXPECT_STREQ(group->backend(), "gloo");
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  Tensor t = rank_tensor(0, 5, DType::Float32);
  group->all_reduce(t, ReduceOp::Avg)->wait();
  EXPECT_EQ(values_of(t), values_of(rank_tensor(0, 5, DType::Float32)));
  Tensor out = zeros({1, 5});
  group->all_gather_into_tensor(out, t)->wait();
  EXPECT_EQ(values_of(out), values_of(t));
  Tensor empty_t = zeros({0, 3});
  group->all_reduce(empty_t)->wait();
  group->broadcast(empty_t)->wait();
  group->barrier()->wait();
  EXPECT_EQ(group->sequence_number(), 5u);
}

TEST(GlooProcessGroup, ArgumentErrorsNameTheOpShapesAndDTypes) {
  REQUIRE_GLOO();
  auto store = std::make_shared<TCPStore>("127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = 5s});
  auto g = new_group("gloo", store, 0, 1, {.timeout = 5s});
  Tensor a = zeros({4, 3});
  EXPECT_TRUE(throws_with([&] { g->all_reduce(a.t()); },
                          {"all_reduce", "[3, 4] float32 on cpu", "not contiguous", "contiguous()"}));
  EXPECT_TRUE(throws_with([&] { g->all_reduce(zeros({2}, DType::Bool)); }, {"all_reduce", "bool"}));
  EXPECT_TRUE(throws_with(
      [&] {
        g->all_reduce(TensorList{a, zeros({2}, DType::Float64)});
      },
      {"all_reduce", "tensors[1] is [2] float64 on cpu", "tensors[0] is [4, 3] float32 on cpu", "share a dtype"}));
  EXPECT_TRUE(throws_with([&] { g->all_reduce(TensorList{}); }, {"all_reduce", "empty"}));
  EXPECT_TRUE(throws_with([&] { g->all_reduce(Tensor()); }, {"all_reduce", "undefined"}));
  EXPECT_TRUE(throws_with([&] { g->all_reduce(zeros({2}, DType::Int64), ReduceOp::Avg); },
                          {"all_reduce", "ReduceOp::Avg needs a floating dtype", "int64"}));
  EXPECT_TRUE(throws_with([&] { g->broadcast(a, 1); }, {"broadcast", "root 1", "group of 1"}));
  EXPECT_TRUE(throws_with([&] { g->all_gather({a, a}, a); }, {"all_gather", "got 2 outputs", "group of 1"}));
  EXPECT_TRUE(throws_with([&] { g->all_gather({zeros({3})}, a); },
                          {"all_gather", "outputs[0] is [3] float32 on cpu", "the input is [4, 3] float32 on cpu"}));
  EXPECT_TRUE(throws_with(
      [&] {
        g->all_gather_into_tensor(zeros({5, 3}), a);
      },
      {"all_gather_into_tensor", "[5, 3]", "must be [1, 4, 3] or [4, 3]"}));
  EXPECT_TRUE(throws_with([&] { g->reduce_scatter(zeros({4}), {zeros({4}, DType::Int32)}); },
                          {"reduce_scatter", "inputs[0] is [4] int32 on cpu", "the output is [4] float32 on cpu"}));
  EXPECT_TRUE(throws_with([&] { g->reduce_scatter_tensor(zeros({2}), zeros({3}, DType::Float64)); },
                          {"reduce_scatter_tensor", "[3] float64", "[2] float32", "same dtype"}));
  // Nothing was issued by the failed calls.
  EXPECT_EQ(g->sequence_number(), 0u);
}

TEST(GlooProcessGroup, WrittenTensorsGetANewVersion) {
  REQUIRE_GLOO();
  auto store = std::make_shared<TCPStore>("127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = 5s});
  auto g = new_group("gloo", store, 0, 1, {.timeout = 5s});
  Tensor t = zeros({3});
  uint32_t before = t.version();
  g->all_reduce(t)->wait();
  EXPECT_GT(t.version(), before);
}

TEST(GlooProcessGroup, DebugModeReportsTheFirstMismatchingRank) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(4, [](RankContext& ctx) {
    setenv("EMBER_DISTRIBUTED_DEBUG", "1", 1);  // this child's own environment
    auto group = new_group("gloo", ctx.store, ctx.rank, ctx.world_size, {.timeout = 5s});
    EXPECT_TRUE(group->debug());
    // Matching collectives pass the check.
    Tensor t = rank_tensor(ctx.rank, 4, DType::Float32);
    group->all_reduce(t)->wait();
    group->broadcast(t, 1)->wait();
    EXPECT_EQ(values_of(t), expected_reduction(ReduceOp::Sum, ctx.world_size, 4)) << "debug mode changed a result";
    // Rank 2 passes a different shape; rank 3 a different op. Every rank
    // reports rank 2, the first that differs from rank 0.
    std::string error = error_of([&] {
      if (ctx.rank == 3) {
        group->broadcast(zeros({4}), 0)->wait();
      } else {
        group->all_reduce(zeros({ctx.rank == 2 ? 5 : 4}))->wait();
      }
    });
    EXPECT_NE(error.find("EMBER_DISTRIBUTED_DEBUG"), std::string::npos) << error;
    EXPECT_NE(error.find("#3"), std::string::npos) << error;
    EXPECT_NE(error.find("rank 0 calls all_reduce(sum) of [4] float32 on cpu"), std::string::npos) << error;
    EXPECT_NE(error.find("rank 2 calls all_reduce(sum) of [5] float32 on cpu"), std::string::npos) << error;
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(GlooProcessGroup, DebugModeNamesARankThatNeverArrives) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(2, [](RankContext& ctx) {
    auto group = group_of(ctx, 500ms, true);
    if (ctx.rank == 0) {
      EXPECT_TRUE(throws_with([&] { group->all_reduce(zeros({2})); },
                              {"EMBER_DISTRIBUTED_DEBUG", "rank 0", "all_reduce #1", "500 ms",
                               "Rank 1 of 2 did not "
                               "arrive at #1 (last collective started: rank 1 none yet)"}));
    }
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(GlooProcessGroup, DebugVariableMustBeZeroOrOne) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(1, [](RankContext& ctx) {
    setenv("EMBER_DISTRIBUTED_DEBUG", "yes", 1);
    EXPECT_TRUE(throws_with([&] { new_group("gloo", ctx.store, 0, 1); }, {"EMBER_DISTRIBUTED_DEBUG='yes'", "0 nor 1"}));
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(GlooProcessGroup, CreationTimesOutNamingTheMissingRanks) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(3, [](RankContext& ctx) {
    if (ctx.rank == 2) return;  // never makes the group
    auto start = Clock::now();
    EXPECT_TRUE(throws_with([&] { group_of(ctx, 400ms); },
                            {"process group 'pg", "waited 400 ms for all 3 ranks to join", "rank 2 did not"}));
    EXPECT_LT(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count(), 3000);
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(GlooProcessGroup, ASlowRankMakesTheOthersTimeOutWithAReport) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(2, [](RankContext& ctx) {
    auto group = group_of(ctx, 1000ms);
    Tensor t = zeros({8});
    group->all_reduce(t)->wait();
    group->all_reduce(t)->wait();
    if (ctx.rank == 1) {
      std::this_thread::sleep_for(2500ms);  // far past the timeout
      // The others gave up and closed their connections: this one fails too.
      EXPECT_TRUE(throws_with([&] { group->all_reduce(t)->wait(); }, {"gloo all_reduce #3", "rank 1 of 2"}));
      return;
    }
    auto start = Clock::now();
    std::string error = error_of([&] { group->all_reduce(t)->wait(); });
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    EXPECT_GE(waited, 900);
    EXPECT_LT(waited, 2400);
    for (const char* part :
         {"gloo all_reduce #3 (sum) of [8] float32 on cpu failed on rank 0 of 2", "timeout 1000 ms", "Timed out",
          "Rank 1 of 2 did not arrive at #3 (last collective started: rank 1 #2 "
          "all_reduce)"}) {
      EXPECT_NE(error.find(part), std::string::npos) << "missing \"" << part << "\" in: " << error;
    }
    // The group is unusable now, and says why.
    EXPECT_TRUE(
        throws_with([&] { group->all_reduce(t); }, {"unusable since an earlier collective failed", "all_reduce #3"}));
  });
  EXPECT_TRUE(testing::all_passed(results));
}

// One rank exits in the middle of a loop of collectives; every other rank
// fails within the timeout with an error naming the collective, its number
// and the missing rank.
void rank_exits_mid_loop(int world_size, int dying, int64_t timeout_ms) {
  auto results = testing::run_ranks(world_size, [=](RankContext& ctx) {
    auto group = group_of(ctx, std::chrono::milliseconds(timeout_ms));
    Tensor t = ones({1000});
    std::string error;
    auto start = Clock::now();
    for (int step = 0; step < 20; ++step) {
      if (ctx.rank == dying && step == 5) {
        // A crash: no cleanup, no goodbye. The pause lets the others finish
        // #5 first (a socket closed with unread data resets the connection,
        // which could fail their #5 instead), so that every survivor fails #6.
        std::this_thread::sleep_for(300ms);
        _exit(3);
      }
      try {
        group->all_reduce(t)->wait();
      } catch (const Error& e) {
        error = e.what();
        EXPECT_EQ(step, 5) << error;
        break;
      }
    }
    auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    EXPECT_LT(waited, timeout_ms + 1500) << "failing took longer than the timeout";
    for (const char* part : {"gloo all_reduce #6 (sum) of [1000] float32 on cpu failed on rank"}) {
      EXPECT_NE(error.find(part), std::string::npos) << "missing \"" << part << "\" in: " << error;
    }
    if (dying != 0) {
      std::string behind = "did not arrive at #6 (last collective started: ";
      std::string names = "rank " + std::to_string(dying) + " #5 all_reduce";
      EXPECT_NE(error.find(behind), std::string::npos) << error;
      EXPECT_NE(error.find(names), std::string::npos) << error;
    } else {
      EXPECT_NE(error.find("store cannot be reached"), std::string::npos) << error;
      EXPECT_NE(error.find("rank 0 has probably exited"), std::string::npos) << error;
    }
  });
  for (const auto& r : results) {
    if (r.rank == dying) {
      EXPECT_FALSE(r.reported);
      EXPECT_EQ(r.exit_code, 3);
    } else {
      EXPECT_TRUE(r.passed && r.exit_code == 0) << "rank " << r.rank << ": " << r.message;
      EXPECT_FALSE(r.hit_deadline);
    }
  }
}

TEST(GlooProcessGroup, RankExitingMidLoopFailsTheOthers) {
  REQUIRE_GLOO();
  rank_exits_mid_loop(4, 2, 3000);
}

TEST(GlooProcessGroup, StoreServingRankExitingMidLoopFailsTheOthers) {
  REQUIRE_GLOO();
  rank_exits_mid_loop(3, 0, 3000);
}

TEST(ProcessGroupInit, EnvInitializationAndTheDefaultGroup) {
  REQUIRE_GLOO();
  auto results = testing::run_ranks(3, [](RankContext& ctx) {
    // Rank 0 picks the port of the env:// store and tells the others.
    if (ctx.rank == 0) ctx.store->set("port", std::to_string(detail::free_port()));
    std::string port = ctx.store->get("port");
    setenv("RANK", std::to_string(ctx.rank).c_str(), 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", port.c_str(), 1);
    EXPECT_FALSE(is_initialized());
    EXPECT_TRUE(throws_with([] { get_rank(); }, {"no default process group", "init_process_group"}));
    init_process_group("gloo", {.timeout = 5s});
    EXPECT_TRUE(is_initialized());
    EXPECT_EQ(get_rank(), ctx.rank);
    EXPECT_EQ(get_world_size(), 3);
    EXPECT_STREQ(default_group()->backend(), "gloo");
    EXPECT_TRUE(throws_with([] { init_process_group("gloo"); }, {"exists already", "destroy_process_group"}));
    Tensor t = full({3}, double(ctx.rank + 1));
    all_reduce(t);
    EXPECT_EQ(to_vector<float>(t), std::vector<float>(3, 6.0f));
    Tensor b = full({2}, double(ctx.rank));
    broadcast(b, 2);
    EXPECT_EQ(to_vector<float>(b), std::vector<float>(2, 2.0f));
    TensorList outs = {zeros({1}), zeros({1}), zeros({1})};
    all_gather(outs, full({1}, double(ctx.rank * 10)));
    for (int r = 0; r < 3; ++r) EXPECT_EQ(outs[r].item<float>(), 10.0f * r);
    Tensor piece = zeros({1});
    reduce_scatter(piece, {full({1}, 1.0), full({1}, 2.0), full({1}, 3.0)});
    EXPECT_EQ(piece.item<float>(), 3.0f * (ctx.rank + 1));
    barrier();
    destroy_process_group();
    EXPECT_FALSE(is_initialized());
    EXPECT_TRUE(throws_with([] { destroy_process_group(); }, {"no default process group"}));
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(ProcessGroupInit, UnknownBackendsAndMissingVariables) {
  auto store = std::make_shared<TCPStore>("127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = 1s});
  std::string have = "this build has: ";
  for (const std::string& b : available_backends()) have += (b == available_backends()[0] ? "" : ", ") + b;
  if (available_backends().empty()) have += "none";
  EXPECT_TRUE(throws_with([&] { new_group("ucc", store, 0, 1); }, {"unknown backend 'ucc'", have}));
  EXPECT_TRUE(throws_with([&] { init_process_group("mpi", store, 0, 1); }, {"unknown backend 'mpi'"}));
  EXPECT_FALSE(is_initialized());
  if (!backend_available("gloo")) {
    EXPECT_TRUE(throws_with([&] { new_group("gloo", store, 0, 1); }, {"built without Gloo", "libgloo-dev"}));
  }
}

}  // namespace
}  // namespace ember::parallel
