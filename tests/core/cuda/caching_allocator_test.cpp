// The CUDA caching allocator: reuse, statistics, splitting and merging,
// out-of-memory recovery and stream-aware reuse.
//
// tests/CMakeLists.txt globs this file into CPU-only builds too, where the
// CUDA runtime is not compiled; hence the guard.
#ifdef EMBER_WITH_CUDA

#include "ember/core/cuda/caching_allocator.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "ember/core/allocator.h"
#include "ember/core/cuda/busy_wait.h"
#include "ember/core/cuda/device.h"
#include "ember/core/error.h"
#include "ember/core/storage.h"

namespace ember::cuda {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

DataPtr allocate(size_t nbytes) { return allocator_for(DeviceType::CUDA).allocate(nbytes, cuda_device(0)); }

char* address(const DataPtr& p) { return static_cast<char*>(p.get()); }

TEST(CudaCachingAllocator, SteadyStateNeedsNoCudaMalloc) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  // One "training step": tensors of many sizes alive together, then freed.
  const std::vector<size_t> sizes = {1,        100,      1000,     4096,      70000,     500000, kMiB,
                                     kMiB + 1, 3 * kMiB, 9 * kMiB, 12 * kMiB, 50 * kMiB, 333,    2 * kMiB};
  auto step = [&] {
    std::vector<DataPtr> live;
    for (size_t n : sizes) live.push_back(allocate(n));
    for (size_t i = 0; i < sizes.size(); i += 3) live[i].reset();  // free some early, as ops do
    for (size_t n : {256, 5000, 800000}) live.push_back(allocate(n));
  };
  // Best fit settles within a few steps: the second step finds the first
  // step's segments all free and may place a request in a bigger one, so a
  // later request needs one segment more. From then on the layout repeats.
  for (int i = 0; i < 3; ++i) step();
  const uint64_t mallocs = num_device_allocs(0);
  for (int i = 0; i < 50; ++i) step();
  EXPECT_EQ(num_device_allocs(0), mallocs) << memory_summary(0);
  // Single allocations of any size the steps had are served from the cache too.
  for (int i = 0; i < 200; ++i) allocate(sizes[i % sizes.size()]);
  EXPECT_EQ(num_device_allocs(0), mallocs) << memory_summary(0);
}

TEST(CudaCachingAllocator, StatisticsAddUp) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const size_t base = memory_allocated(0);
  reset_peak_memory_stats(0);
  EXPECT_EQ(max_memory_allocated(0), base);
  {
    DataPtr a = allocate(1000);  // rounds to 1024
    EXPECT_EQ(memory_allocated(0), base + 1024);
    DataPtr b = allocate(kMiB + 1);  // rounds to 1 MiB + 512
    EXPECT_EQ(memory_allocated(0), base + 1024 + kMiB + 512);
    EXPECT_GE(memory_reserved(0), memory_allocated(0));
    a.reset();
    EXPECT_EQ(memory_allocated(0), base + kMiB + 512);
  }
  EXPECT_EQ(memory_allocated(0), base);
  EXPECT_EQ(max_memory_allocated(0), base + 1024 + kMiB + 512);
  EXPECT_GE(max_memory_reserved(0), memory_reserved(0));
  {
    Storage storage(4000, cuda_device(0));  // the path every CUDA tensor takes
    EXPECT_EQ(memory_allocated(0), base + 4096);
  }
  EXPECT_EQ(memory_allocated(0), base);

  allocate(64 * kMiB);  // a segment of its own, cached once freed
  const size_t reserved = memory_reserved(0);
  empty_cache();
  EXPECT_LE(memory_reserved(0) + 64 * kMiB, reserved);
  EXPECT_GE(memory_reserved(0), memory_allocated(0));
  const MemoryStats s = memory_stats(0);
  EXPECT_EQ(s.allocated, base);
  EXPECT_GE(s.num_device_frees, 1u);
}

