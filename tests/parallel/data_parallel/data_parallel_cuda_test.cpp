// DataParallel on GPUs: with device_ids {0} (one H200), and over every
// visible GPU when there are several, against the plain module on the CPU.
// Skipped without a CUDA device.
#include <gtest/gtest.h>

#include "ember/core/cuda/device.h"
#include "ember/ember.h"
#include "ember/parallel/data_parallel/data_parallel.h"
#include "ember/parallel/data_parallel/scatter_gather.h"
#include "ember/parallel/data_parallel/warn_once.h"
#include "examples/train/models.h"
#include "support/cuda_compare.h"

namespace ember::parallel {
namespace {

constexpr testing::Tolerance kTol{1e-4, 1e-5};

Tensor images(int64_t n, uint64_t seed) {
  Generator g(seed);
  return randn({n, 1, 28, 28}, kDefaultFloat, kCPU, &g);
}

Tensor labels(int64_t n, uint64_t seed) {
  Generator g(seed);
  return randint(0, 10, {n}, DType::Int64, kCPU, &g);
}

// DataParallel over `ids` against the CPU module: outputs gathered on
// `output`, gradients on cuda:ids[0], two SGD steps.
void expect_matches_cpu(const std::shared_ptr<nn::Sequential>& cpu, const std::vector<int>& ids, Device output,
                        ReplicationMode mode) {
  auto gpu = nn::clone(cpu);
  gpu->to(cuda_device(ids[0]));
  DataParallelOptions o;
  o.output_device = output;
  o.mode = mode;
  auto dp = std::make_shared<DataParallel>(gpu, ids, o);
  optim::SGD opt_cpu(cpu->parameters(), {.lr = 0.05, .momentum = 0.9});
  optim::SGD opt_gpu(dp->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (uint64_t step = 0; step < 2; ++step) {
    const int64_t n = int64_t(4 * ids.size());
    Tensor x = images(n, 60 + step), y = labels(n, 70 + step);
    // In training mode BatchNorm normalizes each device's piece on its own:
    // the CPU reference runs piece by piece too.
    const std::vector<int64_t> sizes = chunk_sizes_for(n, ids.size());
    TensorList outs;
    int64_t offset = 0;
    for (int64_t s : sizes) {
      outs.push_back(cpu->forward(x.narrow(0, offset, s)));
      offset += s;
    }
    Tensor out_cpu = cat(outs, 0);
    Tensor out_gpu = dp->forward(x);  // a CPU batch: scatter copies each piece to its GPU
    EXPECT_EQ(out_gpu.device(), output);
    EXPECT_TRUE(testing::tensors_close(out_gpu.cpu(), out_cpu, kTol));
    opt_cpu.zero_grad();
    opt_gpu.zero_grad();
    nn::functional::cross_entropy(out_cpu, y).backward();
    nn::functional::cross_entropy(out_gpu, y.to(output)).backward();
    auto want = cpu->named_parameters();
    for (const auto& item : gpu->named_parameters()) {
      ASSERT_TRUE(item.value.grad().defined()) << item.key;
      EXPECT_EQ(item.value.grad().device(), cuda_device(ids[0]));
      EXPECT_TRUE(testing::tensors_close(item.value.grad().cpu(), want.at(item.key).grad(), kTol)) << item.key;
    }
    opt_cpu.step();
    opt_gpu.step();
  }
}

TEST(CudaDataParallel, OneGpuMlpAndCnn) {
  EMBER_REQUIRE_CUDA();
  for (ReplicationMode mode : {ReplicationMode::Classic, ReplicationMode::Fast}) {
    manual_seed(1);
    expect_matches_cpu(train::make_mlp({64, 32}, 0), {0}, cuda_device(0), mode);
    manual_seed(2);
    expect_matches_cpu(train::make_cnn(0), {0}, cuda_device(0), mode);
  }
}

TEST(CudaDataParallel, OneGpuGathersOnTheCpu) {
  EMBER_REQUIRE_CUDA();
  manual_seed(3);
  expect_matches_cpu(train::make_mlp({64, 32}, 0), {0}, kCPU, ReplicationMode::Classic);
}

TEST(CudaDataParallel, EveryVisibleGpu) {
  EMBER_REQUIRE_CUDA();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  WarningCapture warnings;  // GPUs of one host may still differ
  std::vector<int> ids;
  for (int i = 0; i < cuda::device_count(); ++i) ids.push_back(i);
  for (ReplicationMode mode : {ReplicationMode::Classic, ReplicationMode::Fast}) {
    manual_seed(4);
    expect_matches_cpu(train::make_mlp({64, 32}, 0), ids, cuda_device(0), mode);
    manual_seed(5);
    expect_matches_cpu(train::make_cnn(0), ids, cuda_device(0), mode);
  }
}

TEST(CudaDataParallel, ModuleOnAnotherGpuIsAnError) {
  EMBER_REQUIRE_CUDA();
  if (cuda::device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  auto net = train::make_mlp({8}, 0);
  net->to(cuda_device(1));
  auto dp = std::make_shared<DataParallel>(net, std::vector<int>{0, 1});
  EXPECT_THROW(
      {
        try {
          dp->forward(images(4, 1));
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("but found one of them on device: cuda:1"), std::string::npos)
              << e.what();
          throw;
        }
      },
      Error);
}

}  // namespace
}  // namespace ember::parallel
