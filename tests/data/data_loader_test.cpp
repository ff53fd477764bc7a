// DataLoader on the CPU: batch shapes and contents, drop_last, shuffling
// (reproducible per seed and epoch, a permutation every epoch), workers
// against the synchronous path, the bounded prefetch window, exceptions from
// workers, and that leaving an epoch early or destroying the loader
// mid-epoch returns promptly.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ember/core/cuda/device.h"
#include "ember/data/collate.h"
#include "ember/data/data_loader.h"
#include "ember/data/tensor_dataset.h"
#include "ember/ember.h"
#include "support/error_message.h"

namespace ember::data {
namespace {

using testing::throws_with;
using Clock = std::chrono::steady_clock;

// inputs (n, 2) float32 with row i = (i, -i); targets (n) int64 = i.
std::shared_ptr<TensorDataset> numbered(int64_t n) {
  std::vector<float> in;
  std::vector<int64_t> target;
  for (int64_t i = 0; i < n; ++i) {
    in.push_back(float(i));
    in.push_back(-float(i));
    target.push_back(i);
  }
  return std::make_shared<TensorDataset>(from_vector<float>(in, {n, 2}), from_vector<int64_t>(target, {n}));
}

// The targets of each batch of one epoch, checking each input row against
// its target on the way.
std::vector<std::vector<int64_t>> epoch_targets(DataLoader& loader) {
  std::vector<std::vector<int64_t>> out;
  for (Batch& batch : loader) {
    std::vector<int64_t> t = to_vector<int64_t>(batch.target);
    std::vector<float> in = to_vector<float>(batch.input);
    EXPECT_EQ(batch.input.shape(), (Shape{int64_t(t.size()), 2}));
    for (size_t k = 0; k < t.size(); ++k) {
      EXPECT_EQ(in[2 * k], float(t[k]));
      EXPECT_EQ(in[2 * k + 1], -float(t[k]));
    }
    out.push_back(std::move(t));
  }
  return out;
}

std::vector<int64_t> flat(const std::vector<std::vector<int64_t>>& batches) {
  std::vector<int64_t> out;
  for (const auto& b : batches) out.insert(out.end(), b.begin(), b.end());
  return out;
}

// Each of 0 .. n - 1 exactly once.
::testing::AssertionResult is_permutation_of_iota(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < int64_t(v.size()); ++i) {
    if (v[size_t(i)] != i) return ::testing::AssertionFailure() << "index " << i << " missing or repeated";
  }
  if (int64_t(v.size()) != n) return ::testing::AssertionFailure() << v.size() << " indices, expected " << n;
  return ::testing::AssertionSuccess();
}

// A dataset whose batches take `delay` each and count how many were made,
// and that throws when asked for example `bad`.
class Slow : public Dataset {
 public:
  Slow(int64_t n, std::chrono::milliseconds delay, int64_t bad = -1) : rows_(numbered(n)), delay_(delay), bad_(bad) {}
  int64_t size() const override { return rows_->size(); }
  Example get(int64_t i) const override { return rows_->get(i); }
  Batch get_batch(const std::vector<int64_t>& indices, const HostAllocator& alloc) const override {
    std::this_thread::sleep_for(delay_);
    for (int64_t i : indices) {
      if (i == bad_) throw std::runtime_error("cannot decode example " + std::to_string(i));
    }
    ++made;
    return rows_->get_batch(indices, alloc);
  }
  mutable std::atomic<int> made{0};

