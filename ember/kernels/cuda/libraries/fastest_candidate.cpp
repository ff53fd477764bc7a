// The autotuners' stopwatch (contract in ember/kernels/cuda/libraries/fastest_candidate.h).
#include "ember/kernels/cuda/libraries/fastest_candidate.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <limits>

#include "ember/core/cuda/event.h"
#include "ember/core/cuda/stream.h"

namespace ember::cuda {

size_t fastest_candidate(int device, size_t count, const std::function<bool(size_t)>& run,
                         std::vector<CandidateTime>* timings) {
  constexpr float kNever = std::numeric_limits<float>::infinity();
  if (timings) timings->assign(count, CandidateTime{kNever, kNever});
  const Stream stream = current_stream(device);
  stream.synchronize();  // work queued before: every candidate starts on an idle stream
  Event start(/*enable_timing=*/true), stop(/*enable_timing=*/true);
  size_t best = 0;
  float best_ms = kNever;
  for (size_t i = 0; i < count; ++i) {
    if (!run(i)) {  // the warm-up
      cudaGetLastError();
      continue;
    }
    start.record(stream);
    const auto issue = std::chrono::steady_clock::now();
    bool ran = true;
    for (int r = 0; r < kTimedRuns && ran; ++r) ran = run(i);
    const std::chrono::duration<float, std::milli> host = std::chrono::steady_clock::now() - issue;
    if (!ran) {
      cudaGetLastError();
      continue;
    }
    stop.record(stream);
    const float ms = start.elapsed_time(stop);
    if (timings) (*timings)[i] = {ms, host.count()};
    if (ms < best_ms) {
      best_ms = ms;
      best = i;
    }
  }
  return best;
}

}  // namespace ember::cuda
