// DistributedSampler: padding or cutting the epoch's order, then striding.
#include "ember/data/distributed_sampler.h"

#include <numeric>

#include "ember/core/error.h"

namespace ember::data {

DistributedSampler::DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, DistributedSamplerOptions options)
    : n_(n), num_replicas_(num_replicas), rank_(rank), options_(options) {
  EMBER_CHECK(n >= 0, "DistributedSampler: the dataset size must be non-negative, got " << n);
  EMBER_CHECK(num_replicas >= 1,
              "DistributedSampler: num_replicas (the world size) must be at least 1, got " << num_replicas);
  EMBER_CHECK(rank >= 0 && rank < num_replicas, "DistributedSampler: rank " << rank << " is outside [0, "
                                                                            << num_replicas - 1 << "] for num_replicas "
                                                                            << num_replicas);
  per_rank_ = options.drop_last ? n / num_replicas : (n + num_replicas - 1) / num_replicas;
}

std::vector<int64_t> DistributedSampler::indices(uint64_t epoch) const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    order = RandomSampler(n_, options_.seed).indices(epoch);
  } else {
    order.resize(static_cast<size_t>(n_));
    std::iota(order.begin(), order.end(), int64_t(0));
  }
  const int64_t total = per_rank_ * num_replicas_;
  std::vector<int64_t> mine;
  mine.reserve(static_cast<size_t>(per_rank_));
  // Position p of the padded order is order[p % n]: the padding repeats the
  // order's beginning, as often as needed when n < num_replicas.
  for (int64_t p = rank_; p < total; p += num_replicas_) mine.push_back(order[static_cast<size_t>(p % n_)]);
  return mine;
}

}  // namespace ember::data
