// The CPU thread pool (ember/core/parallel_for.h): the static split, the caller's
// part, exceptions carried back, nesting, concurrent callers, regions back
// to back and after the workers sleep, the
// fixed-order combine of parallel_reduce, and set_num_threads.
#include "ember/core/parallel_for.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "support/error_message.h"

namespace ember {
namespace {

using testing::throws_with;

// Sets the thread count for one test and restores the previous one.
class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(get_num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(saved_); }

 private:
  int saved_;
};

// The chunks parallel_for hands out, sorted by start.
std::vector<std::pair<int64_t, int64_t>> chunks_of(int64_t begin, int64_t end, int64_t grain) {
  std::mutex m;
  std::vector<std::pair<int64_t, int64_t>> chunks;
  parallel_for(begin, end, grain, [&](int64_t b, int64_t e) {
    std::lock_guard<std::mutex> lock(m);
    chunks.emplace_back(b, e);
  });
  std::sort(chunks.begin(), chunks.end());
  return chunks;
}

TEST(ParallelFor, SplitsIntoNearEqualChunksThatCoverTheRange) {
  ThreadCount threads(3);
  using Chunks = std::vector<std::pair<int64_t, int64_t>>;
  // Up to kChunksPerThread (4) chunks a thread: 12 at 3 threads.
  EXPECT_EQ(chunks_of(0, 100, 5), (Chunks{{0, 9},
                                          {9, 18},
                                          {18, 27},
                                          {27, 36},
                                          {36, 44},
                                          {44, 52},
                                          {52, 60},
                                          {60, 68},
                                          {68, 76},
                                          {76, 84},
                                          {84, 92},
                                          {92, 100}}));
  EXPECT_EQ(chunks_of(10, 20, 1).size(), 10u);  // one index each: no more chunks than indices
  EXPECT_EQ(chunks_of(0, 100, 40), (Chunks{{0, 34}, {34, 67}, {67, 100}}));
  EXPECT_EQ(chunks_of(0, 100, 50), (Chunks{{0, 50}, {50, 100}}));  // ceil(100 / 50) chunks
  EXPECT_EQ(chunks_of(0, 100, 100), (Chunks{{0, 100}}));           // at most grain: one call
  EXPECT_EQ(chunks_of(5, 5, 1), Chunks{});                         // empty: no call
  EXPECT_EQ(parallel_chunk_count(100, 1), 3 * kChunksPerThread);
}

TEST(ParallelFor, OneThreadRunsTheWholeRangeOnTheCaller) {
  ThreadCount threads(1);
  std::vector<std::thread::id> ids;
  parallel_for(0, 1000000, 1, [&](int64_t b, int64_t e) {
    EXPECT_EQ(b, 0);
    EXPECT_EQ(e, 1000000);
    ids.push_back(std::this_thread::get_id());
  });
  EXPECT_EQ(ids, std::vector<std::thread::id>{std::this_thread::get_id()});
}

TEST(ParallelFor, EveryIndexRunsOnceAndTheCallerTakesPart) {
  ThreadCount threads(4);
  std::vector<std::atomic<int>> hits(100000);
  std::mutex m;
  std::set<std::thread::id> ids;
  for (int repeat = 0; repeat < 20; ++repeat) {
    parallel_for(0, int64_t(hits.size()), 1, [&](int64_t b, int64_t e) {
      EXPECT_TRUE(in_parallel_region());
      for (int64_t i = b; i < e; ++i) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
      std::lock_guard<std::mutex> lock(m);
      ids.insert(std::this_thread::get_id());
    });
  }
  for (const auto& h : hits) ASSERT_EQ(h.load(), 20);
  EXPECT_TRUE(ids.count(std::this_thread::get_id()));
  EXPECT_FALSE(in_parallel_region());
}

TEST(ParallelFor, AnExceptionReachesTheCallerAndThePoolStaysUsable) {
  ThreadCount threads(3);
  for (int repeat = 0; repeat < 10; ++repeat) {
    EXPECT_THROW(parallel_for(0, 3, 1,
                              [](int64_t b, int64_t) {
                                if (b == 2) throw std::runtime_error("chunk 2");
                              }),
                 std::runtime_error);
    EXPECT_FALSE(in_parallel_region());
  }
  std::atomic<int64_t> total{0};
  parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total.load(), 1000);
}

