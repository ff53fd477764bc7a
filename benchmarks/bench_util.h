// What every benchmark executable shares: its command line of
// "--flag value" pairs, the CPU-or-GPU device choice, and the timing of a
// step with its median and 95th percentile.
//
// Contract:
// - Flags: flags are read by name in any order; each may appear once. A
//   missing value, a value out of range or not among the allowed ones, an
//   unknown or repeated flag (reported by finish()) prints the message and
//   the usage line to stderr and exits with status 2: a benchmark is a
//   program, not a library, and a mistyped flag must not run a long
//   benchmark with the default. list() reads "a,b,c": each value among the
//   allowed ones, none twice, in the order given; counts() the same of
//   integers ("8,16,32").
// - device(): "--device cpu|cuda"; cuda:0 by default when a GPU is visible,
//   the CPU otherwise; "--device cuda" with no GPU visible is a usage error.
// - backward_and_step(): loss.backward() and optimizer.step(), or, with a
//   GradScaler, the scaled backward, the step it skips on an inf/NaN
//   gradient, and the scale's update: the end of every benchmark's
//   training step in float32 and in mixed precision alike; backward() and
//   step() are its two halves.
// - format(): printf into a std::string.
// - elapsed_us(a, b): microseconds between two steady_clock (Clock) points.
// - timing_description(): where and how time_steps() times, for a
//   benchmark's header line.
// - cells_or_error(): a table row's cells after its leading ones, or, when
//   measuring throws, "OOM" (ember::OutOfMemoryError: an expected outcome
//   of a size too large) or "failed" (any other ember::Error, which also
//   sets `failed`) and blank cells, the error on stderr.
// - time_steps(): runs `step` warmup times, then `steps` times, and returns
//   each timed step's milliseconds: on a CUDA device the time between CUDA
//   events recorded on its current stream before and after the step,
//   waiting for the second one after each step (so a step whose host work
//   is slower than its GPU work shows as such); on the CPU the step's wall
//   time (std::chrono::steady_clock).
// Header-only: each benchmark is one .cpp file built into its own program.
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ember/ember.h"
#if EMBER_WITH_CUDA
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/event.h"
#include "ember/core/cuda/stream.h"
#endif

