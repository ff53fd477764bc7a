// One epoch of a DataLoader: the worker threads, the bounded window of
// batches in flight, and the consumer's position. Internal to data/ (the
// DataLoader owns one per epoch; ember/data/data_loader.h states the contract).
//
// Design: batch k is made (collated, then handed to the BatchTransfer) by
// whichever worker claims k first; workers claim in increasing order and
// only while k < next_consume + window, so at most `window` batches are in
// flight. Finished batches wait in a map keyed by k and the consumer takes
// them strictly in order. Stopping sets a flag under the mutex and wakes
// every waiter; a worker checks it before each claim and after each batch.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ember/data/collate.h"
#include "ember/data/dataset.h"
#include "ember/data/device_transfer.h"

namespace ember::data::detail {

class EpochRun {
 public:
  EpochRun(std::shared_ptr<const Dataset> dataset, std::vector<std::vector<int64_t>> batches, uint64_t epoch,
           int num_workers, int prefetch_factor, HostAllocator alloc, BatchTransfer transfer);
  ~EpochRun();
  EpochRun(const EpochRun&) = delete;
  EpochRun& operator=(const EpochRun&) = delete;

  // Moves to the next batch; false (and done()) when the epoch is over.
  // Rethrows a failure to make that batch as an ember::Error, ending the epoch.
  bool next();
  bool done() const { return done_; }
  Batch& current() { return current_; }

 private:
  // A made batch, or why it could not be made.
  struct Slot {
    InFlightBatch batch;
    std::string error;
    bool failed = false;
  };

  void work(int worker);
  Slot make(int64_t k, const std::string& where) const;
  void stop();

  const std::shared_ptr<const Dataset> dataset_;
  const std::vector<std::vector<int64_t>> batches_;
  const uint64_t epoch_;
  const int64_t window_;
  const HostAllocator alloc_;
  const BatchTransfer transfer_;

  std::mutex mutex_;
  std::condition_variable can_claim_;  // workers: a slot of the window opened, or stop
  std::condition_variable made_;       // consumer: a batch was made
  int64_t next_claim_ = 0;             // guarded by mutex_
  int64_t next_consume_ = 0;           // guarded by mutex_
  std::map<int64_t, Slot> ready_;      // guarded by mutex_
  bool stopping_ = false;              // guarded by mutex_
  std::vector<std::thread> workers_;

  Batch current_;
  bool done_ = false;
};

}  // namespace ember::data::detail