TEST(ParallelFor, NestedCallsRunInlineOnTheirChunksThread) {
  ThreadCount threads(2);
  std::atomic<int> inner_calls{0};
  parallel_for(0, 2, 1, [&](int64_t, int64_t) {
    const auto outer_id = std::this_thread::get_id();
    parallel_for(0, 1000, 1, [&](int64_t b, int64_t e) {
      EXPECT_EQ(b, 0);
      EXPECT_EQ(e, 1000);
      EXPECT_EQ(std::this_thread::get_id(), outer_id);
      ++inner_calls;
    });
  });
  EXPECT_EQ(inner_calls.load(), 2);
}

double sum_range(int64_t b, int64_t e, double init) {
  for (int64_t i = b; i < e; ++i) init += 1.0 / double(i + 1);
  return init;
}

TEST(ParallelReduce, CombinesPartialsInChunkOrder) {
  ThreadCount threads(3);
  // String concatenation is not commutative: the order shows.
  std::string s = parallel_reduce(
      0, 24, 2, std::string(),
      [](int64_t b, int64_t e, std::string acc) {
        for (int64_t i = b; i < e; ++i) acc += char('a' + i);
        return acc + "|";
      },
      [](std::string x, std::string y) { return x + y; });
  EXPECT_EQ(s, "ab|cd|ef|gh|ij|kl|mn|op|qr|st|uv|wx|");  // 12 chunks of 2
}

TEST(ParallelReduce, IsBitIdenticalRunToRunAndNestedAtAGivenCount) {
  ThreadCount threads(3);
  auto reduce = [] {
    return parallel_reduce(0, 1000000, 1000, 0.0, sum_range, [](double x, double y) { return x + y; });
  };
  const double first = reduce();
  for (int repeat = 0; repeat < 10; ++repeat) EXPECT_EQ(reduce(), first);
  // Nested: the same split, its chunks run one after the other.
  double nested = 0;
  parallel_for(0, 2, 1, [&](int64_t b, int64_t) {
    if (b == 0) nested = reduce();
  });
  EXPECT_EQ(nested, first);
  set_num_threads(1);
  EXPECT_NEAR(reduce(), first, 1e-12);
  EXPECT_EQ(reduce(), sum_range(0, 1000000, 0.0));
}

TEST(ParallelFor, ConcurrentCallersEachGetTheirWholeRange) {
  ThreadCount threads(2);
  std::vector<std::thread> callers;
  std::vector<double> results(4);
  for (size_t t = 0; t < results.size(); ++t) {
    callers.emplace_back([&, t] {
      for (int repeat = 0; repeat < 20; ++repeat) {
        results[t] = parallel_reduce(0, 200000, 1000, 0.0, sum_range, [](double x, double y) { return x + y; });
      }
    });
  }
  for (std::thread& c : callers) c.join();
  for (double r : results) EXPECT_EQ(r, results[0]);
}

// Regions back to back and after pauses long enough for the workers to
// sleep, each with its own chunk function and counters that die when it
// returns: every chunk runs exactly once, and no worker is still inside a
// region its caller has left (the sanitized suite would see a worker read
// the destroyed counters; ThreadSanitizer, scripts/tsan.sh, a race).
TEST(ParallelFor, BackToBackAndWokenRegionsRunEveryChunkOnce) {
  ThreadCount threads(4);
  for (int region = 0; region < 3000; ++region) {
    if (region % 100 == 99) std::this_thread::sleep_for(std::chrono::microseconds(300));
    const int64_t n = 2 + region % 15;
    std::vector<std::atomic<int>> runs(static_cast<size_t>(n));
    parallel_for(0, n, 1, [&runs](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) ++runs[size_t(i)];
    });
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(runs[size_t(i)].load(), 1) << "region " << region << ", index " << i;
  }
}

TEST(SetNumThreads, ChangesTheCountAndRejectsNonPositive) {
  ThreadCount threads(5);
  EXPECT_EQ(get_num_threads(), 5);
  EXPECT_EQ(parallel_chunk_count(1000, 1), 5 * kChunksPerThread);
  EXPECT_EQ(parallel_chunk_count(1000, 1, /*chunks_per_thread=*/1), 5);
  set_num_threads(2);
  EXPECT_EQ(parallel_chunk_count(1000, 1), 2 * kChunksPerThread);
  EXPECT_TRUE(throws_with([] { set_num_threads(0); }, {"set_num_threads", "positive", "got 0"}));
  EXPECT_EQ(get_num_threads(), 2);
}

}  // namespace
}  // namespace ember
