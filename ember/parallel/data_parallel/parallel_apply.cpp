// parallel_apply and its thread pool.
#include "ember/parallel/data_parallel/parallel_apply.h"

#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>

#include "ember/core/autocast_state.h"
#include "ember/core/error.h"
#include "ember/core/grad_mode.h"
#if EMBER_WITH_CUDA
#include "ember/core/cuda/stream.h"
#endif

namespace ember::parallel {

struct ReplicaThreads::State {
  std::mutex run_mutex;  // one run at a time
  std::mutex mutex;
  std::condition_variable start;
  std::condition_variable done;
  // The current run's jobs. A worker without a job in a run may wake only
  // after that run returned and its jobs are gone: it looks at job_count,
  // never at the vector, to learn that it has none.
  const std::vector<std::function<void()>>* jobs = nullptr;
  size_t job_count = 0;
  uint64_t generation = 0;
  size_t remaining = 0;
  bool stop = false;
  std::vector<std::thread> threads;

  void work(size_t index) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<void()>* job = nullptr;
      {
        std::unique_lock<std::mutex> lock(mutex);
        start.wait(lock, [&] { return stop || generation != seen; });
        if (stop) return;
        seen = generation;
        if (index + 1 < job_count) job = &(*jobs)[index + 1];
      }
      if (job == nullptr) continue;
      (*job)();
      std::lock_guard<std::mutex> lock(mutex);
      if (--remaining == 0) done.notify_all();
    }
  }
};

ReplicaThreads::ReplicaThreads(size_t workers) : state_(std::make_unique<State>()) {
  try {
    for (size_t i = 0; i < workers; ++i) state_->threads.emplace_back([s = state_.get(), i] { s->work(i); });
  } catch (const std::system_error& e) {
    const size_t started = state_->threads.size();
    stop();
    EMBER_FAIL("ReplicaThreads: could start only " << started << " of " << workers << " threads: " << e.what());
  }
}

ReplicaThreads::~ReplicaThreads() { stop(); }

void ReplicaThreads::stop() {
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->stop = true;
  }
  state_->start.notify_all();
  for (std::thread& t : state_->threads) t.join();
  state_->threads.clear();
}

size_t ReplicaThreads::workers() const { return state_->threads.size(); }

void ReplicaThreads::run(const std::vector<std::function<void()>>& jobs) {
  EMBER_CHECK(!jobs.empty() && jobs.size() <= workers() + 1,
              "ReplicaThreads::run: " << jobs.size() << " jobs for the caller and " << workers() << " workers");
  std::lock_guard<std::mutex> one_run(state_->run_mutex);
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->jobs = &jobs;
    state_->job_count = jobs.size();
    state_->remaining = jobs.size() - 1;
    ++state_->generation;
  }
  state_->start.notify_all();
  jobs[0]();
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->done.wait(lock, [&] { return state_->remaining == 0; });
}

namespace {

std::string message_of(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

bool is_out_of_memory(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const OutOfMemoryError&) {
    return true;
  } catch (...) {
    return false;
  }
}

// Runs a replica under the caller's autocast state (autocast is per thread,
// as grad mode is) in an autocast region of its own, and leaves the worker
// thread as it found it.
class AutocastScope {
 public:
  explicit AutocastScope(const autocast_state::State& state) : previous_(autocast_state::get_state()) {
    autocast_state::set_state(state);
    autocast_state::enter_region();
  }
  ~AutocastScope() {
    autocast_state::exit_region();
    autocast_state::set_state(previous_);
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  autocast_state::State previous_;
};

}  // namespace

std::vector<Value> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                  const std::vector<Value>& inputs, const std::vector<Device>& devices,
                                  const ReplicaForward& forward, ReplicaThreads* threads) {
  const size_t n = replicas.size();
  EMBER_CHECK(n > 0, "parallel_apply: no replicas to run");
  EMBER_CHECK(inputs.size() == n && devices.size() == n,
              "parallel_apply: " << n << " replicas, " << inputs.size() << " inputs and " << devices.size()
                                 << " devices; give one of each per replica");
  EMBER_CHECK(threads == nullptr || threads->workers() + 1 >= n,
              "parallel_apply: a pool of " << threads->workers() << " workers cannot run " << n << " replicas");
  const bool grad_enabled = GradMode::is_enabled();
  const autocast_state::State autocast = autocast_state::get_state();
#if EMBER_WITH_CUDA
  std::vector<std::optional<cuda::Stream>> streams(n);
  for (size_t i = 0; i < n; ++i) {
    if (devices[i].is_cuda()) streams[i] = cuda::current_stream(devices[i].index);
  }
#endif
  std::vector<Value> results(n);
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::function<void()>> jobs;
  for (size_t i = 0; i < n; ++i) {
    jobs.push_back([&, i] {
      try {
        GradModeGuard grad_mode(grad_enabled);
        AutocastScope autocast_scope(autocast);
#if EMBER_WITH_CUDA
        std::optional<cuda::StreamGuard> on_stream;
        if (streams[i]) on_stream.emplace(*streams[i]);
#endif
        results[i] = forward(*replicas[i], inputs[i]);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    });
  }
  if (threads != nullptr) {
    threads->run(jobs);
  } else {
    std::vector<std::thread> spawned;
    try {
      for (size_t i = 1; i < n; ++i) spawned.emplace_back(jobs[i]);
    } catch (const std::system_error& e) {
      for (std::thread& t : spawned) t.join();
      EMBER_FAIL("parallel_apply: cannot start a thread for replica " << spawned.size() + 1 << " of " << n << ": "
                                                                      << e.what());
    }
    jobs[0]();
    for (std::thread& t : spawned) t.join();
  }
  size_t failed = 0;
  size_t first = n;
  for (size_t i = 0; i < n; ++i) {
    if (!errors[i]) continue;
    ++failed;
    if (first == n) first = i;
  }
  if (failed == 0) return results;
  std::string message =
      "replica " + std::to_string(first) + " on " + devices[first].str() + " failed: " + message_of(errors[first]);
  if (failed > 1) message += " (and " + std::to_string(failed - 1) + " other replica(s) failed too)";
  if (is_out_of_memory(errors[first])) throw OutOfMemoryError(message);
  throw Error(message);
}

}  // namespace ember::parallel
