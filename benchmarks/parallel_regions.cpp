// parallel_regions: what one parallel region of ember's CPU thread pool
// (ember/core/parallel_for.h) costs at EMBER_NUM_THREADS threads, as a
// markdown table.
//
// Rows:
// - short chunks, back to back: parallel_for over threads x
//   kChunksPerThread chunks of 2 us of work each (so the caller cannot run
//   them all before the workers join), one region right after the other:
//   the region's time above its ideal 2 us x kChunksPerThread is the pool's
//   cost (publish, wake the spinning workers, claim, count out, and the
//   wait for the last chunk).
// - short chunks after the caller works alone for G us (G = 20, 100, 1000):
//   a training step's single-threaded stretches (autograd, small ops)
//   between its kernels; past the workers' spin they sleep and must be
//   woken. Only the region is timed.
// - a ReLU's worth of work: max(x, 0) over 64x32x28x28 floats (the CNN's
//   first activation), split as an elementwise kernel splits it, back to
//   back; beside it the same loop on the calling thread alone, and the
//   speedup.
// Timing: the median and the 90th percentile of --repeats regions (the
// spread is the point here: a region waits for its slowest worker).
//
//   parallel_regions [--repeats N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "benchmarks/bench_util.h"
#include "ember/core/parallel_for.h"

namespace {

using ember::bench::Clock;
using ember::bench::elapsed_us;

// Busy work on the calling thread for `us` microseconds.
void work_alone(double us) {
  const Clock::time_point start = Clock::now();
  while (elapsed_us(start, Clock::now()) < us) {
  }
}

struct Spread {
  double median, p90;
};

// The median and 90th percentile of region() over `repeats` calls, each
// after before() (untimed).
template <typename Before, typename Region>
Spread time_regions(int repeats, Before&& before, Region&& region) {
  std::vector<double> us;
  for (int i = 0; i < repeats + 10; ++i) {
    before();
    const Clock::time_point start = Clock::now();
    region();
    const double t = elapsed_us(start, Clock::now());
    if (i >= 10) us.push_back(t);  // the first ten start the pool and warm it
  }
  std::sort(us.begin(), us.end());
  return {us[us.size() / 2], us[us.size() * 9 / 10]};
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ember;
  bench::Flags flags(argc, argv, "parallel_regions [--repeats N]");
  const int repeats = int(flags.count("--repeats", 2000, 1000000));
  flags.finish();
  const int threads = get_num_threads();
  const int64_t chunks = int64_t(threads) * kChunksPerThread;
  std::printf("ember thread pool at %d threads (EMBER_NUM_THREADS), %d regions a row\n\n", threads, repeats);
  std::printf("| region | median us | 90th percentile us |\n|---|---:|---:|\n");
  auto row = [](const std::string& what, Spread s) {
    std::printf("| %s | %.1f | %.1f |\n", what.c_str(), s.median, s.p90);
  };
  constexpr double kChunkUs = 2;
  auto short_region = [&] { parallel_for(0, chunks, 1, [](int64_t, int64_t) { work_alone(kChunkUs); }); };

  const std::string short_chunks = std::to_string(chunks) + " chunks of 2 us (ideal " +
                                   std::to_string(int(kChunkUs * double(chunks) / threads)) + " us)";
  row(short_chunks + ", back to back", time_regions(
                                           repeats, [] {}, short_region));
  for (double gap : {20.0, 100.0, 1000.0}) {
    const int regions = gap >= 1000 ? std::max(10, repeats / 10) : repeats;
    row(short_chunks + " after " + std::to_string(int(gap)) + " us alone",
        time_regions(
            regions, [gap] { work_alone(gap); }, short_region));
  }

  const int64_t n = int64_t(64) * 32 * 28 * 28;
  std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(i % 7) - 3.0f;
  auto relu = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[size_t(i)] = std::max(x[size_t(i)], 0.0f);
  };
  const Spread pooled = time_regions(
      repeats, [] {}, [&] { parallel_for(0, n, kCpuGrain, relu); });
  const Spread alone = time_regions(
      std::max(10, repeats / 10), [] {}, [&] { relu(0, n); });
  const int64_t relu_chunks = parallel_chunk_count(n, kCpuGrain);
  row("ReLU over 64x32x28x28 floats, " + std::to_string(relu_chunks) + " chunks", pooled);
  row("the same on the calling thread alone", alone);
  std::printf("\nReLU speedup (medians): %.2fx at %d threads\n", alone.median / pooled.median, threads);
  // y is read, so the loops that write it are not optimized away.
  double sum = 0;
  for (float v : y) sum += v;
  std::printf("(checksum %.0f)\n", sum);
  return 0;
}