namespace ember::bench {

using Clock = std::chrono::steady_clock;

inline double elapsed_us(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

class Flags {
 public:
  // usage: the synopsis, e.g. "train_step [--device cpu|cuda] [--steps N]";
  // its first word names the program in messages.
  Flags(int argc, char** argv, std::string usage) : usage_(std::move(usage)) {
    for (int i = 1; i < argc; i += 2) {
      const std::string flag = argv[i];
      if (flag.rfind("--", 0) != 0) fail("expected a --flag, got '" + flag + "'");
      if (i + 1 == argc) fail(flag + " needs a value");
      if (!values_.emplace(flag, argv[i + 1]).second) fail(flag + " is given twice");
    }
  }

  // The flag's value, or fallback when absent; allowed empty: any value.
  std::string text(const std::string& flag, const std::string& fallback,
                   std::initializer_list<const char*> allowed = {}) {
    const std::optional<std::string> v = take(flag);
    if (!v) return fallback;
    if (allowed.size() == 0) return *v;
    std::string choices;
    for (const char* a : allowed) {
      if (*v == a) return *v;
      choices += choices.empty() ? a : std::string(" or ") + a;
    }
    fail(flag + ": expected " + choices + ", got '" + *v + "'");
  }

  // A comma-separated list of allowed values, or fallback when absent.
  std::vector<std::string> list(const std::string& flag, const std::vector<std::string>& fallback,
                                const std::vector<std::string>& allowed) {
    const std::optional<std::string> v = take(flag);
    if (!v) return fallback;
    std::vector<std::string> items;
    size_t begin = 0;
    while (true) {
      const size_t comma = v->find(',', begin);
      const std::string item = v->substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
      if (std::find(allowed.begin(), allowed.end(), item) == allowed.end()) {
        std::string choices;
        for (const std::string& a : allowed) choices += (choices.empty() ? "" : ",") + a;
        fail(flag + ": expected a comma-separated list of " + choices + ", got '" + *v + "'");
      }
      if (std::find(items.begin(), items.end(), item) != items.end()) fail(flag + ": '" + item + "' is listed twice");
      items.push_back(item);
      if (comma == std::string::npos) return items;
      begin = comma + 1;
    }
  }

  // An integer flag from 1 to max, or fallback when absent.
  int64_t count(const std::string& flag, int64_t fallback, int64_t max) {
    const std::optional<std::string> v = take(flag);
    if (!v) return fallback;
    char* end = nullptr;
    const long long n = std::strtoll(v->c_str(), &end, 10);
    if (v->empty() || *end != '\0' || n < 1 || n > max)
      fail(flag + ": expected a count from 1 to " + std::to_string(max) + ", got '" + *v + "'");
    return n;
  }

  // A comma-separated list of integers from 1 to max ("8,16,32"), each
  // once, in the order given; fallback when absent.
  std::vector<int64_t> counts(const std::string& flag, const std::vector<int64_t>& fallback, int64_t max) {
    const std::optional<std::string> v = take(flag);
    if (!v) return fallback;
    std::vector<int64_t> items;
    size_t begin = 0;
    while (true) {
      const size_t comma = v->find(',', begin);
      const std::string item = v->substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
      char* end = nullptr;
      const long long n = std::strtoll(item.c_str(), &end, 10);
      if (item.empty() || *end != '\0' || n < 1 || n > max)
        fail(flag + ": expected a comma-separated list of counts from 1 to " + std::to_string(max) + ", got '" + *v +
             "'");
      if (std::find(items.begin(), items.end(), n) != items.end()) fail(flag + ": '" + item + "' is listed twice");
      items.push_back(n);
      if (comma == std::string::npos) return items;
      begin = comma + 1;
    }
  }

  // "--device cpu|cuda" (see the contract).
  Device device() {
    const bool gpu = cuda::is_available();
    const std::string d = text("--device", gpu ? "cuda" : "cpu", {"cpu", "cuda"});
    if (d == "cuda" && !gpu) fail("--device cuda: no CUDA device is visible");
    return d == "cuda" ? cuda_device(0) : kCPU;
  }

  // After every flag was read: an unknown flag is a usage error.
  void finish() {
    if (!values_.empty()) fail("unknown flag '" + values_.begin()->first + "'");
  }

  [[noreturn]] void fail(const std::string& message) const {
    const std::string program = usage_.substr(0, usage_.find(' '));
    std::fprintf(stderr, "%s: %s\nusage: %s\n", program.c_str(), message.c_str(), usage_.c_str());
    std::exit(2);
  }

 private:
  std::optional<std::string> take(const std::string& flag) {
    auto it = values_.find(flag);
    if (it == values_.end()) return std::nullopt;
    std::string v = std::move(it->second);
    values_.erase(it);
    return v;
  }

  std::string usage_;
  std::map<std::string, std::string> values_;  // given and not read yet
};

// The middle element of the sorted values (the upper middle of an even
// count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The 95th percentile by the nearest rank: the smallest value that at
// least 95% of the values do not exceed; 0 for none.
inline double p95(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = size_t(std::ceil(0.95 * double(v.size())));
  return v[std::max<size_t>(rank, 1) - 1];
}

inline void backward(const Tensor& loss, amp::GradScaler* scaler) {
  if (scaler) scaler->scale(loss).backward();
  else loss.backward();
}

inline void step(optim::Optimizer& optimizer, amp::GradScaler* scaler) {
  if (scaler) {
    scaler->step(optimizer);
    scaler->update();
  } else {
    optimizer.step();
  }
}

inline void backward_and_step(const Tensor& loss, optim::Optimizer& optimizer, amp::GradScaler* scaler) {
  backward(loss, scaler);
  step(optimizer, scaler);
}

__attribute__((format(printf, 1, 2))) inline std::string format(const char* fmt, ...) {
  va_list args, again;
  va_start(args, fmt);
  va_copy(again, args);
  std::string out(size_t(std::vsnprintf(nullptr, 0, fmt, args)), '\0');
  va_end(args);
  std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

// "cuda:0, NVIDIA H100 80GB HBM3 (CUDA events)" or "cpu (std::chrono wall time)".
inline std::string timing_description(Device device) {
#if EMBER_WITH_CUDA
  if (device.is_cuda()) return device.str() + ", " + cuda::properties(device.index).name + " (CUDA events)";
#endif
  (void)device;
  return "cpu (std::chrono wall time)";
}

// measure() returns " | a | b" (the cells after a row's leading ones); on
// an error, " | OOM" or " | failed" and `blanks` empty cells, the error on
// stderr after `what` (the row's name).
inline std::string cells_or_error(const std::string& what, int blanks, bool& failed,
                                  const std::function<std::string()>& measure) {
  std::string cells;
  try {
    return measure();
  } catch (const OutOfMemoryError& e) {
    cells = " | OOM";
    std::fprintf(stderr, "%s: %s\n", what.c_str(), e.what());
  } catch (const Error& e) {
    cells = " | failed";
    failed = true;
    std::fprintf(stderr, "%s: %s\n", what.c_str(), e.what());
  }
  for (int i = 0; i < blanks; ++i) cells += " |";
  return cells;
}

inline std::vector<double> time_steps(Device device, int warmup, int steps, const std::function<void()>& step) {
  for (int i = 0; i < warmup; ++i) step();
  std::vector<double> ms;
  ms.reserve(size_t(steps));
#if EMBER_WITH_CUDA
  if (device.is_cuda()) {
    cuda::synchronize(device.index);
    for (int i = 0; i < steps; ++i) {
      cuda::Event start(true), stop(true);
      start.record(cuda::current_stream(device.index));
      step();
      stop.record(cuda::current_stream(device.index));
      stop.synchronize();
      ms.push_back(start.elapsed_time(stop));
    }
    return ms;
  }
#endif
  for (int i = 0; i < steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    step();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  return ms;
}

}  // namespace ember::bench
