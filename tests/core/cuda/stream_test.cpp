// Current streams, the stream pool, StreamGuard and events.
//
// tests/CMakeLists.txt globs this file into CPU-only builds too, where the
// CUDA runtime is not compiled; hence the guard.
#ifdef EMBER_WITH_CUDA

#include "ember/core/cuda/stream.h"

#include <gtest/gtest.h>

#include <thread>

#include "ember/core/cuda/busy_wait.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/event.h"
#include "ember/core/error.h"

namespace ember::cuda {
namespace {

constexpr int64_t kMillisecond = 1'000'000;  // in nanoseconds

TEST(CudaStream, CurrentStreamStartsAsTheLegacyDefault) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  EXPECT_TRUE(current_stream(0).is_default());
  EXPECT_EQ(current_stream(0), default_stream(0));
  EXPECT_EQ(current_stream().device(), current_device());
}

TEST(CudaStream, PoolStreamsAreNonDefaultAndRotate) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const Stream a = stream_from_pool(0);
  const Stream b = stream_from_pool(0);
  EXPECT_FALSE(a.is_default());
  EXPECT_NE(a, b);
  EXPECT_FALSE(stream_from_pool(0, /*high_priority=*/true).is_default());
}

TEST(CudaStream, StreamGuardSetsAndRestores) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const Stream side = stream_from_pool(0);
  {
    StreamGuard guard(side);
    EXPECT_EQ(current_stream(0), side);
    EXPECT_EQ(current_device(), 0);
  }
  EXPECT_TRUE(current_stream(0).is_default());
}

TEST(CudaStream, CurrentStreamIsPerThread) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const Stream side = stream_from_pool(0);
  bool other_thread_saw_default = false;
  StreamGuard guard(side);
  std::thread([&] { other_thread_saw_default = current_stream(0).is_default(); }).join();
  EXPECT_TRUE(other_thread_saw_default);
  EXPECT_EQ(current_stream(0), side);
}

TEST(CudaStream, QueryAndSynchronizeFollowTheWork) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const Stream side = stream_from_pool(0);
  busy_wait(side, 100 * kMillisecond);
  EXPECT_FALSE(side.query());
  side.synchronize();
  EXPECT_TRUE(side.query());
}

TEST(CudaEvent, ElapsedTimeMeasuresGpuWork) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const Stream side = stream_from_pool(0);
  Event start(/*enable_timing=*/true), end(/*enable_timing=*/true);
  start.record(side);
  busy_wait(side, 20 * kMillisecond);
  end.record(side);
  const float ms = start.elapsed_time(end);
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 1000.0f);
}

TEST(CudaEvent, QueryWaitAndSynchronize) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  Event never_recorded;
  EXPECT_TRUE(never_recorded.query());
  EXPECT_NO_THROW(never_recorded.synchronize());

  const Stream producer = stream_from_pool(0);
  const Stream consumer = stream_from_pool(0);
  busy_wait(producer, 100 * kMillisecond);
  Event produced;
  produced.record(producer);
  EXPECT_FALSE(produced.query());
  produced.wait(consumer);  // the consumer's later work runs after the producer's
  Event consumed;
  consumed.record(consumer);
  consumed.synchronize();
  EXPECT_TRUE(produced.query()) << "the consumer stream did not wait for the producer's event";
}

TEST(CudaEvent, ElapsedTimeNeedsTimingEvents) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  Event a, b;
  a.record();
  b.record();
  EXPECT_THROW(a.elapsed_time(b), Error);
}

}  // namespace
}  // namespace ember::cuda

#endif  // EMBER_WITH_CUDA