 private:
  std::shared_ptr<TensorDataset> rows_;
  std::chrono::milliseconds delay_;
  int64_t bad_;
};

TEST(DataLoader, SequentialBatchesAndTheLastPartialOne) {
  DataLoader loader(numbered(10), {.batch_size = 4});
  EXPECT_EQ(loader.size(), 3);
  auto batches = epoch_targets(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[0], (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batches[1], (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(batches[2], (std::vector<int64_t>{8, 9}));
}

TEST(DataLoader, DropLastDropsOnlyAPartialBatch) {
  DataLoader partial(numbered(10), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(partial.size(), 2);
  auto batches = epoch_targets(partial);
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[1], (std::vector<int64_t>{4, 5, 6, 7}));
  DataLoader exact(numbered(8), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(epoch_targets(exact).size(), 2u);
  DataLoader too_small(numbered(3), {.batch_size = 4, .drop_last = true});
  EXPECT_EQ(too_small.size(), 0);
  EXPECT_TRUE(epoch_targets(too_small).empty());
}

TEST(DataLoader, EmptyDatasetHasNoBatches) {
  DataLoader loader(numbered(0), {.batch_size = 4, .shuffle = true, .seed = 1});
  EXPECT_EQ(loader.size(), 0);
  EXPECT_TRUE(loader.begin() == loader.end());
}

TEST(DataLoader, ShuffleVisitsEveryIndexOncePerEpochAndEpochsDiffer) {
  DataLoader loader(numbered(50), {.batch_size = 8, .shuffle = true, .seed = 42});
  EXPECT_EQ(loader.epoch(), 0u);
  auto e0 = flat(epoch_targets(loader));
  EXPECT_EQ(loader.epoch(), 1u);
  auto e1 = flat(epoch_targets(loader));
  EXPECT_TRUE(is_permutation_of_iota(e0, 50));
  EXPECT_TRUE(is_permutation_of_iota(e1, 50));
  EXPECT_NE(e0, e1);
  std::vector<int64_t> sorted(50);
  for (int64_t i = 0; i < 50; ++i) sorted[size_t(i)] = i;
  EXPECT_NE(e0, sorted);
}

TEST(DataLoader, ShuffleIsReproduciblePerSeedAndEpoch) {
  DataLoader a(numbered(40), {.batch_size = 6, .shuffle = true, .seed = 7});
  DataLoader b(numbered(40), {.batch_size = 6, .shuffle = true, .seed = 7, .num_workers = 0});
  DataLoader other(numbered(40), {.batch_size = 6, .shuffle = true, .seed = 8});
  auto a0 = epoch_targets(a), a1 = epoch_targets(a);
  EXPECT_EQ(epoch_targets(b), a0);
  EXPECT_EQ(epoch_targets(b), a1);
  EXPECT_NE(flat(epoch_targets(other)), flat(a0));
  // set_epoch replays an epoch alone.
  DataLoader c(numbered(40), {.batch_size = 6, .shuffle = true, .seed = 7});
  c.set_epoch(1);
  EXPECT_EQ(epoch_targets(c), a1);
  c.set_epoch(0);
  EXPECT_EQ(epoch_targets(c), a0);
  EXPECT_EQ(c.epoch(), 1u);
}

TEST(DataLoader, UnseededShuffleFollowsManualSeed) {
  manual_seed(123);
  DataLoader a(numbered(30), {.batch_size = 30, .shuffle = true});
  manual_seed(123);
  DataLoader b(numbered(30), {.batch_size = 30, .shuffle = true});
  DataLoader c(numbered(30), {.batch_size = 30, .shuffle = true});  // the generator moved on
  auto a0 = epoch_targets(a);
  EXPECT_EQ(epoch_targets(b), a0);
  EXPECT_NE(epoch_targets(c), a0);
}

TEST(DataLoader, WorkersGiveTheSameBatchesInTheSameOrderAsNoWorkers) {
  for (int workers : {1, 2, 3}) {
    DataLoader sync(numbered(37), {.batch_size = 5, .shuffle = true, .seed = 3, .num_workers = 0});
    DataLoader async(numbered(37),
                     {.batch_size = 5, .shuffle = true, .seed = 3, .num_workers = workers, .prefetch_factor = 1});
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<Batch> s, w;
      for (Batch& b : sync) s.push_back(b);
      for (Batch& b : async) w.push_back(b);
      ASSERT_EQ(s.size(), w.size());
      for (size_t k = 0; k < s.size(); ++k) {
        EXPECT_TRUE(equal(s[k].input, w[k].input)) << "workers " << workers << " batch " << k;
        EXPECT_TRUE(equal(s[k].target, w[k].target)) << "workers " << workers << " batch " << k;
      }
    }
  }
}

TEST(DataLoader, GenericDatasetsAreStackedExampleByExample) {
  // A dataset with only get(): batches go through stack_examples.
  class Generic : public Dataset {
   public:
    int64_t size() const override { return 7; }
    Example get(int64_t i) const override {
      return {from_vector<float>({float(i), -float(i)}), full({}, i, DType::Int64)};
    }
  };
  DataLoader loader(std::make_shared<Generic>(), {.batch_size = 3});
  auto batches = epoch_targets(loader);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_EQ(batches[2], (std::vector<int64_t>{6}));
}

TEST(DataLoader, PrefetchIsBoundedByWorkersTimesPrefetchFactor) {
  auto slow = std::make_shared<Slow>(100, std::chrono::milliseconds(0));
  DataLoader loader(slow, {.batch_size = 1, .num_workers = 2, .prefetch_factor = 2});
  auto it = loader.begin();  // consumes batch 0: batches 1 .. 4 may be in flight
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (slow->made < 5 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(slow->made, 5);
  ++it;  // consumes batch 1: one more may be made
  while (slow->made < 6 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(slow->made, 6);
  EXPECT_EQ(it->target.item<int64_t>(), 1);
}

TEST(DataLoader, WorkerExceptionIsRethrownWithTheBatch) {
  for (int workers : {0, 2}) {
    DataLoader loader(std::make_shared<Slow>(20, std::chrono::milliseconds(0), 13),
                      {.batch_size = 4, .num_workers = workers});
    std::vector<int64_t> seen;
    auto consume = [&] {
      for (Batch& b : loader) seen.push_back(b.target.select(0, 0).item<int64_t>());
    };
    EXPECT_TRUE(
        throws_with(consume, {"DataLoader: batch 3 of epoch 0", "dataset indices [12, 13, 14, 15]",
                              workers == 0 ? "the consumer's thread" : "failed in worker", "cannot decode example 13"}))
        << "num_workers " << workers;
    EXPECT_EQ(seen, (std::vector<int64_t>{0, 4, 8}));  // the batches before it arrived
    // The next epoch starts afresh (and fails at the same batch).
    EXPECT_TRUE(throws_with(consume, {"batch 3 of epoch 1"}));
  }
}

TEST(DataLoader, ExceptionOnTheFirstBatchComesFromBegin) {
  DataLoader loader(std::make_shared<Slow>(8, std::chrono::milliseconds(0), 0), {.batch_size = 4});
  EXPECT_TRUE(throws_with([&] { loader.begin(); }, {"batch 0 of epoch 0", "[0, 1, 2, 3]", "cannot decode example 0"}));
}

TEST(DataLoader, NonStdExceptionsAreReportedToo) {
  class Throws : public Dataset {
   public:
    int64_t size() const override { return 4; }
    Example get(int64_t) const override { throw 42; }
  };
  DataLoader loader(std::make_shared<Throws>(), {.batch_size = 2});
  EXPECT_TRUE(throws_with([&] { loader.begin(); }, {"batch 0", "not a std::exception"}));
}

TEST(DataLoader, BreakingOutAndStartingAgainDoesNotHang) {
  auto slow = std::make_shared<Slow>(1000, std::chrono::milliseconds(2));
  DataLoader loader(slow, {.batch_size = 1, .num_workers = 2});
  const auto start = Clock::now();
  for (int epoch = 0; epoch < 3; ++epoch) {
    int64_t taken = 0;
    for (Batch& b : loader) {
      EXPECT_EQ(b.target.item<int64_t>(), taken);
      if (++taken == 3) break;
    }
  }
  // 3 epochs of 3 batches of 2 ms, not 3000 batches.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
}

TEST(DataLoader, DestroyedMidEpochReturnsPromptly) {
  for (int workers : {1, 4}) {
    auto slow = std::make_shared<Slow>(1000, std::chrono::milliseconds(20));
    auto loader = std::make_unique<DataLoader>(slow, DataLoaderOptions{.batch_size = 1, .num_workers = workers});
    auto it = loader->begin();
    ++it;
    const auto start = Clock::now();
    loader.reset();  // workers finish the batch they are on (20 ms) and exit
    EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(1000)) << "num_workers " << workers;
    EXPECT_LE(slow->made, 2 + 2 * workers);  // nothing claimed after the stop
  }
}

TEST(DataLoader, DestroyedBeforeIteratingOrAfterAnEpoch) {
  { DataLoader unused(numbered(10), {.batch_size = 2, .num_workers = 3}); }
  DataLoader loader(numbered(10), {.batch_size = 2, .num_workers = 3});
  EXPECT_EQ(epoch_targets(loader).size(), 5u);
}

TEST(DataLoader, CustomSampler) {
  class Evens : public Sampler {
   public:
    int64_t size() const override { return 3; }
    std::vector<int64_t> indices(uint64_t epoch) const override { return {int64_t(epoch % 2) * 4, 2, 0}; }
  };
  DataLoader loader(numbered(10), {.batch_size = 2, .sampler = std::make_shared<Evens>()});
  auto e0 = epoch_targets(loader), e1 = epoch_targets(loader);
  EXPECT_EQ(e0, (std::vector<std::vector<int64_t>>{{0, 2}, {0}}));
  EXPECT_EQ(e1, (std::vector<std::vector<int64_t>>{{4, 2}, {0}}));
}

TEST(DataLoader, BadSamplersAreErrors) {
  class OutOfRange : public Sampler {
   public:
    int64_t size() const override { return 2; }
    std::vector<int64_t> indices(uint64_t) const override { return {1, 10}; }
  };
  class WrongSize : public Sampler {
   public:
    int64_t size() const override { return 3; }
    std::vector<int64_t> indices(uint64_t) const override { return {1}; }
  };
  DataLoader a(numbered(10), {.sampler = std::make_shared<OutOfRange>()});
  EXPECT_TRUE(throws_with([&] { a.begin(); }, {"sampler gave index 10", "position 1", "10 examples"}));
  DataLoader b(numbered(10), {.sampler = std::make_shared<WrongSize>()});
  EXPECT_TRUE(throws_with([&] { b.begin(); }, {"size() is 3", "returned 1 indices"}));
}

TEST(DataLoader, OptionErrors) {
  auto ds = numbered(4);
  EXPECT_TRUE(throws_with([&] { DataLoader(ds, {.batch_size = 0}); }, {"batch_size", "at least 1", "got 0"}));
  EXPECT_TRUE(throws_with([&] { DataLoader(ds, {.num_workers = -1}); }, {"num_workers", "got -1"}));
  EXPECT_TRUE(throws_with([&] { DataLoader(ds, {.prefetch_factor = 0}); }, {"prefetch_factor", "got 0"}));
  EXPECT_TRUE(throws_with([&] { DataLoader(ds, {.shuffle = true, .sampler = std::make_shared<SequentialSampler>(4)}); },
                          {"mutually exclusive with shuffle"}));
  EXPECT_TRUE(throws_with([&] { DataLoader(nullptr); }, {"DataLoader", "dataset is null"}));
  DataLoader loader(ds);
  auto it = loader.end();
  EXPECT_TRUE(throws_with([&] { *it; }, {"dereferenced at the end"}));
  EXPECT_TRUE(throws_with([&] { ++it; }, {"incremented past the end"}));
}

TEST(DataLoader, CudaDeviceWithoutAGpuIsAnError) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible";
  EXPECT_TRUE(throws_with([] { DataLoader(numbered(4), {.device = cuda_device(0)}); },
                          {"DataLoader: cannot deliver batches on cuda:0"}));
}

TEST(DataLoader, PinMemoryWithoutAGpuIsIgnored) {
  if (cuda::is_available()) GTEST_SKIP() << "a CUDA device is visible: pinning happens";
  DataLoader loader(numbered(6), {.batch_size = 4, .pin_memory = true});
  auto batches = epoch_targets(loader);
  EXPECT_EQ(batches.size(), 2u);
}

TEST(Sampler, SequentialAndRandom) {
  EXPECT_EQ(SequentialSampler(4).indices(9), (std::vector<int64_t>{0, 1, 2, 3}));
  RandomSampler r(100, 5);
  EXPECT_EQ(r.indices(3), r.indices(3));
  EXPECT_NE(r.indices(3), r.indices(4));
  EXPECT_TRUE(is_permutation_of_iota(r.indices(0), 100));
  EXPECT_TRUE(RandomSampler(0, 5).indices(0).empty());
  EXPECT_TRUE(throws_with([] { RandomSampler(-1, 5); }, {"RandomSampler", "got -1"}));
  EXPECT_TRUE(throws_with([] { SequentialSampler(-2); }, {"SequentialSampler", "got -2"}));
}

}  // namespace
}  // namespace ember::data
