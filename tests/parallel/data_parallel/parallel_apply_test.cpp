// parallel::parallel_apply and ReplicaThreads: concurrency, the per-thread
// grad mode and autocast state, and errors that name the replica and its device.
#include "ember/parallel/data_parallel/parallel_apply.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>

#include "ember/ember.h"
#include "support/error_message.h"

namespace ember::parallel {
namespace {

using ember::testing::error_of;
using ::testing::HasSubstr;

// A module whose "forward" is a test's lambda.
struct Probe : nn::UnaryModule {
  Tensor forward(const Tensor& x) override { return x; }
  std::shared_ptr<Module> clone() const override { return clone_as<Probe>(); }
};

std::vector<std::shared_ptr<nn::Module>> probes(size_t n) {
  std::vector<std::shared_ptr<nn::Module>> out;
  for (size_t i = 0; i < n; ++i) out.push_back(std::make_shared<Probe>());
  return out;
}

std::vector<Value> inputs(size_t n) {
  std::vector<Value> out;
  for (size_t i = 0; i < n; ++i) out.push_back(full({1}, double(i)));
  return out;
}

// Every replica waits until all of them have arrived: this finishes only if
// they run at the same time (and fails, rather than hangs, otherwise).
struct Rendezvous {
  std::mutex mutex;
  std::condition_variable cv;
  size_t arrived = 0;
  bool arrive_and_wait(size_t n) {
    std::unique_lock<std::mutex> lock(mutex);
    ++arrived;
    cv.notify_all();
    return cv.wait_for(lock, std::chrono::seconds(20), [&] { return arrived >= n; });
  }
};

void runs_concurrently(ReplicaThreads* pool) {
  constexpr size_t kReplicas = 4;
  Rendezvous meet;
  std::mutex mutex;
  std::set<std::thread::id> threads;
  std::vector<Value> out = parallel_apply(
      probes(kReplicas), inputs(kReplicas), std::vector<Device>(kReplicas, kCPU),
      [&](nn::Module& m, const Value& in) {
        {
          std::lock_guard<std::mutex> lock(mutex);
          threads.insert(std::this_thread::get_id());
        }
        EMBER_CHECK(meet.arrive_and_wait(kReplicas), "the replicas did not run at once");
        return Value(static_cast<Probe&>(m).forward(in.tensor()) * 2.0);
      },
      pool);
  ASSERT_EQ(out.size(), kReplicas);
  for (size_t i = 0; i < kReplicas; ++i) EXPECT_EQ(out[i].tensor().item<float>(), 2.0f * float(i));
  EXPECT_EQ(threads.size(), kReplicas);
  EXPECT_TRUE(threads.count(std::this_thread::get_id())) << "replica 0 runs on the caller's thread";
}

TEST(ParallelApply, RunsEveryReplicaAtOnce) { runs_concurrently(nullptr); }

TEST(ParallelApply, PoolThreadsAreReused) {
  ReplicaThreads pool(3);
  EXPECT_EQ(pool.workers(), 3u);
  for (int round = 0; round < 3; ++round) runs_concurrently(&pool);
  std::set<std::thread::id> seen;
  for (int round = 0; round < 3; ++round) {
    std::mutex mutex;
    parallel_apply(
        probes(4), inputs(4), std::vector<Device>(4, kCPU),
        [&](nn::Module&, const Value& in) {
          std::lock_guard<std::mutex> lock(mutex);
          seen.insert(std::this_thread::get_id());
          return in;
        },
        &pool);
  }
  EXPECT_EQ(seen.size(), 4u) << "the same three workers (and the caller) every round";
  // Fewer replicas than workers is fine.
  EXPECT_EQ(parallel_apply(
                probes(2), inputs(2), {kCPU, kCPU}, [](nn::Module&, const Value& in) { return in; }, &pool)
                .size(),
            2u);
}

TEST(ParallelApply, ReplicasGetTheCallersGradMode) {
  for (bool enabled : {true, false}) {
    std::optional<NoGradGuard> no_grad;
    if (!enabled) no_grad.emplace();
    std::vector<Value> out =
        parallel_apply(probes(3), inputs(3), std::vector<Device>(3, kCPU),
                       [](nn::Module&, const Value&) { return Value(full({1}, GradMode::is_enabled() ? 1.0 : 0.0)); });
    for (const Value& v : out) EXPECT_EQ(v.tensor().item<float>(), enabled ? 1.0f : 0.0f);
    EXPECT_EQ(GradMode::is_enabled(), enabled) << "the caller's mode is left as it was";
  }
}

TEST(ParallelApply, ReplicasGetTheCallersAutocastState) {
  ReplicaThreads pool(2);
  for (ReplicaThreads* threads : {static_cast<ReplicaThreads*>(nullptr), &pool}) {
    auto dtypes_of_linear = [&] {
      std::vector<Value> out = parallel_apply(
          probes(3), inputs(3), std::vector<Device>(3, kCPU),
          [](nn::Module&, const Value& in) {
            return Value(linear(in.tensor().view({1, 1}), ones({2, 1})));
          },
          threads);
      std::vector<DType> dtypes;
      for (const Value& v : out) dtypes.push_back(v.tensor().dtype());
      return dtypes;
    };
    {
      amp::autocast guard(DType::BFloat16, DeviceType::CPU);
      EXPECT_EQ(dtypes_of_linear(), std::vector<DType>(3, DType::BFloat16));
    }
    // The workers do not keep the state of an earlier call.
    EXPECT_EQ(dtypes_of_linear(), std::vector<DType>(3, DType::Float32));
  }
  EXPECT_FALSE(autocast_state::any_enabled());
}

TEST(ParallelApply, ErrorsNameTheReplicaAndDevice) {
  auto failing = [](std::set<float> bad) {
    return [bad](nn::Module&, const Value& in) {
      float i = in.tensor().item<float>();
      if (bad.count(i)) EMBER_FAIL("shape mismatch in replica input " << i);
      return in;
    };
  };
  std::vector<Device> cpu3(3, kCPU);
  std::string m = error_of([&] { parallel_apply(probes(3), inputs(3), cpu3, failing({1})); });
  EXPECT_THAT(m, HasSubstr("replica 1 on cpu failed: shape mismatch in replica input 1"));
  m = error_of([&] { parallel_apply(probes(3), inputs(3), cpu3, failing({1, 2})); });
  EXPECT_THAT(m, HasSubstr("replica 1 on cpu failed"));
  EXPECT_THAT(m, HasSubstr("(and 1 other replica(s) failed too)"));
  m = error_of([&] {
    parallel_apply(probes(2), inputs(2), {kCPU, kCPU}, [](nn::Module&, const Value&) -> Value { throw 42; });
  });
  EXPECT_THAT(m, HasSubstr("replica 0 on cpu failed: an exception that is not a std::exception"));
  EXPECT_THROW(parallel_apply(probes(2), inputs(2), {kCPU, kCPU},
                              [](nn::Module&, const Value& in) -> Value {
                                if (in.tensor().item<float>() == 1.0f) throw OutOfMemoryError("out of memory");
                                return in;
                              }),
               OutOfMemoryError);
  EXPECT_TRUE(ember::testing::throws_with([&] { parallel_apply(probes(2), inputs(3), cpu3, failing({})); },
                                          {"2 replicas, 3 inputs and 3 devices"}));
  ReplicaThreads pool(1);
  EXPECT_TRUE(ember::testing::throws_with([&] { parallel_apply(probes(3), inputs(3), cpu3, failing({}), &pool); },
                                          {"a pool of 1 workers cannot run 3 replicas"}));
}

}  // namespace
}  // namespace ember::parallel
