// A progress display on stderr for a loop over batches: batch i/N, the
// running loss, samples/s (or another unit: ember-gpt counts tokens) and
// the time left.
//
//   Progress bar("epoch 1/10", loader.size(), Progress::Mode::Lines);
//   for (...) { ...; if (bar.due(i + 1)) bar.draw(i + 1, samples, running_loss()); }
//   bar.finish();
//
// Contract:
// - On a terminal (stderr is a TTY) the bar is one line redrawn in place
//   with \r, at most every 100 ms and at the last batch; finish() erases
//   it, so the next line printed (on stdout or stderr) starts clean.
// - Elsewhere (a log file, CI), Mode::Lines prints a plain line each time
//   another tenth of the batches is done, and Mode::Silent prints nothing.
// - due() is cheap and says whether draw() would show anything now; the
//   caller computes what draw() needs (the running loss may have to be read
//   from the GPU, a synchronization) only then.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ember::train {

class Progress {
 public:
  enum class Mode { Lines, Silent };  // what to do when stderr is not a terminal

  // unit names what draw()'s count counts, e.g. "samples" -> "123 samples/s".
  Progress(std::string label, int64_t total, Mode mode, std::string unit = "samples");
  ~Progress();
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  bool due(int64_t done) const;
  // loss < 0: not shown.
  void draw(int64_t done, int64_t samples, double loss);
  void finish();

 private:
  using Clock = std::chrono::steady_clock;

  std::string label_;
  std::string unit_;
  int64_t total_;
  Mode mode_;
  bool tty_;
  bool drawn_ = false;  // a bar is on the terminal line
  Clock::time_point start_;
  Clock::time_point last_draw_;
  int64_t next_line_at_;  // Lines mode: the batch count of the next plain line
};

// "1:05", "12:00:03": a duration in seconds as a clock reading.
std::string format_duration(double seconds);

}  // namespace ember::train
