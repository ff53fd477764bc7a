// The nccl backend.
// - CPU-only build: new_group/init_process_group("nccl") say that this ember
//   has no CUDA and what to use instead.
// - CUDA build without a GPU: creating a group says that no device is
//   visible, before it joins the group; creation turns NVLS off unless the
//   user set NCCL_NVLS_ENABLE.
// - One GPU (world size 1, in this process): every op and dtype against the
//   values computed on the CPU, ordering after the caller's current stream
//   without blocking the host, the blocking waits (barrier,
//   nccl_blocking_wait), argument errors, init_process_group("nccl").
// - Two or more GPUs (one forked process per GPU): the reductions across
//   ranks (with separate output and input tensors, which all_gather and
//   reduce_scatter stage through one buffer), a rank that never arrives at
//   the first collective or at a later one (the timeout), and a rank that
//   exits mid-loop.
// A test that needs GPUs it does not have skips, saying so. The forked tests
// need a process that has not used CUDA before the fork (ctest runs each
// test in a process of its own).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "ember/ember.h"
#include "ember/parallel/distributed/init.h"
#include "support/collective_values.h"
#include "support/error_message.h"
#include "support/multiprocess.h"
#ifdef EMBER_WITH_CUDA
#include "ember/core/cuda/busy_wait.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/stream.h"
#include "ember/parallel/distributed/backend/nccl_process_group.h"
#endif

namespace ember::parallel {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::error_of;
using testing::expected_reduction;
using testing::gpus_visible_to_forks;
using testing::rank_tensor;
using testing::rank_value;
using testing::rank_values;
using testing::RankContext;
using testing::throws_with;
using testing::values_of;

std::shared_ptr<TCPStore> local_store() {
  return std::make_shared<TCPStore>("127.0.0.1", 0, TCPStoreOptions{.is_server = true, .timeout = 10s});
}

#ifndef EMBER_WITH_CUDA

TEST(NcclBackend, ACpuOnlyBuildSaysHowToGetIt) {
  EXPECT_FALSE(backend_available("nccl"));
  auto store = local_store();
  for (auto make : std::vector<std::function<void()>>{
           [&] { new_group("nccl", store, 0, 1); }, [&] { init_process_group("nccl", store, 0, 1); },
           [] { init_process_group("nccl"); }}) {  // before it reads the environment
    EXPECT_TRUE(
        throws_with(make, {"built without CUDA", "no nccl backend", "gloo backend for CPU tensors", "libnccl-dev"}));
  }
  EXPECT_FALSE(is_initialized());
}

#else  // EMBER_WITH_CUDA

const DType kDTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64};
const ReduceOp kOps[] = {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min};

#define SKIP_WITHOUT_GPU() \
  if (!cuda::is_available()) GTEST_SKIP() << "no CUDA device visible"

// Sums, maxima and minima of the values are exact; an average over a size
// that is no power of two rounds (NCCL may scale each input by 1/size).
::testing::AssertionResult matches(const std::vector<double>& got, const std::vector<double>& want, DType dtype,
                                   ReduceOp op) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " values, not " << want.size();
  const double tolerance = op != ReduceOp::Avg       ? 0.0
                           : dtype == DType::Float64 ? 1e-12
                           : dtype == DType::Float32 ? 1e-6
                                                     : 2e-2;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::abs(got[i] - want[i]) > tolerance * std::max(1.0, std::abs(want[i]))) {
      return ::testing::AssertionFailure() << dtype_name(dtype) << " " << reduce_op_name(op) << ": element " << i
                                           << " is " << got[i] << ", not " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// Busy-waits the caller's current stream on cuda:0 for `ms`.
void keep_stream_busy(std::chrono::milliseconds ms) {
  cuda::busy_wait(cuda::current_stream(0), int64_t(ms.count()) * 1000000);
}

int64_t ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

TEST(NcclBackend, IsListedInCudaBuilds) { EXPECT_TRUE(backend_available("nccl")); }

TEST(NcclBackend, NoVisibleGpuIsAClearErrorBeforeJoining) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible; this checks the error without one";
  auto store = local_store();
  for (int device : {-1, 2}) {
    EXPECT_TRUE(
        throws_with([&] { new_group("nccl", store, 0, 1, {.timeout = 1s, .name = "nogpu", .nccl_device = device}); },
                    {"nccl process group (rank 0 of 1)", "needs a CUDA device for each rank",
                     "no CUDA device is visible", "CUDA_VISIBLE_DEVICES=", "use the gloo backend"}));
  }
  // It never joined: the group's creation barrier has no key of rank 0.
  EXPECT_FALSE(store->check({"ember/pg/nogpu/join/0"}));
  EXPECT_TRUE(throws_with([&] { new_group("nccl", store, 0, 1, {.nccl_device = -2}); },
                          {"nccl_device is -2", "-1 for the current device"}));
}

