// cpu_ceiling: what this machine's CPUs give at 1 to N threads with no
// ember code in the way, the ceiling for ember's CPU thread speedups
// (scripts/cpu_threads_bench.sh), as a markdown table.
//
// Each thread count runs its threads as plain std::threads that meet at a
// spin barrier; one repeat is the wall time from the barrier that starts
// it to the last thread's end. Columns:
// - FMA: every thread runs the same register-resident multiply-add loop
//   (independent chains of the widest float vectors, AVX-512 or AVX), so the
//   aggregate GFLOP/s over one thread's is how far compute-bound work such
//   as a GEMM can scale here (virtual CPUs that share physical cores, or
//   clocks that drop with more active cores, show as less than N).
// - copy of 64x32x28x28 floats (6.4 MB each way, the CNN's first
//   activation; within the last-level cache of a large server CPU): the
//   threads copy near-equal slices of one buffer, as a memory-bound kernel
//   of ember-train's CNN is split; the speedup of its time.
// - copy of 512 MiB: the same out of DRAM, in GB/s (bytes read + written).
// Timing: the median of --repeats repeats (after two untimed ones).
//
//   cpu_ceiling [--threads 1,2,4,...] [--repeats N]   (default: 1, 2, 4, ... and the CPU count)
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <functional>
#include <thread>
#include <vector>

#include "benchmarks/bench_util.h"

namespace {

using ember::bench::Clock;
using ember::bench::elapsed_us;

// Runs work(t) on threads t = 0..n-1 (thread 0 is the caller) `repeats`
// times after two untimed rounds; the median microseconds of a round.
double median_round_us(int n, int repeats, const std::function<void(int)>& work) {
  std::atomic<int> round{0}, finished{0};
  const int rounds = repeats + 2;
  std::vector<std::thread> others;
  for (int t = 1; t < n; ++t) {
    others.emplace_back([&, t] {
      for (int r = 1; r <= rounds; ++r) {
        while (round.load(std::memory_order_acquire) < r) {
        }
        work(t);
        finished.fetch_add(1, std::memory_order_acq_rel);
      }
    });
  }
  std::vector<double> us;
  for (int r = 1; r <= rounds; ++r) {
    finished.store(0, std::memory_order_relaxed);
    const Clock::time_point start = Clock::now();
    round.store(r, std::memory_order_release);
    work(0);
    finished.fetch_add(1, std::memory_order_acq_rel);
    while (finished.load(std::memory_order_acquire) < n) {
    }
    if (r > 2) us.push_back(elapsed_us(start, Clock::now()));
  }
  for (std::thread& t : others) t.join();
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

// The machine's widest float vector (the benchmark is built with
// -march=native) and enough independent multiply-add chains to fill its
// units: 12 vector registers of them, plus two for the constants.
#if defined(__AVX512F__)
constexpr int kVectorBytes = 64;
#else
constexpr int kVectorBytes = 32;
#endif
using Vector = float __attribute__((vector_size(kVectorBytes)));
constexpr int kChains = 12;
constexpr int kFloatsPerVector = kVectorBytes / int(sizeof(float));
constexpr int kFmaSteps = 400000;

// kFmaSteps multiply-adds on each of kChains vectors; returns their sum so
// the loop is not optimized away.
float fma_loop(float seed) {
  Vector acc[kChains];
  for (int j = 0; j < kChains; ++j) {
    for (int l = 0; l < kFloatsPerVector; ++l) acc[j][l] = seed + float(j + l);
  }
  const Vector scale = Vector{} + 0.999999f, add = Vector{} + 1e-7f;
  for (int s = 0; s < kFmaSteps; ++s) {
    for (int j = 0; j < kChains; ++j) acc[j] = acc[j] * scale + add;
  }
  float sum = 0;
  for (int j = 0; j < kChains; ++j) {
    for (int l = 0; l < kFloatsPerVector; ++l) sum += acc[j][l];
  }
  return sum;
}

// Copies slice t of n near-equal slices of src into dst.
void copy_slice(const std::vector<float>& src, std::vector<float>& dst, int t, int n) {
  const size_t size = src.size(), begin = size * size_t(t) / size_t(n), end = size * size_t(t + 1) / size_t(n);
  std::memcpy(dst.data() + begin, src.data() + begin, (end - begin) * sizeof(float));
}

// 1, 2, 4, ... below the number of CPUs, then that number: the default
// counts, none above the CPUs (a spin barrier over more threads than CPUs
// measures the scheduler, not the machine).
std::vector<int64_t> powers_of_two_and_cpus() {
  const int64_t cpus = std::max<int64_t>(std::thread::hardware_concurrency(), 1);
  std::vector<int64_t> counts;
  for (int64_t n = 1; n < cpus; n *= 2) counts.push_back(n);
  counts.push_back(cpus);
  return counts;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace ember;
  bench::Flags flags(argc, argv, "cpu_ceiling [--threads 1,2,4,...] [--repeats N]");
  const std::vector<int64_t> counts = flags.counts("--threads", powers_of_two_and_cpus(), 4096);
  const int repeats = int(flags.count("--repeats", 21, 1000000));
  flags.finish();

  const std::vector<float> small_src(size_t(64) * 32 * 28 * 28, 1.0f);
  std::vector<float> small_dst(small_src.size());
  const std::vector<float> large_src((size_t(512) << 20) / sizeof(float), 1.0f);
  std::vector<float> large_dst(large_src.size());
  std::vector<float> sink(size_t(*std::max_element(counts.begin(), counts.end())));

  std::printf("%u CPUs (std::thread::hardware_concurrency); median of %d repeats\n\n",
              std::thread::hardware_concurrency(), repeats);
  std::printf(
      "| threads | FMA GFLOP/s | FMA speedup | copy 6.4 MB us | its speedup | copy 512 MiB GB/s | its speedup |\n"
      "| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  double fma_one = 0, small_one = 0, large_one = 0;
  for (int64_t count : counts) {
    const int n = int(count);
    const double fma_us = median_round_us(n, repeats, [&](int t) { sink[size_t(t)] = fma_loop(float(t)); });
    const double small_us = median_round_us(n, repeats * 20, [&](int t) { copy_slice(small_src, small_dst, t, n); });
    const double large_us = median_round_us(n, repeats, [&](int t) { copy_slice(large_src, large_dst, t, n); });
    const double gflops = 2.0 * kChains * kFloatsPerVector * kFmaSteps * n / fma_us / 1e3;
    const double gbps = 2.0 * double(large_src.size() * sizeof(float)) / large_us / 1e3;
    if (fma_one == 0) {
      fma_one = gflops;
      small_one = small_us;
      large_one = gbps;
    }
    std::printf("| %d | %.0f | %.2fx | %.1f | %.2fx | %.1f | %.2fx |\n", n, gflops, gflops / fma_one, small_us,
                small_one / small_us, gbps, gbps / large_one);
  }
  // The loops' results are read, so they are not optimized away.
  double check = double(small_dst[1] + large_dst[1]);
  for (float v : sink) check += double(v);
  std::printf("\n(checksum %.3g)\n", check);
  return 0;
}
