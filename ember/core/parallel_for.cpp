// The thread count and the pool behind parallel_for (see ember/core/parallel_for.h).
//
// The pool holds get_num_threads() - 1 workers, started on the first
// parallel region and restarted when the count changes. A region publishes
// its chunk function and bumps a generation number; the caller and the
// workers claim chunks from one atomic counter. Nothing on a region's path
// takes a lock: a worker counts itself in and out with an atomic, and the
// caller closes the region and returns only when no worker is counted in,
// so a late worker never sees a finished region's function. (A mutex there
// made the 15 workers of a 16-thread region queue for it, each waiting for
// the one before it to be woken, when they joined and again when they left.)
// Between regions a worker spins for up to kSpin on the generation number
// before it sleeps on it (a futex), and the caller spins the same way on the
// workers' leaving, so back-to-back regions (a training step's ops) do not
// pay a wake-up each. The pool is leaked on purpose (workers blocked at
// exit must not be joined by a static destructor), and a forked child
// starts a fresh one, as the parent's workers do not exist there.
#include "ember/core/parallel_for.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "ember/core/error.h"

namespace ember {
namespace {

thread_local bool t_in_region = false;

constexpr std::chrono::microseconds kSpin{50};

// Spins until done() or kSpin has passed; true when done() became true.
template <typename Done>
bool spin_until(Done&& done) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (done()) return true;
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return false;
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
}

// A positive thread count from an environment variable; 0 when unset. Only
// OMP_NUM_THREADS may be a list (one count per nesting level): its first entry counts.
int threads_from_env(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(env, &end, 10);
  const bool list_ok = std::string(name) == "OMP_NUM_THREADS" && *end == ',';
  EMBER_CHECK(n >= 1 && n <= 1 << 16 && (*end == '\0' || list_ok),
              name << ": expected a positive number of CPU threads, got '" << env
                   << "'; set it to a count such as 4, or unset it to use every CPU this process may run on");
  return int(n);
}

int default_num_threads() {
  if (int n = threads_from_env("EMBER_NUM_THREADS")) return n;
  if (int n = threads_from_env("OMP_NUM_THREADS")) return n;
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
  return int(std::max(1u, std::thread::hardware_concurrency()));
}

std::atomic<int>& num_threads() {
  static std::atomic<int> n{default_num_threads()};
  return n;
}

class Pool {
 public:
  static Pool*& instance() {
    static Pool* pool = [] {
      pthread_atfork(nullptr, nullptr, [] { instance() = new Pool; });
      return new Pool;
    }();
    return pool;
  }

  // Runs chunk(c) for c in [0, n_chunks) on threads - 1 workers and the
  // caller; false (nothing run) when another thread holds the pool.
  bool run(int threads, int64_t n_chunks, const std::function<void(int64_t)>& chunk) {
    std::unique_lock<std::mutex> region(region_mutex_, std::try_to_lock);
    if (!region.owns_lock()) return false;
    resize(threads - 1);
    // The region before this one ended with no worker counted in, and a
    // worker counted in since reads these plain fields only once it loads
    // open_ as true: they are the caller's to write, and open_'s store
    // publishes them. (error_ is null: the last region took it.)
    chunk_ = &chunk;
    n_chunks_ = n_chunks;
    next_.store(0, std::memory_order_relaxed);
    open_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    t_in_region = true;
    work(chunk, n_chunks);
    t_in_region = false;
    // Close, then wait for the workers inside. A worker counts itself in
    // before it loads open_ (both sequentially consistent), so either this
    // thread sees its count and waits for it, or it sees the region closed
    // and never touches chunk_.
    open_.store(false);
    if (!spin_until([&] { return inside_.load() == 0; })) {
      for (int inside; (inside = inside_.load()) != 0;) inside_.wait(inside);
    }
    chunk_ = nullptr;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
    return true;
  }

 private:
  void work(const std::function<void(int64_t)>& chunk, int64_t n_chunks) {
    for (int64_t c; (c = next_.fetch_add(1, std::memory_order_relaxed)) < n_chunks;) {
      try {
        chunk(c);
      } catch (...) {
        next_.store(n_chunks, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(error_mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  void worker_loop(uint32_t seen) {
    t_in_region = true;
    for (;;) {
      if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
        generation_.wait(seen);
      }
      seen = generation_.load();
      if (stop_.load()) return;
      inside_.fetch_add(1);
      if (open_.load()) work(*chunk_, n_chunks_);
      if (inside_.fetch_sub(1) == 1) inside_.notify_one();
    }
  }

  // Called with region_mutex_ held, so no region is running.
  void resize(int n_workers) {
    if (int(workers_.size()) == n_workers) return;
    stop_.store(true);
    generation_.fetch_add(1);
    generation_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_.store(false);
    const uint32_t now = generation_.load();
    for (int i = 0; i < n_workers; ++i) workers_.emplace_back([this, now] { worker_loop(now); });
  }

  std::mutex region_mutex_;  // held by the caller of the running region
  std::vector<std::thread> workers_;
  // The running region, written by its caller while no worker is inside.
  const std::function<void(int64_t)>* chunk_ = nullptr;
  int64_t n_chunks_ = 0;
  std::exception_ptr error_;  // the first chunk's exception; under error_mutex_ while open
  std::mutex error_mutex_;
  std::atomic<int64_t> next_{0};         // the next chunk to claim
  std::atomic<bool> open_{false};        // a region's chunks may be claimed
  std::atomic<uint32_t> generation_{0};  // bumped for each region and for stop_
  std::atomic<int> inside_{0};           // workers between counting in and out
  std::atomic<bool> stop_{false};
};

}  // namespace

void set_num_threads(int n) {
  EMBER_CHECK(n >= 1, "set_num_threads: expected a positive number of threads, got "
                          << n << "; use 1 for single-threaded CPU kernels");
  num_threads().store(n, std::memory_order_relaxed);
}

int get_num_threads() { return num_threads().load(std::memory_order_relaxed); }

bool in_parallel_region() { return t_in_region; }

namespace detail {

void run_chunks(int64_t n_chunks, const std::function<void(int64_t)>& chunk) {
  const int threads = get_num_threads();
  if (n_chunks > 1 && threads > 1 && !t_in_region && Pool::instance()->run(threads, n_chunks, chunk)) return;
  const bool outer = !t_in_region;
  t_in_region = true;
  try {
    for (int64_t c = 0; c < n_chunks; ++c) chunk(c);
  } catch (...) {
    if (outer) t_in_region = false;
    throw;
  }
  if (outer) t_in_region = false;
}

}  // namespace detail

}  // namespace ember
