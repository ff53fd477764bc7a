// The per-epoch CSV log of ember-train (--log FILE.csv):
//   epoch,train_loss,train_acc,test_acc,seconds,lr
//   1,0.512345,81.2300,85.4000,6.214,0.000975528
// Accuracies are percentages; seconds is the epoch's training plus
// evaluation time; lr is the learning rate of the epoch's last step.
//
// Contract:
// - A fresh run (kept_epochs = 0) writes the header, replacing any file.
// - A resumed run passes the epochs its checkpoint holds: the header and the
//   rows of those epochs already in the file are kept (rows of later epochs,
//   written after the checkpoint by a run that then died, are dropped), so
//   the file reads as one run. A missing file starts with the header.
// - Each row is flushed when written, so the file is complete up to the
//   last finished epoch whatever happens later. I/O failures are
//   ember::Errors naming the file.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace ember::train {

struct EpochRow {
  int64_t epoch = 0;
  double train_loss = 0;
  double train_acc = 0;
  double test_acc = 0;
  double seconds = 0;
  double lr = 0;
};

class EpochLog {
 public:
  EpochLog(std::string path, int64_t kept_epochs);
  void write(const EpochRow& row);

 private:
  std::string path_;
  std::ofstream out_;
};

}  // namespace ember::train
