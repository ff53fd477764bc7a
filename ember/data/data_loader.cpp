// DataLoader: options, samplers, batching of an epoch's indices, iteration.
#include "ember/data/data_loader.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "ember/core/cuda/device.h"
#include "ember/core/error.h"
#include "ember/core/generator.h"
#include "ember/core/philox.h"
#include "ember/data/collate.h"
#include "ember/data/epoch_run.h"

namespace ember::data {
namespace {

std::shared_ptr<const Dataset> non_null(std::shared_ptr<const Dataset> dataset) {
  EMBER_CHECK(dataset != nullptr, "DataLoader: the dataset is null");
  return dataset;
}

const DataLoaderOptions& checked(const DataLoaderOptions& o) {
  EMBER_CHECK(o.batch_size >= 1, "DataLoader: batch_size must be at least 1, got " << o.batch_size);
  EMBER_CHECK(o.num_workers >= 0,
              "DataLoader: num_workers must be 0 (collate on the consumer's thread) or more, got " << o.num_workers);
  EMBER_CHECK(o.prefetch_factor >= 1,
              "DataLoader: prefetch_factor (batches in flight per worker) must be at least 1, "
              "got "
                  << o.prefetch_factor);
  EMBER_CHECK(!(o.sampler && o.shuffle),
              "DataLoader: the sampler option is mutually exclusive with shuffle; shuffle "
              "inside the sampler, or leave the sampler unset");
  return o;
}

// A seed for shuffling drawn from the CPU default generator, so that
// ember::manual_seed fixes it.
uint64_t draw_seed() {
  const GeneratorState st = default_generator(kCPU).reserve(1);
  const philox::Uint4 r = philox::generate(st.seed, st.offset);
  return (uint64_t(r.x) << 32) | r.y;
}

std::shared_ptr<const Sampler> make_sampler(const DataLoaderOptions& o, int64_t n) {
  if (o.sampler) return o.sampler;
  if (o.shuffle) return std::make_shared<RandomSampler>(n, o.seed ? *o.seed : draw_seed());
  return std::make_shared<SequentialSampler>(n);
}

}  // namespace

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options)
    : dataset_(non_null(std::move(dataset))),
      options_(checked(options)),
      sampler_(make_sampler(options_, dataset_->size())),
      transfer_(options_.device),
      pinned_((options_.pin_memory || options_.device.is_cuda()) && cuda::is_available()) {}

DataLoader::~DataLoader() = default;

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

DataLoader::Iterator DataLoader::begin() {
  run_.reset();  // stops and joins the workers of an epoch left early
  const uint64_t epoch = epoch_++;
  std::vector<int64_t> order = sampler_->indices(epoch);
  const int64_t n = dataset_->size();
  EMBER_CHECK(int64_t(order.size()) == sampler_->size(), "DataLoader: the sampler's size() is "
                                                             << sampler_->size() << " but indices(" << epoch
                                                             << ") returned " << order.size() << " indices");
  for (size_t i = 0; i < order.size(); ++i) {
    EMBER_CHECK(order[i] >= 0 && order[i] < n, "DataLoader: the sampler gave index "
                                                   << order[i] << " (position " << i << " of epoch " << epoch
                                                   << ") for a dataset of " << n << " examples");
  }
  std::vector<std::vector<int64_t>> batches;
  batches.reserve(size_t(size()));
  const size_t b = size_t(options_.batch_size);
  for (size_t start = 0; start < order.size(); start += b) {
    const size_t end = std::min(start + b, order.size());
    if (end - start < b && options_.drop_last) break;
    batches.emplace_back(order.begin() + std::ptrdiff_t(start), order.begin() + std::ptrdiff_t(end));
  }
  run_ = std::make_unique<detail::EpochRun>(dataset_, std::move(batches), epoch, options_.num_workers,
                                            options_.prefetch_factor, HostAllocator(pinned_), transfer_);
  run_->next();
  return Iterator(run_.get());
}

DataLoader::Iterator DataLoader::end() { return Iterator(); }

bool DataLoader::Iterator::at_end() const { return run_ == nullptr || run_->done(); }

Batch& DataLoader::Iterator::operator*() const {
  EMBER_CHECK(!at_end(), "DataLoader::Iterator: dereferenced at the end of the epoch");
  return run_->current();
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  EMBER_CHECK(!at_end(), "DataLoader::Iterator: incremented past the end of the epoch");
  run_->next();
  return *this;
}

}  // namespace ember::data
