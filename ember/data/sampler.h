// Samplers: which dataset indices an epoch visits, in which order. The
// DataLoader cuts that list into batches; a sampler knows nothing of batches,
// workers or devices, so new ones (a distributed sampler that gives each rank
// its share) plug in through DataLoaderOptions::sampler.
//
// Contract:
// - indices(epoch) returns size() indices, each in [0, dataset size), and
//   depends on nothing but the sampler's construction arguments and epoch:
//   the same epoch gives the same list on every call, on every machine.
// - indices() is const and safe to call from several threads.
#pragma once

#include <cstdint>
#include <vector>

namespace ember::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual int64_t size() const = 0;
  virtual std::vector<int64_t> indices(uint64_t epoch) const = 0;
};

// 0, 1, ..., n - 1 in every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  int64_t size() const override { return n_; }
  std::vector<int64_t> indices(uint64_t epoch) const override;

 private:
  int64_t n_;
};

// A random permutation of 0 .. n - 1, a new one each epoch. The permutation
// of epoch e is randperm(n) from a Philox Generator seeded with `seed` at
// counter offset e * n, so epochs draw disjoint random numbers and any
// epoch can be replayed alone (after a restart, say).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  int64_t size() const override { return n_; }
  uint64_t seed() const { return seed_; }
  std::vector<int64_t> indices(uint64_t epoch) const override;

 private:
  int64_t n_;
  uint64_t seed_;
};

}  // namespace ember::data
