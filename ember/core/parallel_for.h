// ember's CPU threads: the thread count (PyTorch's torch.set_num_threads)
// and parallel_for / parallel_reduce over an index range, served by a small
// pool of ember's own.
//
// Contract:
// - get_num_threads() is how many threads a CPU kernel may use, the calling
//   thread included. It starts as EMBER_NUM_THREADS, else OMP_NUM_THREADS
//   (its first entry), else the number of CPUs this process may run on;
//   set_num_threads(n) changes it for the whole process.
// - parallel_for(begin, end, grain, fn) calls fn(b, e) on disjoint chunks
//   that cover [begin, end) and returns when all have run. A range of at
//   most `grain` indices, one thread, or a call from inside another chunk
//   (nested) runs fn(begin, end) on the calling thread and never touches the
//   pool. Otherwise the range is cut into
//   min(threads * kChunksPerThread, ceil(n / grain)) chunks of near-equal
//   size, a static split that depends only on the range, grain and thread
//   count; the threads (the caller too) claim chunks one at a time until
//   none is left.
// - The first exception a chunk throws is rethrown to the caller once every
//   running chunk has ended; chunks not yet started are skipped.
// - parallel_reduce(begin, end, grain, identity, f, combine) computes a
//   partial f(b, e, identity) per chunk of the same static split (also when
//   nested or when another thread holds the pool: its chunks then run one
//   after the other) and returns combine(...combine(combine(p0, p1), p2)...)
//   in chunk order. Determinism: a result depends only on the inputs and
//   get_num_threads(); it is bit-identical run to run at a given count, and
//   may round differently at another count, where partials group
//   differently (as in PyTorch).
// - One parallel region runs at a time: a call from another thread while
//   the pool is busy runs its chunks on its own thread (same split).
//
// The pool is ember's own rather than OpenMP: ThreadSanitizer cannot see
// inside GCC's uninstrumented libgomp (it reports false races), and the
// installed library should not impose an OpenMP runtime on its users.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace ember {

// Sets the number of threads CPU kernels use (n >= 1), for the whole process.
void set_num_threads(int n);
// The number of threads CPU kernels use, the calling thread included.
int get_num_threads();
// True inside a chunk of parallel_for / parallel_reduce (nested calls run inline).
bool in_parallel_region();

// The grain of a kernel whose per-index work is a few arithmetic operations
// (an elementwise op): smaller ranges stay on the calling thread, where
// waking other threads would cost more than it saves.
inline constexpr int64_t kCpuGrain = 32768;

namespace detail {
// Runs chunk(c) for every c in [0, n_chunks): on the pool when it is free
// and n_chunks > 1, else on the calling thread in order.
void run_chunks(int64_t n_chunks, const std::function<void(int64_t)>& chunk);
}  // namespace detail

// The most chunks a region gives each thread. More chunks than threads let
// the threads that start late (a worker woken from sleep, or one the OS
// has preempted) take fewer, so the region ends sooner: on a 16-CPU host,
// ember-train's CNN epoch at 16 threads ran 1.18x to 1.36x faster with 4
// chunks a thread than with 1 (benchmarks/results/h100-host/cpu_threads.md).
inline constexpr int64_t kChunksPerThread = 4;

// How many chunks parallel_for / parallel_reduce cut [0, n) into (1: the
// calling thread runs it all). A caller whose chunks each cost a partial to
// combine afterwards may ask for fewer chunks a thread.
inline int64_t parallel_chunk_count(int64_t n, int64_t grain, int64_t chunks_per_thread = kChunksPerThread) {
  const int threads = get_num_threads();
  if (threads <= 1 || n <= std::max<int64_t>(grain, 1)) return 1;
  return std::min<int64_t>(threads * chunks_per_thread, (n + grain - 1) / std::max<int64_t>(grain, 1));
}

// The start of chunk c of k over [begin, begin + n): near-equal sizes.
inline int64_t parallel_chunk_start(int64_t begin, int64_t n, int64_t k, int64_t c) {
  return begin + c * (n / k) + std::min(c, n % k);
}

template <typename F>
void parallel_for(int64_t begin, int64_t end, int64_t grain, F&& fn) {
  if (end <= begin) return;
  const int64_t n = end - begin;
  const int64_t k = in_parallel_region() ? 1 : parallel_chunk_count(n, grain);
  if (k == 1) {
    fn(begin, end);
    return;
  }
  detail::run_chunks(
      k, [&](int64_t c) { fn(parallel_chunk_start(begin, n, k, c), parallel_chunk_start(begin, n, k, c + 1)); });
}

template <typename T, typename F, typename Combine>
T parallel_reduce(int64_t begin, int64_t end, int64_t grain, const T& identity, F&& f, Combine&& combine) {
  if (end <= begin) return identity;
  const int64_t n = end - begin;
  const int64_t k = parallel_chunk_count(n, grain);
  if (k == 1) return f(begin, end, identity);
  std::vector<T> partial(size_t(k), identity);
  detail::run_chunks(k, [&](int64_t c) {
    partial[size_t(c)] = f(parallel_chunk_start(begin, n, k, c), parallel_chunk_start(begin, n, k, c + 1), identity);
  });
  T result = std::move(partial[0]);
  for (int64_t c = 1; c < k; ++c) result = combine(std::move(result), std::move(partial[size_t(c)]));
  return result;
}

}  // namespace ember
