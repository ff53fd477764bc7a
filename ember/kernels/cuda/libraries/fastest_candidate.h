// The autotuners' stopwatch: which of several candidate ways to run one
// operation (cublasLt algorithms, cuDNN execution plans) is fastest here.
// Internal to the CUDA kernels.
//
// Contract:
// - fastest_candidate(device, count, run) waits for the work already queued
//   on the current stream of `device`, then calls run(i) for each candidate
//   i in [0, count) once as a warm-up, then kTimedRuns times back to back
//   between two CUDA events on the current stream of `device` (already
//   current; the stream must not be capturing a graph), and returns the
//   index whose runs took the least time between the events. run(i)
//   launches candidate i on that stream and returns false when it cannot
//   run; such a candidate is passed over and the CUDA error it left is
//   cleared. When no candidate runs, it returns 0.
// - With `timings`, it also fills one CandidateTime per candidate: the
//   milliseconds between the events (the figure compared) and the host's
//   milliseconds to issue the timed runs; both infinite for a candidate
//   that did not run.
// - The events span the host's issue as well as the device's work: where a
//   run's launches take the host longer than its kernels take the device,
//   the device waits between runs and the time counts it. So the winner is
//   the fastest as a step of many small operations sees it, not only the
//   one with the fastest kernels.
// - It waits for the device once, and once per candidate: an error an
//   earlier op left pending (ember/core/cuda/index_error.h) is raised there.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace ember::cuda {

inline constexpr int kTimedRuns = 3;

struct CandidateTime {
  float ms, host_ms;
};

size_t fastest_candidate(int device, size_t count, const std::function<bool(size_t)>& run,
                         std::vector<CandidateTime>* timings = nullptr);

}  // namespace ember::cuda
