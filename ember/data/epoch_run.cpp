// The worker threads and the in-order hand-off of one DataLoader epoch.
#include "ember/data/epoch_run.h"

#include <exception>
#include <sstream>
#include <utility>

#include "ember/core/error.h"
#include "ember/core/grad_mode.h"

namespace ember::data::detail {
namespace {

// "[12, 13, 14, 15]", or the first eight and a count for longer batches.
std::string index_list(const std::vector<int64_t>& indices) {
  constexpr size_t kShown = 8;
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < indices.size() && i < kShown; ++i) os << (i ? ", " : "") << indices[i];
  if (indices.size() > kShown) os << ", ... (" << indices.size() << " in all)";
  os << "]";
  return os.str();
}

}  // namespace

EpochRun::EpochRun(std::shared_ptr<const Dataset> dataset, std::vector<std::vector<int64_t>> batches, uint64_t epoch,
                   int num_workers, int prefetch_factor, HostAllocator alloc, BatchTransfer transfer)
    : dataset_(std::move(dataset)),
      batches_(std::move(batches)),
      epoch_(epoch),
      window_(int64_t(num_workers) * prefetch_factor),
      alloc_(alloc),
      transfer_(std::move(transfer)) {
  try {
    for (int w = 0; w < num_workers; ++w) workers_.emplace_back([this, w] { work(w); });
  } catch (...) {
    stop();  // joins the workers that did start
    throw;
  }
}

EpochRun::~EpochRun() { stop(); }

void EpochRun::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  can_claim_.notify_all();
  made_.notify_all();
  for (std::thread& t : workers_) {
    if (t.joinable()) t.join();
  }
}

EpochRun::Slot EpochRun::make(int64_t k, const std::string& where) const {
  const std::vector<int64_t>& indices = batches_[size_t(k)];
  Slot slot;
  try {
    NoGradGuard no_grad;
    Batch host = dataset_->get_batch(indices, alloc_);
    const int64_t b = int64_t(indices.size());
    EMBER_CHECK(host.input.defined() && host.target.defined() && host.input.dim() >= 1 && host.target.dim() >= 1 &&
                    host.input.size(0) == b && host.target.size(0) == b,
                "the dataset's get_batch returned input "
                    << (host.input.defined() ? shape_str(host.input.shape()) : "undefined") << " and target "
                    << (host.target.defined() ? shape_str(host.target.shape()) : "undefined") << " for " << b
                    << " indices; both need dim 0 of size " << b);
    slot.batch = transfer_.start(std::move(host));
  } catch (const std::exception& e) {
    slot.failed = true;
    slot.error = e.what();
  } catch (...) {
    slot.failed = true;
    slot.error = "an exception that is not a std::exception";
  }
  if (slot.failed) {
    slot.error = "DataLoader: batch " + std::to_string(k) + " of epoch " + std::to_string(epoch_) +
                 " (dataset indices " + index_list(indices) + ") failed in " + where + ": " + slot.error;
  }
  return slot;
}

void EpochRun::work(int worker) {
  const std::string where = "worker " + std::to_string(worker);
  const int64_t n = int64_t(batches_.size());
  for (;;) {
    int64_t k;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      can_claim_.wait(lock, [&] { return stopping_ || next_claim_ >= n || next_claim_ < next_consume_ + window_; });
      if (stopping_ || next_claim_ >= n) return;
      k = next_claim_++;
    }
    Slot slot = make(k, where);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (stopping_) return;
      ready_.emplace(k, std::move(slot));
    }
    made_.notify_one();
  }
}

bool EpochRun::next() {
  if (done_) return false;
  current_ = Batch{};               // let the previous batch go before waiting for the next
  const int64_t k = next_consume_;  // only this thread writes next_consume_
  if (k == int64_t(batches_.size())) {
    done_ = true;
    return false;
  }
  Slot slot;
  if (workers_.empty()) {
    next_consume_ = k + 1;
    slot = make(k, "the consumer's thread (num_workers = 0)");
  } else {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      made_.wait(lock, [&] { return ready_.count(k) != 0; });
      auto it = ready_.find(k);
      slot = std::move(it->second);
      ready_.erase(it);
      next_consume_ = k + 1;
    }
    can_claim_.notify_all();
  }
  if (slot.failed) {
    done_ = true;
    stop();
    throw Error(slot.error);
  }
  current_ = transfer_.finish(std::move(slot.batch));
  return true;
}

}  // namespace ember::data::detail
