// The CUDA cross-device copy kernel and pinned host memory.
//
// tests/CMakeLists.txt globs this file into CPU-only builds too, where the
// CUDA runtime is not compiled; hence the guard.
#ifdef EMBER_WITH_CUDA

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <vector>

#include "ember/core/allocator.h"
#include "ember/core/cuda/busy_wait.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/pinned_memory.h"
#include "ember/core/cuda/stream.h"
#include "ember/core/ops/elementwise_kernels.h"
#include "ember/core/tensor.h"

namespace ember::cuda {
namespace {

constexpr size_t kCount = 1 << 20;
constexpr size_t kBytes = kCount * sizeof(float);

void copy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  cross_device_copy_stub(DeviceType::CUDA)(dst, dst_device, src, src_device, nbytes);
}

DataPtr device_buffer(int device, size_t nbytes) {
  return allocator_for(DeviceType::CUDA).allocate(nbytes, cuda_device(device));
}

std::vector<float> ramp(float start) {
  std::vector<float> v(kCount);
  std::iota(v.begin(), v.end(), start);
  return v;
}

TEST(CudaCrossDeviceCopy, PageableRoundTrip) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<float> host = ramp(1.0f);
  DataPtr gpu = device_buffer(0, kBytes);
  copy(gpu.get(), cuda_device(0), host.data(), kCPU, kBytes);
  std::vector<float> back(kCount, -1.0f);
  copy(back.data(), kCPU, gpu.get(), cuda_device(0), kBytes);  // synchronous: readable at once
  EXPECT_EQ(back, host);
}

TEST(CudaCrossDeviceCopy, SameDeviceCopy) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const std::vector<float> host = ramp(7.0f);
  DataPtr a = device_buffer(0, kBytes), b = device_buffer(0, kBytes);
  copy(a.get(), cuda_device(0), host.data(), kCPU, kBytes);
  copy(b.get(), cuda_device(0), a.get(), cuda_device(0), kBytes);
  std::vector<float> back(kCount);
  copy(back.data(), kCPU, b.get(), cuda_device(0), kBytes);
  EXPECT_EQ(back, host);
}

TEST(CudaCrossDeviceCopy, PeerCopy) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  if (device_count() < 2) GTEST_SKIP() << "needs two CUDA devices";
  const std::vector<float> host = ramp(3.0f);
  DataPtr on0 = device_buffer(0, kBytes), on1 = device_buffer(1, kBytes);
  copy(on0.get(), cuda_device(0), host.data(), kCPU, kBytes);
  copy(on1.get(), cuda_device(1), on0.get(), cuda_device(0), kBytes);
  std::vector<float> back(kCount);
  copy(back.data(), kCPU, on1.get(), cuda_device(1), kBytes);
  EXPECT_EQ(back, host);
}

TEST(CudaPinnedMemory, PinnedTensorRoundTrip) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  Tensor pinned = pinned_empty({int64_t(kCount)}, DType::Float32);
  EXPECT_TRUE(pinned.device().is_cpu());
  EXPECT_TRUE(is_pinned(pinned.data_ptr()));
  EXPECT_TRUE(is_pinned(pinned.data<float>() + 100)) << "a pointer into the block is pinned too";
  const std::vector<float> host = ramp(-5.0f);
  EXPECT_FALSE(is_pinned(host.data()));
  std::memcpy(pinned.data_ptr(), host.data(), kBytes);

  DataPtr gpu = device_buffer(0, kBytes);
  copy(gpu.get(), cuda_device(0), pinned.data_ptr(), kCPU, kBytes);  // asynchronous
  std::vector<float> back(kCount);
  copy(back.data(), kCPU, gpu.get(), cuda_device(0), kBytes);  // same stream, so after it
  EXPECT_EQ(back, host);
}

TEST(CudaPinnedMemory, BlockIsNotReusedBeforeItsCopyIsDone) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  DataPtr gpu = device_buffer(0, kBytes);
  Tensor first = pinned_empty({int64_t(kCount)}, DType::Float32);
  void* const first_block = first.data_ptr();
  busy_wait(current_stream(0), 300 * 1'000'000);  // the copy queues behind this
  copy(gpu.get(), cuda_device(0), first_block, kCPU, kBytes);
  first = Tensor();  // dropped while the copy is still queued
  Tensor second = pinned_empty({int64_t(kCount)}, DType::Float32);
  EXPECT_NE(second.data_ptr(), first_block) << "a pinned block was reused before its copy ran";
  synchronize(0);
  second = Tensor();
  Tensor third = pinned_empty({int64_t(kCount)}, DType::Float32);
  EXPECT_EQ(third.data_ptr(), first_block) << "the block did not come back once its copy was done";
}

}  // namespace
}  // namespace ember::cuda

#endif  // EMBER_WITH_CUDA
