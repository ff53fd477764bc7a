// The progress display: when to redraw, and what one line shows.
#include "examples/train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ember::train {
namespace {

constexpr auto kRedrawInterval = std::chrono::milliseconds(100);
constexpr int kBarWidth = 24;
constexpr int64_t kLines = 10;  // plain lines per loop

}  // namespace

std::string format_duration(double seconds) {
  const int64_t s = std::max<int64_t>(0, std::llround(seconds));
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", static_cast<long long>(s / 3600),
                  static_cast<long long>(s / 60 % 60), static_cast<long long>(s % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", static_cast<long long>(s / 60), static_cast<long long>(s % 60));
  }
  return buf;
}

Progress::Progress(std::string label, int64_t total, Mode mode, std::string unit)
    : label_(std::move(label)),
      unit_(std::move(unit)),
      total_(std::max<int64_t>(total, 1)),
      mode_(mode),
      tty_(isatty(fileno(stderr)) == 1),
      start_(Clock::now()),
      last_draw_(start_ - kRedrawInterval),
      next_line_at_((total_ + kLines - 1) / kLines) {}

Progress::~Progress() { finish(); }

bool Progress::due(int64_t done) const {
  if (tty_) return done >= total_ || Clock::now() - last_draw_ >= kRedrawInterval;
  return mode_ == Mode::Lines && (done >= next_line_at_ || done >= total_);
}

void Progress::draw(int64_t done, int64_t samples, double loss) {
  const auto now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double rate = elapsed > 0 ? double(samples) / elapsed : 0.0;
  const double eta = done > 0 ? elapsed * double(total_ - done) / double(done) : 0.0;
  char stats[128];
  int n = std::snprintf(stats, sizeof stats, "%lld/%lld", static_cast<long long>(done), static_cast<long long>(total_));
  if (loss >= 0) n += std::snprintf(stats + n, sizeof stats - size_t(n), "  loss %.4f", loss);
  std::snprintf(stats + n, sizeof stats - size_t(n), "  %.0f %s/s  ETA %s", rate, unit_.c_str(),
                format_duration(eta).c_str());
  if (tty_) {
    const int filled = int(int64_t(kBarWidth) * std::min(done, total_) / total_);
    std::string bar(size_t(filled), '=');
    if (filled < kBarWidth) bar += '>' + std::string(size_t(kBarWidth - filled - 1), ' ');
    std::fprintf(stderr, "\r%s [%s] %s\033[K", label_.c_str(), bar.c_str(), stats);
    drawn_ = true;
  } else {
    std::fprintf(stderr, "%s: %s\n", label_.c_str(), stats);
    const int64_t step = (total_ + kLines - 1) / kLines;
    while (next_line_at_ <= done) next_line_at_ += step;
  }
  std::fflush(stderr);
  last_draw_ = now;
}

void Progress::finish() {
  if (drawn_) {
    std::fprintf(stderr, "\r\033[K");
    std::fflush(stderr);
    drawn_ = false;
  }
}

}  // namespace ember::train
