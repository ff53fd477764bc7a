// The CPU allocator's cache of large blocks (ember/core/cpu_allocator.h): reuse of
// a freed block of the same size class, the classes' rounding, poisoning of
// reused blocks, emptying, and many threads at once. Under AddressSanitizer
// the cache is off by contract; the tests that need it skip, saying so.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "ember/core/allocator.h"
#include "ember/core/cpu_allocator.h"

namespace ember {
namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

#define SKIP_UNDER_ASAN() \
  if (kAsan) GTEST_SKIP() << "the CPU cache is off under AddressSanitizer (so that use after free is reported)"

constexpr size_t kMiB = size_t(1) << 20;

TEST(CpuAllocator, AFreedLargeBlockIsReusedForTheSameSizeClass) {
  SKIP_UNDER_ASAN();
  cpu_empty_cache();
  Allocator& a = cpu_allocator();
  void* first = nullptr;
  {
    DataPtr block = a.allocate(3 * kMiB, kCPU);
    first = block.get();
    std::memset(first, 1, 3 * kMiB);
  }
  EXPECT_EQ(cpu_cached_bytes(), 3 * kMiB);
  DataPtr again = a.allocate(3 * kMiB - 100, kCPU);  // the same class (3 MiB: a multiple of 4 MiB / 8)
  EXPECT_EQ(again.get(), first);
  EXPECT_EQ(cpu_cached_bytes(), 0u);
  DataPtr other = a.allocate(5 * kMiB, kCPU);
  EXPECT_NE(other.get(), first);
}

TEST(CpuAllocator, SizeClassesWasteAtMostAnEighth) {
  SKIP_UNDER_ASAN();
  cpu_empty_cache();
  Allocator& a = cpu_allocator();
  const struct {
    size_t request, cls;
  } cases[] = {{kMiB, kMiB},
               {kMiB + 1, kMiB + kMiB / 4},
               {5 * kMiB, 5 * kMiB},
               {5 * kMiB + 1, 6 * kMiB},
               {100 * kMiB, 112 * kMiB}};
  for (const auto& c : cases) {
    a.allocate(c.request, kCPU).reset();
    EXPECT_EQ(cpu_cached_bytes(), c.cls) << c.request;
    cpu_empty_cache();
  }
  a.allocate(kCpuCacheMinBytes, kCPU).reset();  // the smallest cached block
  EXPECT_EQ(cpu_cached_bytes(), kCpuCacheMinBytes);
  cpu_empty_cache();
  a.allocate(kCpuCacheMinBytes - 64, kCPU).reset();  // small: not cached
  EXPECT_EQ(cpu_cached_bytes(), 0u);
}

TEST(CpuAllocator, ReusedBlocksArePoisonedWhilePoisoningIsOn) {
  SKIP_UNDER_ASAN();
  cpu_empty_cache();
  Allocator& a = cpu_allocator();
  {
    DataPtr block = a.allocate(2 * kMiB, kCPU);
    std::memset(block.get(), 0, 2 * kMiB);
  }
  set_allocation_poisoning(true);
  DataPtr reused = a.allocate(2 * kMiB, kCPU);
  set_allocation_poisoning(false);
  const auto* bytes = static_cast<const unsigned char*>(reused.get());
  size_t unpoisoned = 0;
  for (size_t i = 0; i < 2 * kMiB; ++i) unpoisoned += bytes[i] != 0xFF;
  EXPECT_EQ(unpoisoned, 0u);
}

TEST(CpuAllocator, ManyThreadsAllocateAndFreeAtOnce) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) {
        DataPtr p = cpu_allocator().allocate(size_t(1 + (i + t) % 5) * kMiB, kCPU);
        static_cast<char*>(p.get())[0] = char(i);
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_LE(cpu_cached_bytes(), size_t(1024) * kMiB);
  cpu_empty_cache();
  EXPECT_EQ(cpu_cached_bytes(), 0u);
}

}  // namespace
}  // namespace ember
