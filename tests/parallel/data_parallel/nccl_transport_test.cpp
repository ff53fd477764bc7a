// DataParallel's NCCL transport (ember/parallel/data_parallel/nccl_transport.h).
// - CUDA build, with or without a GPU: a CPU device or a GPU listed twice is
//   an error before NCCL is touched.
// - One GPU or more (a clique over every visible GPU): broadcast and
//   reduce_sum against the values computed on the CPU, into poisoned
//   outputs, with and without the root's own tensor, and the copy path for
//   what NCCL does not take (bool, non-contiguous, a subset of the devices).
// DataParallel's fast mode over several GPUs, which uses it by default, is
// tested in data_parallel_cuda_test.cpp (EveryVisibleGpu).
// tests/CMakeLists.txt globs this file into CPU-only builds too; hence the guard.
#ifdef EMBER_WITH_CUDA

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ember/ember.h"
#include "ember/parallel/data_parallel/nccl_transport.h"
#include "support/cuda_compare.h"
#include "support/error_message.h"

namespace ember::parallel {
namespace {

std::vector<Device> visible_gpus() {
  std::vector<Device> out;
  for (int i = 0; i < cuda::device_count(); ++i) out.push_back(cuda_device(i));
  return out;
}

Tensor values(int64_t n, uint64_t seed, DType dtype = DType::Float32) {
  Generator g(seed);
  return randn({n}, DType::Float32, kCPU, &g).to(dtype);
}

// Values no output of these tests holds: NaN, -7777, or true for bool
// (a half-written bool output fails on its false elements).
Tensor poisoned(int64_t n, DType dtype, Device d) {
  if (dtype == DType::Bool) return ones({n}, dtype, d);
  return full({n}, is_floating(dtype) ? std::nan("") : -7777.0, dtype, d);
}

TEST(NcclTransport, DevicesThatAreNotDistinctGpusAreAnError) {
  EXPECT_TRUE(testing::throws_with([] { nccl_transport({kCPU}); }, {"nccl_transport", "cpu", "copy_transport"}));
  EXPECT_TRUE(testing::throws_with(
      [] {
        nccl_transport({cuda_device(0), cuda_device(0)});
      },
      {"nccl_transport", "cuda:0", "twice"}));
  EXPECT_TRUE(testing::throws_with([] { nccl_transport({}); }, {"nccl_transport", "no devices"}));
}

TEST(NcclTransport, BroadcastMatchesTheSource) {
  if (!testing::cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  const std::vector<Device> gpus = visible_gpus();
  auto transport = nccl_transport(gpus);
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64, DType::Int64, DType::Bool}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Tensor cpu = dtype == DType::Bool ? gt(values(70001, 1), 0.0) : values(70001, 1, dtype);
    const Tensor source = cpu.to(gpus[0]);
    // Every device, the root's own copy included, then (as DataParallel's
    // fast mode does) every device but the root.
    for (size_t first : {size_t(0), size_t(1)}) {
      if (first >= gpus.size()) continue;
      TensorList outs;
      for (size_t k = first; k < gpus.size(); ++k) {
        outs.push_back(poisoned(70001, dtype, gpus[k]));
      }
      transport->broadcast(source, outs);
      for (const Tensor& out : outs) EXPECT_TRUE(testing::tensors_close(out, cpu, {0, 0})) << out.device();
    }
  }
  // Strided destinations take the copy path and are still right.
  Tensor wide = poisoned(2 * 1001, DType::Float32, gpus[0]);
  Tensor strided = wide.view({1001, 2}).select(1, 0);
  transport->broadcast(values(1001, 2).to(gpus[0]), {strided});
  EXPECT_TRUE(testing::tensors_close(strided, values(1001, 2), {0, 0}));
  transport->broadcast(values(5, 3).to(gpus[0]), {});  // the root alone: nothing to write
}

TEST(NcclTransport, ReduceSumMatchesTheCpuSum) {
  if (!testing::cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  const std::vector<Device> gpus = visible_gpus();
  auto transport = nccl_transport(gpus);
  for (DType dtype : {DType::Float32, DType::Float64, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    for (size_t first : {size_t(0), size_t(1)}) {  // with the root's own source, and without (fast mode)
      if (first >= gpus.size()) continue;
      TensorList sources;
      Tensor expected = zeros({65537}, DType::Float64);
      for (size_t k = first; k < gpus.size(); ++k) {
        Tensor v = values(65537, 10 + k, dtype);
        expected = expected + v.to(DType::Float64);
        sources.push_back(v.to(gpus[k]));
      }
      const Tensor sum = transport->reduce_sum(sources, gpus[0]);
      EXPECT_EQ(sum.device(), gpus[0]);
      EXPECT_TRUE(testing::tensors_close(sum.to(DType::Float64), expected, testing::tolerance_for(dtype)));
    }
  }
  // A source that records autograd takes the differentiable copy path.
  Tensor leaf = values(7, 4).to(gpus[0]).set_requires_grad();
  Tensor sum = transport->reduce_sum({leaf}, gpus[0]);
  sum.sum().backward();
  EXPECT_TRUE(testing::tensors_close(leaf.grad(), ones({7}), {0, 0}));
}

}  // namespace
}  // namespace ember::parallel

#endif  // EMBER_WITH_CUDA
