// CollectiveTracker (ember/parallel/distributed/collective_tracker.h): progress records in the
// store and the reports built from them.
#include "ember/parallel/distributed/collective_tracker.h"

#include <charconv>
#include <sstream>
#include <utility>
#include <vector>

#include "ember/core/error.h"

namespace ember::parallel {

namespace {

std::string progress_key(int rank) { return "progress/" + std::to_string(rank); }
std::string join_key(int rank) { return "join/" + std::to_string(rank); }

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

CollectiveTracker::CollectiveTracker(std::shared_ptr<Store> store, int rank, int size,
                                     std::chrono::milliseconds timeout, std::string group)
    : store_(std::move(store)), rank_(rank), size_(size), timeout_(timeout), group_(std::move(group)) {}

void CollectiveTracker::join() {
  store_->set(join_key(rank_), "1");
  std::vector<std::string> keys;
  for (int r = 0; r < size_; ++r) keys.push_back(join_key(r));
  try {
    store_->wait(keys, timeout_);
  } catch (const Error& e) {
    std::vector<int> missing;
    for (int r = 0; r < size_; ++r)
      if (!store_->check({join_key(r)})) missing.push_back(r);
    EMBER_FAIL("process group " << group_ << ": rank " << rank_ << " waited " << timeout_.count() << " ms for all "
                                << size_ << " ranks to join, but rank" << (missing.size() == 1 ? " " : "s ")
                                << rank_list(missing) << " did not. Are all " << size_
                                << " processes running (WORLD_SIZE must be their number), and do all of them create "
                                << "the same process groups in the same order? (" << e.what() << ")");
  }
}

void CollectiveTracker::started(const Collective& c) noexcept {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!store_error_.empty()) return;
  }
  try {
    store_->set(progress_key(rank_), std::to_string(c.seq) + " " + collective_name(c.kind));
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mutex_);
    store_error_ = e.what();
  }
}

std::string CollectiveTracker::arrival_report(const Collective& c) {
  std::vector<int> behind;
  std::vector<std::string> last;
  try {
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      std::string key = progress_key(r);
      std::string record = store_->check({key}) ? store_->get(key) : "0 nothing";
      uint64_t seq = 0;
      std::from_chars(record.data(), record.data() + record.size(), seq);
      if (seq < c.seq) {
        behind.push_back(r);
        size_t space = record.find(' ');
        std::string name = space == std::string::npos ? "" : record.substr(space + 1);
        // Appends, not operator+: GCC 12 warns falsely (-Wrestrict) on "#" + std::string.
        std::string started = "none yet";
        if (seq > 0) started.assign("#").append(std::to_string(seq)).append(" ").append(name);
        last.push_back(started);
      }
    }
  } catch (const std::exception& e) {
    return "Which ranks arrived is unknown: the group's store cannot be reached: " + std::string(e.what());
  }
  if (behind.empty()) {
    return "Every rank of the group started collective #" + std::to_string(c.seq) +
           " (a peer that failed or exited during it, or a network problem, ends it)";
  }
  std::ostringstream os;
  os << (behind.size() == 1 ? "Rank " : "Ranks ") << rank_list(behind) << " of " << size_ << " did not arrive at #"
     << c.seq << " (last collective started: ";
  for (size_t i = 0; i < behind.size(); ++i) os << (i ? ", " : "") << "rank " << behind[i] << " " << last[i];
  os << "); a rank that did not arrive is slow, stuck or gone, or calls a different sequence of collectives "
     << "(EMBER_DISTRIBUTED_DEBUG=1 checks that)";
  return os.str();
}

}  // namespace ember::parallel
