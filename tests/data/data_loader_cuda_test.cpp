// DataLoader with a CUDA device: batches arrive on cuda:0 with the values
// the CPU loader gives, from pinned host memory; the consumer's stream waits
// for each copy; and a batch's device memory is not reused by the next
// batch's copy while the consumer's queued work still reads it
// (record_stream).
//
// tests/CMakeLists.txt globs this file into CPU-only builds too, where the
// CUDA runtime is not compiled; hence the guard.
#ifdef EMBER_WITH_CUDA

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "ember/core/cuda/busy_wait.h"
#include "ember/core/cuda/pinned_memory.h"
#include "ember/core/cuda/stream.h"
#include "ember/data/data_loader.h"
#include "ember/data/tensor_dataset.h"
#include "ember/ember.h"
#include "support/cuda_compare.h"

namespace ember::data {
namespace {

constexpr int64_t kMillisecond = 1'000'000;  // in nanoseconds

// 96 random (3, 17) float32 inputs and int64 targets 0 .. 95.
std::shared_ptr<TensorDataset> random_rows() {
  Generator gen(11);
  return std::make_shared<TensorDataset>(randn({96, 3, 17}, DType::Float32, kCPU, &gen),
                                         arange(0, 96, 1, DType::Int64));
}

TEST(DataLoaderCuda, BatchesArriveOnTheGpuWithTheCpuValues) {
  EMBER_REQUIRE_CUDA();
  auto ds = random_rows();
  for (int workers : {0, 2}) {
    DataLoader cpu(ds, {.batch_size = 10, .shuffle = true, .seed = 4, .num_workers = workers});
    DataLoader gpu(ds,
                   {.batch_size = 10, .shuffle = true, .seed = 4, .num_workers = workers, .device = cuda_device(0)});
    for (int epoch = 0; epoch < 2; ++epoch) {
      std::vector<Batch> expected;
      for (Batch& b : cpu) expected.push_back(b);
      size_t k = 0;
      for (Batch& b : gpu) {
        ASSERT_LT(k, expected.size());
        EXPECT_EQ(b.input.device(), cuda_device(0));
        EXPECT_EQ(b.target.device(), cuda_device(0));
        EXPECT_EQ(b.target.dtype(), DType::Int64);
        EXPECT_TRUE(equal(b.input.cpu(), expected[k].input)) << "workers " << workers << " batch " << k;
        EXPECT_TRUE(equal(b.target.cpu(), expected[k].target)) << "workers " << workers << " batch " << k;
        ++k;
      }
      EXPECT_EQ(k, expected.size());
    }
  }
}

TEST(DataLoaderCuda, PinMemoryCollatesIntoPinnedHostMemory) {
  EMBER_REQUIRE_CUDA();
  DataLoader pinned(random_rows(), {.batch_size = 8, .pin_memory = true});
  DataLoader plain(random_rows(), {.batch_size = 8});
  for (Batch& b : pinned) {
    EXPECT_TRUE(b.input.device().is_cpu());
    EXPECT_TRUE(cuda::is_pinned(b.input.data_ptr()));
    EXPECT_TRUE(cuda::is_pinned(b.target.data_ptr()));
  }
  for (Batch& b : plain) EXPECT_FALSE(cuda::is_pinned(b.input.data_ptr()));
}

TEST(DataLoaderCuda, ConsumerStreamWaitsAndMemoryOutlivesItsWork) {
  EMBER_REQUIRE_CUDA();
  auto ds = random_rows();
  // The consumer works on a side stream that is kept busy before each use
  // of a batch: if the batch's memory went back to the copy stream's pool
  // when the host dropped it, the next batch's copy would overwrite it
  // before the delayed kernel read it. Poisoned allocations make a read
  // before the copy visible as NaN.
  set_allocation_poisoning(true);
  std::vector<Tensor> doubled;
  {
    cuda::StreamGuard consumer(cuda::stream_from_pool(0));
    for (int workers : {0, 2}) {
      DataLoader gpu(ds, {.batch_size = 8, .num_workers = workers, .device = cuda_device(0)});
      for (Batch& b : gpu) {
        cuda::busy_wait(cuda::current_stream(0), 2 * kMillisecond);
        doubled.push_back(b.input * 2.0);
      }
    }
    cuda::current_stream(0).synchronize();
  }
  set_allocation_poisoning(false);
  DataLoader cpu(ds, {.batch_size = 8, .num_workers = 0});
  std::vector<Tensor> expected;
  for (Batch& b : cpu) expected.push_back(b.input * 2.0);
  ASSERT_EQ(doubled.size(), 2 * expected.size());
  for (size_t k = 0; k < doubled.size(); ++k) {
    EXPECT_TRUE(equal(doubled[k].cpu(), expected[k % expected.size()])) << "batch " << k;
  }
}

}  // namespace
}  // namespace ember::data

#endif  // EMBER_WITH_CUDA
