// parallel_apply: runs each replica of a module on its own input at once,
// one host thread per replica.
//
// Contract:
// - parallel_apply(replicas, inputs, devices, forward) calls
//   forward(*replicas[i], inputs[i]) for every i concurrently and returns the
//   results in order. Replica 0 runs on the calling thread, the others on
//   threads of their own: fresh std::threads, or those of a ReplicaThreads
//   pool kept between calls.
// - Every call runs with the caller's grad mode and autocast state (both are
//   per thread; a replica gets an autocast region, and so a weight-cast
//   cache, of its own). On
//   a CUDA device it runs with that device current and, as its current
//   stream, the caller's current stream of that device: the replica's
//   kernels then queue behind what the caller queued there (the scattered
//   inputs, the broadcast parameters) and ahead of what it queues next (the
//   gather, the backward pass), with no event and no cross-stream memory
//   reuse to track, while replicas on different devices run concurrently
//   (PyTorch's parallel_apply does the same).
// - Every call has finished when parallel_apply returns or throws. If any
//   threw, it throws (an ember::Error, or an OutOfMemoryError if that was
//   the cause) "replica 1 on cuda:1 failed: <its message>" for the lowest
//   failing replica, saying how many others failed as well.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "ember/nn/module.h"
#include "ember/parallel/data_parallel/value.h"

namespace ember::parallel {

// How a replica is called on its piece of the input.
using ReplicaForward = std::function<Value(nn::Module& replica, const Value& input)>;

// Threads kept between calls; job 0 of run() is the caller's.
class ReplicaThreads {
 public:
  // `workers` threads, for up to workers + 1 jobs per run.
  explicit ReplicaThreads(size_t workers);
  ~ReplicaThreads();
  ReplicaThreads(const ReplicaThreads&) = delete;
  ReplicaThreads& operator=(const ReplicaThreads&) = delete;

  size_t workers() const;
  // Runs jobs[0] on the calling thread and jobs[i] on worker i - 1, and
  // returns when all are done. Jobs must not throw. One run at a time.
  void run(const std::vector<std::function<void()>>& jobs);

 private:
  struct State;
  void stop();
  std::unique_ptr<State> state_;
};

std::vector<Value> parallel_apply(const std::vector<std::shared_ptr<nn::Module>>& replicas,
                                  const std::vector<Value>& inputs, const std::vector<Device>& devices,
                                  const ReplicaForward& forward, ReplicaThreads* threads = nullptr);

}  // namespace ember::parallel
