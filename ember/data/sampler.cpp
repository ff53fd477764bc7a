// Sequential and seeded random samplers.
#include "ember/data/sampler.h"

#include <numeric>

#include "ember/core/error.h"
#include "ember/core/generator.h"
#include "ember/core/ops.h"

namespace ember::data {

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  EMBER_CHECK(n >= 0, "SequentialSampler: the dataset size must be non-negative, got " << n);
}

std::vector<int64_t> SequentialSampler::indices(uint64_t) const {
  std::vector<int64_t> out(static_cast<size_t>(n_));
  std::iota(out.begin(), out.end(), int64_t(0));
  return out;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  EMBER_CHECK(n >= 0, "RandomSampler: the dataset size must be non-negative, got " << n);
}

std::vector<int64_t> RandomSampler::indices(uint64_t epoch) const {
  Generator gen(seed_);
  gen.set_state({seed_, epoch * uint64_t(n_)});
  Tensor perm = randperm(n_, kCPU, &gen);
  const int64_t* p = perm.data<int64_t>();
  return std::vector<int64_t>(p, p + n_);
}

}  // namespace ember::data
