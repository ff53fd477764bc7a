// Device discovery, selection and the errors for bad ids or no GPU.
//
// tests/CMakeLists.txt globs this file into CPU-only builds too, where the
// CUDA runtime is not compiled; hence the guard.
#ifdef EMBER_WITH_CUDA

#include "ember/core/cuda/device.h"

#include <gtest/gtest.h>

#include <string>

#include "ember/core/error.h"
#include "ember/core/storage.h"

namespace ember::cuda {
namespace {

// The one test that means something on a machine without a GPU.
TEST(CudaDevice, WithoutGpuQueriesAnswerAndAllocationFailsClearly) {
  int count = -1;
  EXPECT_NO_THROW(count = device_count());
  EXPECT_EQ(is_available(), count > 0);
  if (is_available()) GTEST_SKIP() << "this machine has a CUDA device";
  EXPECT_EQ(count, 0);
  try {
    Storage storage(1024, cuda_device(0));
    FAIL() << "allocating on cuda:0 without a GPU did not throw";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("no CUDA device is visible"), std::string::npos) << what;
    EXPECT_NE(what.find("CUDA_VISIBLE_DEVICES=" + visible_devices_env()), std::string::npos) << what;
  }
  EXPECT_THROW(current_device(), Error);
}

TEST(CudaDevice, InvalidIdNamesTheVisibleRange) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const int n = device_count();
  try {
    set_device(n);
    FAIL() << "set_device(" << n << ") did not throw";
  } catch (const Error& e) {
    // "Invalid device id 1: 1 CUDA device is visible (CUDA_VISIBLE_DEVICES is
    // unset, so logical ids 0 are physical GPUs 0); use id 0"
    const std::string what = e.what();
    const std::string count =
        std::to_string(n) + (n == 1 ? " CUDA device is visible (" : " CUDA devices are visible (");
    const std::string use = n == 1 ? "); use id 0" : "); use ids in [0, " + std::to_string(n - 1) + "]";
    EXPECT_NE(what.find("Invalid device id " + std::to_string(n) + ": " + count), std::string::npos) << what;
    EXPECT_NE(what.find("CUDA_VISIBLE_DEVICES"), std::string::npos) << what;
    EXPECT_NE(what.find(use), std::string::npos) << what;
  }
  EXPECT_THROW(DeviceGuard guard(-2), Error);
  EXPECT_THROW(Storage(16, cuda_device(n)), Error);
}

TEST(CudaDevice, DeviceGuardRestoresTheCurrentDevice) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const int before = current_device();
  const int other = device_count() - 1;
  {
    DeviceGuard guard(other);
    EXPECT_EQ(current_device(), other);
  }
  EXPECT_EQ(current_device(), before);
  try {
    DeviceGuard guard(other);
    throw Error("leaving the scope by an exception");
  } catch (const Error&) {
  }
  EXPECT_EQ(current_device(), before);
}

TEST(CudaDevice, PropertiesDescribeTheGpu) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const DeviceProperties& p = properties(0);
  EXPECT_FALSE(p.name.empty());
  EXPECT_GT(p.total_memory, size_t(1) << 30);
  EXPECT_GT(p.multiprocessor_count, 0);
  EXPECT_GE(p.major, 5);
  EXPECT_GT(p.l2_cache_size, 0);
  EXPECT_GE(p.shared_memory_per_block_optin, size_t(48) << 10);
  EXPECT_EQ(&properties(0), &properties(0)) << "properties are read once and cached";
  EXPECT_NO_THROW(synchronize());
  EXPECT_NO_THROW(synchronize(0));
}

}  // namespace
}  // namespace ember::cuda

#endif  // EMBER_WITH_CUDA
