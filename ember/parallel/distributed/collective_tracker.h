// CollectiveTracker: what each rank of a group has got to, kept in the
// group's store, so that a failed collective can say which ranks did not
// arrive instead of only "timed out". Used by ProcessGroup and its backends.
//
// Contract:
// - join() is the group's creation barrier: every rank announces itself and
//   waits for the others; after the timeout it throws an ember::Error naming
//   the ranks that never joined.
// - started(c) records "rank r started collective #seq (name)" under
//   progress/<r>. It never throws: a store that cannot be reached is
//   remembered and reported by arrival_report().
// - arrival_report(c) is a sentence for the error of a failed collective c:
//   the ranks whose last started collective is before c, each with what it
//   started last, or that every rank got there, or that the store cannot be
//   reached (TCPStore's error then says that rank 0, its server, has gone).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "ember/parallel/distributed/collective.h"
#include "ember/parallel/distributed/store/store.h"

namespace ember::parallel {

class CollectiveTracker {
 public:
  // `store` is the group's own (prefixed) store; `group` names the group in errors.
  CollectiveTracker(std::shared_ptr<Store> store, int rank, int size, std::chrono::milliseconds timeout,
                    std::string group);

  void join();
  void started(const Collective& c) noexcept;
  std::string arrival_report(const Collective& c);

  Store& store() { return *store_; }
  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }
  const std::string& group() const { return group_; }

 private:
  std::shared_ptr<Store> store_;
  int rank_;
  int size_;
  std::chrono::milliseconds timeout_;
  std::string group_;
  std::mutex mutex_;
  std::string store_error_;  // the first failure of started()'s writes
};

}  // namespace ember::parallel
