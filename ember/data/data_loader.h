// DataLoader: batches of a Dataset, shuffled reproducibly, collated by worker
// threads ahead of the consumer, optionally pinned and copied to a GPU.
//
//   auto train = std::make_shared<data::FashionMNIST>();
//   data::DataLoader loader(train, {.batch_size = 64, .shuffle = true, .seed = 1, .device = cuda_device(0)});
//   for (int epoch = 0; epoch < 10; ++epoch)
//     for (data::Batch& batch : loader) step(batch.input, batch.target);
//
// Contract:
// - Each begin() runs one epoch: the sampler's indices for epoch() are cut
//   into batches of batch_size in order (the last one smaller unless
//   drop_last drops it), and epoch() then advances by one. set_epoch(e)
//   chooses the epoch the next begin() runs. With shuffle, the order is
//   RandomSampler(seed): the same seed and epoch give the same batches; each
//   epoch has its own permutation. Without a seed, one is drawn from
//   default_generator(kCPU) when the loader is made, so ember::manual_seed
//   makes the run reproducible.
// - num_workers threads collate batches ahead of the consumer, at most
//   num_workers * prefetch_factor batches in flight; the consumer still gets
//   them in order, the same batches as with num_workers = 0 (which collates
//   on the consumer's thread when it asks for the next batch).
// - An exception thrown while making batch k (by the dataset, say) is
//   rethrown to the consumer when it reaches batch k, as an ember::Error
//   naming the batch, the epoch, the first dataset indices and the original
//   message; that ends the epoch.
// - Leaving the loop early (break, an exception) is safe: the next begin()
//   or the loader's destructor stops the workers (a stop flag and condition
//   variables; a worker finishes the batch it is collating, then exits) and
//   joins them. An iterator is invalidated by the next begin() and by the
//   loader's destruction.
// - pin_memory collates into pinned host memory (ember/core/cuda/pinned_memory.h)
//   when a CUDA device is visible; in an ember built without CUDA, or with no
//   GPU visible, it silently does nothing, as there is nothing to pin for.
// - device: a CUDA device makes every batch arrive there. Batches are then
//   always collated into pinned memory (an asynchronous copy needs it), and
//   copied on a side stream while the consumer works on the previous batch;
//   the consumer's current stream waits for the copy on the GPU (see
//   ember/data/device_transfer.h). A CUDA device in a build without CUDA, or one
//   that is not visible, is an ember::Error when the loader is made.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>

#include "ember/core/device.h"
#include "ember/data/dataset.h"
#include "ember/data/device_transfer.h"
#include "ember/data/sampler.h"

namespace ember::data {

namespace detail {
class EpochRun;
}

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  std::optional<uint64_t> seed;  // the shuffle seed; unset: drawn from default_generator(kCPU)
  bool drop_last = false;
  int num_workers = 2;      // 0: collate on the consumer's thread
  int prefetch_factor = 2;  // batches in flight per worker
  bool pin_memory = false;
  Device device = kCPU;
  // Replaces the sequential / random sampler that shuffle picks; shuffle
  // must then be false.
  std::shared_ptr<const Sampler> sampler;
};

class DataLoader {
 public:
  class Iterator;

  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options = {});
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Batches per epoch.
  int64_t size() const;
  // The epoch the next begin() runs.
  uint64_t epoch() const { return epoch_; }
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  const DataLoaderOptions& options() const { return options_; }
  const Sampler& sampler() const { return *sampler_; }
  const Dataset& dataset() const { return *dataset_; }

  // Starts an epoch (stopping one still running) and returns its first batch.
  Iterator begin();
  Iterator end();

 private:
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<const Sampler> sampler_;
  BatchTransfer transfer_;
  bool pinned_;
  uint64_t epoch_ = 0;
  std::unique_ptr<detail::EpochRun> run_;
};

// An input iterator over the batches of one epoch. All iterators of an epoch
// share its position; end() compares equal to any iterator whose epoch is
// over.
class DataLoader::Iterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = Batch;
  using difference_type = std::ptrdiff_t;
  using pointer = Batch*;
  using reference = Batch&;

  Iterator() = default;
  Batch& operator*() const;
  Batch* operator->() const { return &**this; }
  // Waits for the next batch; rethrows a failure to make it.
  Iterator& operator++();
  void operator++(int) { ++*this; }
  bool operator==(const Iterator& other) const { return at_end() == other.at_end(); }

 private:
  friend class DataLoader;
  explicit Iterator(detail::EpochRun* run) : run_(run) {}
  bool at_end() const;

  detail::EpochRun* run_ = nullptr;
};

}  // namespace ember::data