TEST(CudaCachingAllocator, SplitsSegmentsAndMergesFreeNeighbours) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  empty_cache();  // start from fresh segments
  const uint64_t mallocs = num_device_allocs(0);
  DataPtr x = allocate(1000), y = allocate(1000), z = allocate(1000);
  EXPECT_EQ(address(y), address(x) + 1024) << "small blocks are carved out of one 2 MiB segment";
  EXPECT_EQ(address(z), address(y) + 1024);
  char* const start = address(x);
  x.reset();
  z.reset();
  y.reset();  // now x, y, z and the rest of the segment merge into one block
  DataPtr whole = allocate(kMiB);
  EXPECT_EQ(address(whole), start) << "freed neighbours were not merged";
  whole.reset();

  DataPtr big = allocate(3 * kMiB);  // a 20 MiB segment, split
  DataPtr next = allocate(5 * kMiB);
  EXPECT_EQ(address(next), address(big) + 3 * kMiB);
  EXPECT_EQ(num_device_allocs(0), mallocs + 2) << memory_summary(0);
}

TEST(CudaCachingAllocator, OutOfMemoryNamesTheFixAndIsRecoverable) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const size_t too_much = 2 * properties(0).total_memory;
  try {
    allocate(too_much);
    FAIL() << "allocating twice the device's memory did not throw";
  } catch (const OutOfMemoryError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(std::to_string(too_much) + " bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("batch size"), std::string::npos) << what;
    EXPECT_NE(what.find("cuda:0"), std::string::npos) << what;
  }
  EXPECT_GE(memory_stats(0).num_ooms, 1u);
  DataPtr after = allocate(kMiB);
  EXPECT_NE(after.get(), nullptr);
  EXPECT_NO_THROW(synchronize(0)) << "the failed cudaMalloc left an error behind";
}

TEST(CudaCachingAllocator, RecordStreamDelaysReuseUntilTheStreamIsDone) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  empty_cache();
  const Stream side = stream_from_pool(0);

  DataPtr a = allocate(1000);
  char* const freed_early = address(a);
  a.reset();
  DataPtr b = allocate(1000);
  EXPECT_EQ(address(b), freed_early) << "without other streams, a freed block is reused at once";
  b.reset();

  DataPtr used = allocate(1000);
  char* const in_use = address(used);
  busy_wait(side, 300 * 1'000'000);  // stands for a kernel on `side` reading `used`
  record_stream(used.get(), side);
  used.reset();  // freed by the host while `side` still runs
  DataPtr meanwhile = allocate(1000);
  EXPECT_NE(address(meanwhile), in_use) << "a block was reused while another stream still used it";
  side.synchronize();
  meanwhile.reset();
  DataPtr later = allocate(1000);
  EXPECT_EQ(address(later), in_use) << "the block did not come back once the stream was done";
}

TEST(CudaCachingAllocator, RecordStreamChecksItsArguments) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  DataPtr a = allocate(4096);
  EXPECT_THROW(record_stream(address(a) + 512, stream_from_pool(0)), Error);
  Storage host(64, kCPU);
  EXPECT_THROW(record_stream(host, stream_from_pool(0)), Error);
}

TEST(CudaCachingAllocator, ThreadsShareTheCacheSafely) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const size_t base = memory_allocated(0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 500; ++i) {
        DataPtr a = allocate(size_t(512 * (1 + (i * 7 + t) % 50)));
        DataPtr b = allocate(size_t(kMiB + 4096 * (i % 13)));
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(memory_allocated(0), base);
}

TEST(CudaCachingAllocator, SummaryIsReadable) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  DataPtr a = allocate(kMiB);
  const std::string summary = memory_summary(0);
  EXPECT_NE(summary.find("cuda:0"), std::string::npos) << summary;
  EXPECT_NE(summary.find("allocated"), std::string::npos) << summary;
  EXPECT_NE(summary.find("reserved"), std::string::npos) << summary;
  EXPECT_NE(summary.find("cudaMalloc"), std::string::npos) << summary;
}

}  // namespace
}  // namespace ember::cuda

#endif  // EMBER_WITH_CUDA
