// The thread count and the pool behind parallel_for (see ember/core/parallel_for.h).
//
// The pool holds get_num_threads() - 1 workers, started on the first
// parallel region and restarted when the count changes. A region publishes
// its chunk function under the pool's mutex and bumps a generation number;
// the caller and the woken workers claim chunks from one atomic counter.
// Workers join and leave a region under the mutex, and the caller returns
// only when no worker is inside it, so a late worker never sees a finished
// region's function. Between regions a worker spins for up to kSpin on
// the generation number before it sleeps, and the caller spins the same way
// on the workers' leaving, so back-to-back regions (a training step's ops)
// do not pay a futex wake-up each. The pool is leaked on purpose (workers blocked at exit
// must not be joined by a static destructor), and a forked child starts a
// fresh one, as the parent's workers do not exist there.
#include "ember/core/parallel_for.h"

#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
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
    {
      std::lock_guard<std::mutex> lock(mutex_);
      chunk_ = &chunk;
      n_chunks_ = n_chunks;
      next_.store(0, std::memory_order_relaxed);
      error_ = nullptr;
      generation_.fetch_add(1, std::memory_order_release);
    }
    wake_.notify_all();
    t_in_region = true;
    work(chunk, n_chunks);
    t_in_region = false;
    std::exception_ptr error;
    spin_until([&] { return inside_.load(std::memory_order_acquire) == 0; });
    {
      std::unique_lock<std::mutex> lock(mutex_);
      done_.wait(lock, [&] { return inside_.load(std::memory_order_relaxed) == 0; });
      chunk_ = nullptr;
      error = std::exchange(error_, nullptr);
    }
    if (error) std::rethrow_exception(error);
    return true;
  }

 private:
  void work(const std::function<void(int64_t)>& chunk, int64_t n_chunks) {
    for (int64_t c; (c = next_.fetch_add(1, std::memory_order_relaxed)) < n_chunks;) {
      try {
        chunk(c);
      } catch (...) {
        next_.store(n_chunks, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(mutex_);
        if (!error_) error_ = std::current_exception();
      }
    }
  }

  void worker_loop() {
    t_in_region = true;
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      if (!stop_) {
        lock.unlock();
        spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; });
        lock.lock();
      }
      wake_.wait(lock, [&] { return stop_ || generation_.load(std::memory_order_relaxed) != seen; });
      if (stop_) return;
      seen = generation_.load(std::memory_order_relaxed);
      if (chunk_ == nullptr) continue;  // that region already ended
      const std::function<void(int64_t)>& chunk = *chunk_;
      const int64_t n_chunks = n_chunks_;
      inside_.fetch_add(1, std::memory_order_relaxed);
      lock.unlock();
      work(chunk, n_chunks);
      lock.lock();
      if (inside_.fetch_sub(1, std::memory_order_release) == 1) done_.notify_one();
    }
  }

  // Called with region_mutex_ held, so no region is running.
  void resize(int n_workers) {
    if (int(workers_.size()) == n_workers) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_.notify_all();
    for (std::thread& t : workers_) t.join();
    workers_.clear();
    stop_ = false;
    for (int i = 0; i < n_workers; ++i) workers_.emplace_back([this] { worker_loop(); });
  }

  std::mutex region_mutex_;  // held by the caller of the running region
  std::mutex mutex_;         // guards everything below but next_ (see generation_, inside_)
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  const std::function<void(int64_t)>* chunk_ = nullptr;
  int64_t n_chunks_ = 0;
  std::atomic<int64_t> next_{0};
  std::atomic<uint64_t> generation_{0};  // changed under mutex_, spun on without it
  std::atomic<int> inside_{0};           // workers inside the current region; likewise
  std::exception_ptr error_;
  bool stop_ = false;
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