// Restores an environment variable at the end of a test.
class SavedEnv {
 public:
  explicit SavedEnv(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) value_ = v;
  }
  ~SavedEnv() {
    if (value_) {
      setenv(name_, value_->c_str(), 1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> value_;
};

TEST(NcclBackend, CreationTurnsNvlsOffUnlessTheUserSetIt) {
  // With a GPU the group would be made, and no test may turn NVLS on there.
  if (cuda::is_available()) {
    GTEST_SKIP() << "a CUDA device is visible; this runs where creation stops at the device check";
  }
  SavedEnv saved("NCCL_NVLS_ENABLE");
  auto store = local_store();
  unsetenv("NCCL_NVLS_ENABLE");
  EXPECT_THROW(new_group("nccl", store, 0, 1), Error);
  ASSERT_NE(std::getenv("NCCL_NVLS_ENABLE"), nullptr);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "0");
  setenv("NCCL_NVLS_ENABLE", "1", 1);
  EXPECT_THROW(new_group("nccl", store, 0, 1), Error);
  EXPECT_STREQ(std::getenv("NCCL_NVLS_ENABLE"), "1");
}

// ---------------- one GPU, world size 1, in this process ----------------

std::shared_ptr<ProcessGroup> one_rank_group(const std::shared_ptr<TCPStore>& store, ProcessGroupOptions options = {}) {
  if (options.timeout == kDefaultCollectiveTimeout) options.timeout = 20s;
  return new_group("nccl", store, 0, 1, options);
}

const Device kGpu = cuda_device(0);

TEST(NcclProcessGroup, OneRankAllReduceEveryOpAndDType) {
  SKIP_WITHOUT_GPU();
  auto store = local_store();
  auto g = one_rank_group(store);
  EXPECT_STREQ(g->backend(), "nccl");
  EXPECT_EQ(dynamic_cast<NcclProcessGroup&>(*g).device(), 0);
  for (DType dtype : kDTypes) {
    for (ReduceOp op : kOps) {
      if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
      Tensor t = rank_tensor(0, 37, dtype).to(kGpu);
      g->all_reduce(t, op)->wait();
      EXPECT_EQ(t.dtype(), dtype);
      EXPECT_TRUE(matches(values_of(t), expected_reduction(op, 1, 37), dtype, op));
    }
  }
  // Several of NCCL's chunks, and a coalesced list.
  const int64_t n = 3 * (1 << 20) + 5;
  Tensor big = rank_tensor(0, n, DType::Float32).to(kGpu);
  g->all_reduce(big)->wait();
  EXPECT_EQ(values_of(big), rank_values(0, n));
  TensorList ts = {rank_tensor(0, 6, DType::Float64).view({2, 3}).to(kGpu),
                   rank_tensor(0, 5, DType::Float64, 6).to(kGpu)};
  auto work = g->all_reduce(ts, ReduceOp::Max);
  work->wait();
  EXPECT_EQ(values_of(ts[0]), rank_values(0, 6));
  EXPECT_EQ(ts[0].shape(), (Shape{2, 3}));
  EXPECT_EQ(values_of(ts[1]), rank_values(0, 5, 6));
  EXPECT_EQ(work->sequence_number(), g->sequence_number());  // one collective for the list
}

TEST(NcclProcessGroup, OneRankBroadcastAllGatherAndReduceScatter) {
  SKIP_WITHOUT_GPU();
  auto store = local_store();
  auto g = one_rank_group(store);
  for (DType dtype : kDTypes) {
    TensorList bs = {rank_tensor(0, 4, dtype).to(kGpu), rank_tensor(0, 3, dtype, 4).to(kGpu)};
    g->broadcast(bs, 0)->wait();
    EXPECT_EQ(values_of(bs[0]), rank_values(0, 4)) << dtype_name(dtype);
    EXPECT_EQ(values_of(bs[1]), rank_values(0, 3, 4)) << dtype_name(dtype);

    Tensor input = rank_tensor(0, 6, dtype).view({2, 3}).to(kGpu);
    // (With one rank every output list is one block; the staging of
    // separate outputs and inputs runs in NcclRanks below.)
    TensorList outs = {zeros({2, 3}, dtype, kGpu)};
    g->all_gather(outs, input)->wait();
    EXPECT_EQ(values_of(outs[0]), rank_values(0, 6)) << dtype_name(dtype);
    Tensor stacked = zeros({1, 2, 3}, dtype, kGpu);
    g->all_gather_into_tensor(stacked, input)->wait();
    EXPECT_EQ(values_of(stacked), rank_values(0, 6)) << dtype_name(dtype);

    for (ReduceOp op : kOps) {
      if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
      Tensor out = zeros({5}, dtype, kGpu);
      TensorList ins = {rank_tensor(0, 5, dtype).to(kGpu)};
      g->reduce_scatter(out, ins, op)->wait();
      EXPECT_TRUE(matches(values_of(out), expected_reduction(op, 1, 5), dtype, op));
      Tensor flat = rank_tensor(0, 5, dtype, 3).view({1, 5}).to(kGpu);
      g->reduce_scatter_tensor(out, flat, op)->wait();
      EXPECT_TRUE(matches(values_of(out), expected_reduction(op, 1, 5, 3), dtype, op));
      EXPECT_EQ(values_of(flat), rank_values(0, 5, 3));  // the input is untouched
    }
  }
  // The input may be this rank's block of the output already.
  Tensor out = zeros({1, 4}, DType::Float32, kGpu);
  Tensor mine = out[0];
  mine.copy_(rank_tensor(0, 4, DType::Float32));
  g->all_gather_into_tensor(out, mine)->wait();
  EXPECT_EQ(values_of(out), rank_values(0, 4));
}

TEST(NcclProcessGroup, ZeroSizedTensorsBarrierAndNumbers) {
  SKIP_WITHOUT_GPU();
  auto store = local_store();
  auto g = one_rank_group(store);
  Tensor empty_t = zeros({0, 3}, DType::Float32, kGpu);
  g->all_reduce(empty_t)->wait();
  g->broadcast(empty_t)->wait();
  g->all_gather({zeros({0, 3}, DType::Float32, kGpu)}, empty_t)->wait();
  g->reduce_scatter(empty_t, {zeros({0, 3}, DType::Float32, kGpu)})->wait();
  auto b = g->barrier();
  b->wait();
  b->wait();  // as often as one likes
  EXPECT_TRUE(b->is_completed());
  EXPECT_TRUE(b->is_success());
  EXPECT_EQ(b->op(), "barrier");
  EXPECT_EQ(b->sequence_number(), 5u);
  EXPECT_EQ(g->sequence_number(), 5u);
  Tensor t = zeros({3}, DType::Float32, kGpu);
  uint32_t before = t.version();
  g->all_reduce(t)->wait();
  EXPECT_GT(t.version(), before);
}

TEST(NcclProcessGroup, RunsAfterTheCallersStreamWithoutBlockingTheHost) {
  SKIP_WITHOUT_GPU();
  auto store = local_store();
  auto g = one_rank_group(store);
  cuda::StreamGuard side(cuda::stream_from_pool(0));  // a current stream other than the legacy one
  Tensor input = zeros({4096}, DType::Float32, kGpu);
  Tensor out = zeros({1, 4096}, DType::Float32, kGpu);
  // NCCL's first collective loads its kernels, which takes the worker a while.
  g->all_gather_into_tensor(out, input)->wait();
  cuda::current_stream(0).synchronize();
  keep_stream_busy(300ms);
  input.fill_(7.0);  // queued behind the busy wait: the collective must wait for it
  auto start = Clock::now();
  auto work = g->all_gather_into_tensor(out, input);
  EXPECT_FALSE(work->is_completed());
  work->wait();  // the current stream waits; the host goes on
  EXPECT_LT(ms_since(start), 150) << "issuing or waiting blocked the host";
  EXPECT_FALSE(work->is_completed());
  // Read on the current stream, after the wait: the collective's result.
  EXPECT_EQ(values_of(out), std::vector<double>(4096, 7.0));
  EXPECT_TRUE(work->is_completed());
  EXPECT_TRUE(work->is_success());
  EXPECT_EQ(work->exception(), nullptr);
}

TEST(NcclProcessGroup, TensorMemoryIsNotReusedBeforeTheCollectiveIsDone) {
  SKIP_WITHOUT_GPU();
  auto store = local_store();
  auto g = one_rank_group(store);
  cuda::StreamGuard side(cuda::stream_from_pool(0));
  Tensor out = zeros({1, 1 << 16}, DType::Float32, kGpu);
  keep_stream_busy(300ms);
  const void* freed = nullptr;
  std::shared_ptr<Work> work;
  {
    Tensor input = full({1 << 16}, 3.0, DType::Float32, kGpu);
    freed = input.data_ptr();
    work = g->all_gather_into_tensor(out, input);
  }  // the caller drops the input while the collective waits behind the busy stream
  Tensor next = full({1 << 16}, 9.0, DType::Float32, kGpu);
  EXPECT_NE(next.data_ptr(), freed) << "the input's memory was handed out again before the collective read it";
  work->wait();
  EXPECT_EQ(values_of(out), std::vector<double>(1 << 16, 3.0));
}

TEST(NcclProcessGroup, BlockingWaitsBlockTheHost) {
  SKIP_WITHOUT_GPU();
  auto store = local_store();
  {
    auto g = one_rank_group(store, {.nccl_blocking_wait = true});
    Tensor t = ones({16}, DType::Float32, kGpu);
    keep_stream_busy(300ms);
    auto start = Clock::now();
    auto work = g->all_reduce(t);
    work->wait();
    EXPECT_GE(ms_since(start), 200) << "nccl_blocking_wait: wait() returned before the GPU was done";
    EXPECT_TRUE(work->is_completed());
    EXPECT_TRUE(work->is_success());
  }
  auto g = one_rank_group(store);
  keep_stream_busy(300ms);
  auto start = Clock::now();
  g->barrier()->wait();
  EXPECT_GE(ms_since(start), 200) << "barrier's wait() returned before the GPU was done";
}

TEST(NcclProcessGroup, ArgumentErrorsNameTheOpTensorsAndDevice) {
  SKIP_WITHOUT_GPU();
  auto store = local_store();
  auto g = one_rank_group(store);
  EXPECT_TRUE(throws_with([&] { g->all_reduce(zeros({4})); },
                          {"nccl all_reduce(sum) of [4] float32 on cpu", "CUDA tensors on this group's device cuda:0",
                           "tensors[0] is [4] float32 on cpu", "t.to(cuda_device(0))", "gloo group for CPU tensors"}));
  EXPECT_TRUE(throws_with([&] { g->all_gather({zeros({2})}, zeros({2})); },
                          {"nccl all_gather", "the input is [2] float32 on cpu"}));
  EXPECT_TRUE(throws_with([&] { g->reduce_scatter(zeros({2}), {zeros({2})}); },
                          {"nccl reduce_scatter", "the output is [2] float32 on cpu"}));
  EXPECT_TRUE(throws_with(
      [&] {
        g->all_reduce(zeros({4, 3}, DType::Float32, kGpu).t());
      },
      {"all_reduce", "[3, 4] float32 on cuda:0", "not contiguous"}));
  EXPECT_TRUE(throws_with([&] { g->all_reduce(zeros({2}, DType::Int32, kGpu), ReduceOp::Avg); },
                          {"ReduceOp::Avg needs a floating dtype", "int32"}));
  if (cuda::device_count() >= 2) {
    EXPECT_TRUE(
        throws_with([&] { g->broadcast(zeros({4}, DType::Float32, cuda_device(1))); },
                    {"nccl broadcast", "tensors[0] is [4] float32 on cuda:1", "group works on cuda:0", "nccl_device"}));
  }
  EXPECT_EQ(g->sequence_number(), 0u);  // nothing was issued
  EXPECT_TRUE(throws_with([&] { new_group("nccl", store, 0, 1, {.nccl_device = cuda::device_count()}); },
                          {"nccl process group (rank 0 of 1)", "nccl_device", "Invalid device id"}));
}

TEST(NcclProcessGroup, InitProcessGroupAndTheFreeCollectives) {
  SKIP_WITHOUT_GPU();
  auto store = local_store();
  init_process_group("nccl", store, 0, 1, {.timeout = 20s});
  EXPECT_STREQ(default_group()->backend(), "nccl");
  EXPECT_EQ(get_world_size(), 1);
  Tensor t = full({3}, 2.0, DType::Float32, kGpu);
  all_reduce(t, ReduceOp::Avg);
  EXPECT_EQ(values_of(t), std::vector<double>(3, 2.0));
  barrier();
  destroy_process_group();
  EXPECT_FALSE(is_initialized());
}

// ---------------- several GPUs, one forked process each ----------------

#define REQUIRE_GPUS(n)                                                                          \
  if (gpus_visible_to_forks() < (n))                                                             \
  GTEST_SKIP() << "needs " << (n) << " CUDA devices, " << gpus_visible_to_forks()                \
               << " visible (or CUDA was used in this process before the fork: run the test on " \
               << "its own, as ctest does)"

std::shared_ptr<ProcessGroup> rank_group(RankContext& ctx, std::chrono::milliseconds timeout,
                                         bool blocking_wait = false) {
  return new_group("nccl", ctx.store, ctx.rank, ctx.world_size,
                   {.timeout = timeout, .nccl_device = ctx.rank, .nccl_blocking_wait = blocking_wait});
}

TEST(NcclRanks, EveryCollectiveAcrossAllVisibleGpus) {
  REQUIRE_GPUS(2);
  const int world = std::min(gpus_visible_to_forks(), 8);
  auto results = testing::run_ranks(world, [](RankContext& ctx) {
    // The group's device from the current device (the option's default).
    cuda::set_device(ctx.rank);
    auto g = new_group("nccl", ctx.store, ctx.rank, ctx.world_size, {.timeout = 30s});
    EXPECT_EQ(dynamic_cast<NcclProcessGroup&>(*g).device(), ctx.rank);
    const Device gpu = cuda_device(ctx.rank);
    const int n = ctx.world_size;
    for (DType dtype : kDTypes) {
      for (ReduceOp op : kOps) {
        if (op == ReduceOp::Avg && !is_floating(dtype)) continue;
        Tensor t = rank_tensor(ctx.rank, 37, dtype).to(gpu);
        g->all_reduce(t, op)->wait();
        EXPECT_TRUE(matches(values_of(t), expected_reduction(op, n, 37), dtype, op));

        const int64_t block = 5;
        TensorList inputs;
        for (int b = 0; b < n; ++b) inputs.push_back(rank_tensor(ctx.rank, block, dtype, b * block).to(gpu));
        Tensor out = zeros({block}, dtype, gpu);
        g->reduce_scatter(out, inputs, op)->wait();
        std::vector<double> want = expected_reduction(op, n, block, ctx.rank * block);
        EXPECT_TRUE(matches(values_of(out), want, dtype, op));
        Tensor flat = rank_tensor(ctx.rank, n * block, dtype).view({n, block}).to(gpu);
        Tensor out2 = zeros({block}, dtype, gpu);
        g->reduce_scatter_tensor(out2, flat, op)->wait();
        EXPECT_TRUE(matches(values_of(out2), want, dtype, op));
      }
      for (int root = 0; root < n; ++root) {
        TensorList bs = {rank_tensor(ctx.rank, 4, dtype).to(gpu), rank_tensor(ctx.rank, 3, dtype, 4).to(gpu)};
        g->broadcast(bs, root)->wait();
        EXPECT_EQ(values_of(bs[0]), rank_values(root, 4)) << dtype_name(dtype) << " root " << root;
        EXPECT_EQ(values_of(bs[1]), rank_values(root, 3, 4)) << dtype_name(dtype) << " root " << root;
      }
      Tensor input = rank_tensor(ctx.rank, 6, dtype).view({2, 3}).to(gpu);
      TensorList outs;
      for (int r = 0; r < n; ++r) outs.push_back(zeros({2, 3}, dtype, gpu));
      g->all_gather(outs, input)->wait();
      Tensor concatenated = zeros({2 * n, 3}, dtype, gpu);
      g->all_gather_into_tensor(concatenated, input)->wait();
      std::vector<double> all;
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(values_of(outs[r]), rank_values(r, 6)) << dtype_name(dtype) << " from rank " << r;
        std::vector<double> v = rank_values(r, 6);
        all.insert(all.end(), v.begin(), v.end());
      }
      EXPECT_EQ(values_of(concatenated), all) << dtype_name(dtype);
    }
    // A coalesced all_reduce, and an input that is another rank's block of
    // the output (NCCL works in place only in this rank's block).
    TensorList ts = {rank_tensor(ctx.rank, 6, DType::Float32).to(gpu),
                     rank_tensor(ctx.rank, 5, DType::Float32, 6).to(gpu)};
    g->all_reduce(ts)->wait();
    std::vector<double> sum = expected_reduction(ReduceOp::Sum, n, 11);
    EXPECT_EQ(values_of(ts[0]), std::vector<double>(sum.begin(), sum.begin() + 6));
    EXPECT_EQ(values_of(ts[1]), std::vector<double>(sum.begin() + 6, sum.end()));
    Tensor out = zeros({n, 4}, DType::Float32, gpu);
    Tensor elsewhere = out[(ctx.rank + 1) % n];
    elsewhere.copy_(rank_tensor(ctx.rank, 4, DType::Float32));
    g->all_gather_into_tensor(out, elsewhere)->wait();
    for (int r = 0; r < n; ++r) EXPECT_EQ(values_of(out[r]), rank_values(r, 4)) << "from rank " << r;
    g->barrier()->wait();
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(NcclRanks, ARankThatNeverArrivesTimesOutTheFirstCollective) {
  REQUIRE_GPUS(2);
  auto results = testing::run_ranks(2, [](RankContext& ctx) {
    auto g = rank_group(ctx, 2000ms);
    if (ctx.rank == 1) {  // makes the group, then no collective: waits until rank 0 has its error
      ctx.store->get("rank 0 done", 30s);
      return;
    }
    auto start = Clock::now();
    std::string error = error_of([&] { g->barrier()->wait(); });
    auto waited = ms_since(start);
    EXPECT_GE(waited, 1900);
    EXPECT_LT(waited, 5000) << "failing took far longer than the timeout";
    for (const char* part : {"nccl barrier #1 failed on rank 0 of 2", "timeout 2000 ms", "Timed out",
                             "Rank 1 of 2 did not arrive at #1 (last collective started: rank 1 none yet)"}) {
      EXPECT_NE(error.find(part), std::string::npos) << "missing \"" << part << "\" in: " << error;
    }
    EXPECT_TRUE(throws_with([&] { g->all_reduce(ones({2}, DType::Float32, cuda_device(0))); },
                            {"unusable since an earlier collective failed", "barrier #1"}));
    ctx.store->set("rank 0 done", "1");
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(NcclRanks, ACollectiveThatTimesOutAfterANonBlockingWaitFailsLater) {
  REQUIRE_GPUS(2);
  auto results = testing::run_ranks(2, [](RankContext& ctx) {
    auto g = rank_group(ctx, 1500ms);
    const Device gpu = cuda_device(ctx.rank);
    Tensor t = ones({8}, DType::Float32, gpu);
    g->all_reduce(t)->wait();  // #1 together: the ranks are connected
    EXPECT_EQ(values_of(t), std::vector<double>(8, 2.0));
    if (ctx.rank == 1) {  // never calls #2
      ctx.store->get("rank 0 done", 30s);
      return;
    }
    auto start = Clock::now();
    auto work = g->all_reduce(t);
    work->wait();  // only the stream waits: no error yet
    EXPECT_LT(ms_since(start), 1000);
    while (!work->is_completed() && ms_since(start) < 10000) std::this_thread::sleep_for(5ms);
    auto waited = ms_since(start);
    EXPECT_GE(waited, 1400);
    EXPECT_LT(waited, 4500);
    EXPECT_TRUE(work->is_completed());
    EXPECT_FALSE(work->is_success());
    ASSERT_NE(work->exception(), nullptr);
    std::string error = error_of([&] { work->wait(); });
    for (const char* part : {"nccl all_reduce #2 (sum) of [8] float32 on cuda:0 failed on rank 0 of 2",
                             "timeout 1500 ms", "Timed out", "communicator was aborted",
                             "Rank 1 of 2 did not arrive at #2 (last collective started: rank 1 #1 all_reduce)"}) {
      EXPECT_NE(error.find(part), std::string::npos) << "missing \"" << part << "\" in: " << error;
    }
    EXPECT_TRUE(
        throws_with([&] { g->all_reduce(t); }, {"unusable since an earlier collective failed", "all_reduce #2"}));
    ctx.store->set("rank 0 done", "1");
  });
  EXPECT_TRUE(testing::all_passed(results));
}

TEST(NcclRanks, ARankExitingMidLoopFailsTheOthersWithinTheTimeout) {
  REQUIRE_GPUS(2);
  const int world = std::min(gpus_visible_to_forks(), 4);
  const int dying = world - 1;
  auto results = testing::run_ranks(world, [=](RankContext& ctx) {
    auto g = rank_group(ctx, 3000ms, /*blocking_wait=*/true);
    Tensor t = ones({1000}, DType::Float32, cuda_device(ctx.rank));
    std::string error;
    auto start = Clock::now();
    for (int step = 0; step < 20; ++step) {
      if (ctx.rank == dying && step == 5) {
        std::this_thread::sleep_for(300ms);  // the others are in #6 by then
        _exit(3);
      }
      try {
        g->all_reduce(t)->wait();
      } catch (const Error& e) {
        error = e.what();
        EXPECT_EQ(step, 5) << error;
        break;
      }
    }
    EXPECT_LT(ms_since(start), 3000 + 3000) << "failing took far longer than the timeout";
    std::string name = "rank " + std::to_string(dying) + " #5 all_reduce";
    for (std::string part : {std::string("nccl all_reduce #6 (sum) of [1000] float32 on cuda:"),
                             std::string("did not arrive at #6 (last collective started: "), name}) {
      EXPECT_NE(error.find(part), std::string::npos) << "missing \"" << part << "\" in: " << error;
    }
  });
  for (const auto& r : results) {
    if (r.rank == dying) {
      EXPECT_EQ(r.exit_code, 3);
    } else {
      EXPECT_TRUE(r.passed && r.exit_code == 0) << "rank " << r.rank << ": " << r.message;
      EXPECT_FALSE(r.hit_deadline);
    }
  }
}

#endif  // EMBER_WITH_CUDA

}  // namespace
}  // namespace ember::parallel
