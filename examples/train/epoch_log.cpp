// The CSV epoch log: starting or continuing the file, and its rows.
#include "examples/train/epoch_log.h"

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <vector>

#include "ember/core/error.h"

namespace ember::train {
namespace {

constexpr const char* kHeader = "epoch,train_loss,train_acc,test_acc,seconds,lr";

// The epoch number at the start of a row, or -1 when the line is not a row.
int64_t row_epoch(const std::string& line) {
  int64_t epoch = -1;
  const char* end = line.data() + line.size();
  auto [ptr, ec] = std::from_chars(line.data(), end, epoch);
  return ec == std::errc() && ptr != end && *ptr == ',' ? epoch : -1;
}

}  // namespace

EpochLog::EpochLog(std::string path, int64_t kept_epochs) : path_(std::move(path)) {
  std::vector<std::string> kept;
  if (kept_epochs > 0) {
    std::ifstream in(path_);
    std::string line;
    while (std::getline(in, line)) {
      const int64_t epoch = row_epoch(line);
      if (epoch >= 1 && epoch <= kept_epochs) kept.push_back(line);
    }
  }
  out_.open(path_, std::ios::out | std::ios::trunc);
  EMBER_CHECK(out_.is_open(), "ember-train: cannot write the log " << path_ << ": " << std::strerror(errno));
  out_ << kHeader << "\n";
  for (const std::string& line : kept) out_ << line << "\n";
  out_.flush();
  EMBER_CHECK(out_.good(), "ember-train: writing the log " << path_ << " failed: " << std::strerror(errno));
}

void EpochLog::write(const EpochRow& r) {
  char line[256];
  std::snprintf(line, sizeof line, "%lld,%.6f,%.4f,%.4f,%.3f,%.9g\n", static_cast<long long>(r.epoch), r.train_loss,
                r.train_acc, r.test_acc, r.seconds, r.lr);
  out_ << line;
  out_.flush();
  EMBER_CHECK(out_.good(), "ember-train: writing the log " << path_ << " failed: " << std::strerror(errno));
}

}  // namespace ember::train
