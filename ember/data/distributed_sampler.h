// DistributedSampler: each rank's share of a dataset, as
// torch.utils.data.DistributedSampler gives it, so that the ranks of a
// data-parallel run see disjoint slices that together cover the epoch.
//
// Contract:
// - The epoch's order is 0 .. n - 1, or with shuffle the permutation
//   RandomSampler(n, seed) draws for that epoch, the same on every rank (so
//   every rank must be given the same seed and epoch; DataLoader::set_epoch
//   chooses the epoch, and a new epoch reshuffles).
// - Without drop_last the order is padded by repeating its first indices
//   (wrapping around as often as needed) up to a multiple of num_replicas;
//   with drop_last its tail is cut to the largest multiple. Rank r then
//   takes positions r, r + num_replicas, r + 2 num_replicas, ...; every rank
//   gets size() = ceil(n / num_replicas) indices (floor with drop_last), so
//   all ranks run the same number of batches, which DDP needs.
// - The shares of one epoch are disjoint except for the padding.
#pragma once

#include <cstdint>
#include <vector>

#include "ember/data/sampler.h"

namespace ember::data {

struct DistributedSamplerOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};

class DistributedSampler : public Sampler {
 public:
  // n: the dataset's size; num_replicas: the world size; rank in [0, num_replicas).
  DistributedSampler(int64_t n, int64_t num_replicas, int64_t rank, DistributedSamplerOptions options = {});
  int64_t size() const override { return per_rank_; }
  std::vector<int64_t> indices(uint64_t epoch) const override;

  int64_t num_replicas() const { return num_replicas_; }
  int64_t rank() const { return rank_; }

 private:
  int64_t n_;
  int64_t num_replicas_;
  int64_t rank_;
  DistributedSamplerOptions options_;
  int64_t per_rank_;
};

}  // namespace ember::data
