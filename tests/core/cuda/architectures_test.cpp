// ember/core/cuda/architectures.h: reading a CMAKE_CUDA_ARCHITECTURES list, which
// GPUs it covers, the no-kernel-image message; and on a GPU, that the first
// allocation agrees with the build's list (passes where the list covers the
// GPU, fails with the message where it does not: run the suite of a build for
// another architecture, e.g. -DCMAKE_CUDA_ARCHITECTURES=80-real on an H100,
// with --gtest_filter='CudaArchitectures.*').
#include "ember/core/cuda/architectures.h"

#include <gtest/gtest.h>

#include "ember/core/cuda/device.h"
#include "ember/core/ops.h"
#include "ember/core/tensor.h"
#include "support/error_message.h"

namespace ember::cuda {
namespace {

using ember::testing::throws_with;

TEST(CudaArchitectures, DescribesEachKindOfEntry) {
  EXPECT_EQ(describe_architectures("75-real;80-real;86-real;89-real;90"),
            "sm_75, sm_80, sm_86, sm_89 and sm_90 + PTX compute_90");
  EXPECT_EQ(describe_architectures("80-virtual"), "PTX compute_80");
  EXPECT_EQ(describe_architectures("90a-real"), "sm_90a");
  EXPECT_EQ(describe_architectures("native"), "native (the GPUs of the building machine)");
  EXPECT_EQ(describe_architectures(""), "no GPU architecture");
}

TEST(CudaArchitectures, CoverageFollowsCudaCompatibilityRules) {
  // SASS runs on the same major version with an equal or higher minor.
  EXPECT_EQ(architectures_cover("80-real", 8, 6), true);
  EXPECT_EQ(architectures_cover("86-real", 8, 0), false);
  EXPECT_EQ(architectures_cover("80-real", 9, 0), false);
  // PTX is compiled by the driver for any later GPU.
  EXPECT_EQ(architectures_cover("80-virtual", 9, 0), true);
  EXPECT_EQ(architectures_cover("90", 12, 0), true);
  EXPECT_EQ(architectures_cover("90", 8, 9), false);
  // Arch-specific SASS runs on exactly that capability.
  EXPECT_EQ(architectures_cover("90a-real", 9, 0), true);
  EXPECT_EQ(architectures_cover("90a-real", 9, 1), false);
  // ember's default list covers every GPU from Turing on.
  for (auto [major, minor] : {std::pair{7, 5}, {8, 0}, {8, 6}, {8, 7}, {8, 9}, {9, 0}, {10, 0}, {12, 0}}) {
    EXPECT_EQ(architectures_cover("75-real;80-real;86-real;89-real;90", major, minor), true) << major << minor;
  }
  EXPECT_EQ(architectures_cover("75-real;80-real;86-real;89-real;90", 7, 0), false);
  // Words CMake resolves itself are not known here.
  EXPECT_EQ(architectures_cover("native", 9, 0), std::nullopt);
  EXPECT_EQ(architectures_cover("80-real;native", 8, 0), true);
}

TEST(CudaArchitectures, MessageNamesGpuCapabilityListAndFlag) {
  const std::string m = no_kernel_image_message(1, "NVIDIA A100-SXM4-80GB", 8, 0, "90");
  for (const char* part : {"cuda:1 (NVIDIA A100-SXM4-80GB, compute capability 8.0)", "built for CUDA architectures 90",
                           "sm_90 + PTX compute_90", "-DCMAKE_CUDA_ARCHITECTURES=80 (this GPU)",
                           "-DCMAKE_CUDA_ARCHITECTURES=native", "keep tensors on the CPU"}) {
    EXPECT_NE(m.find(part), std::string::npos) << part << "\n" << m;
  }
}

TEST(CudaArchitectures, BuildKnowsItsList) {
#if EMBER_WITH_CUDA
  EXPECT_FALSE(built_architectures().empty());
  EXPECT_EQ(built_architectures().find(','), std::string::npos);
#else
  EXPECT_EQ(built_architectures(), "");
#endif
}

TEST(CudaArchitectures, FirstAllocationAgreesWithTheBuild) {
  if (!is_available()) GTEST_SKIP() << "no CUDA device";
  const DeviceProperties& p = properties(0);
  const std::optional<bool> covered = architectures_cover(built_architectures(), p.major, p.minor);
  if (covered.value_or(true)) {
    EXPECT_EQ(ember::ones({3}, DType::Float32, cuda_device(0)).sum().item<float>(), 3.0f);
  } else {
    const std::string cc = std::to_string(p.major) + std::to_string(p.minor);
    EXPECT_TRUE(throws_with([] { ember::ones({3}, DType::Float32, cuda_device(0)); },
                            {"cuda:0 (" + p.name + ", compute capability", "-DCMAKE_CUDA_ARCHITECTURES=" + cc}));
  }
}

}  // namespace
}  // namespace ember::cuda
