// The loss-scaling kernels (ember/core/ops/amp_kernels.h): the CPU kernels' rule
// checked directly, and the CUDA kernels against the CPU ones over hundreds
// of gradients of odd sizes (several ChunkLists per call), tensors that span
// several 64K-element chunks, every float dtype, with and without planted
// infs and NaNs. The CUDA tests skip when no device is visible.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/ops/amp_kernels.h"
#include "support/cuda_compare.h"

namespace ember {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
const DType kFloatTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

// Runs the unscale-and-check kernel of grads' device over grads (dense, one
// dtype); returns the flag (starting from `flag`).
float unscale_and_check(TensorList& grads, std::optional<float> inv_scale, float flag = 0) {
  const Device device = grads.front().device();
  std::vector<optim::FusedTensor> fused;
  for (Tensor& g : grads) {
    optim::FusedTensor f;
    f.param = g.data_ptr();
    f.numel = g.numel();
    fused.push_back(f);
  }
  const optim::MultiTensorArgs args{device.is_cuda() ? device.index : 0, grads.front().dtype(), fused.data(),
                                    int64_t(fused.size())};
  Tensor found = full({}, flag, DType::Float32, device);
  Tensor inv = inv_scale ? full({}, *inv_scale, DType::Float32, device) : Tensor();
  amp::unscale_and_check_stub(device.type)(args, inv.defined() ? static_cast<const float*>(inv.data_ptr()) : nullptr,
                                           static_cast<float*>(found.data_ptr()));
  return found.item<float>();
}

// 300 gradients: odd small sizes, an empty one, and two multi-chunk ones.
TensorList make_grads(DType dtype, uint64_t seed) {
  const int64_t sizes[] = {1, 7, 33, 3, 1023, 5, 1025, 2, 129, 11};
  TensorList out;
  for (int i = 0; i < 300; ++i) {
    Generator g(seed + uint64_t(i));
    const int64_t n = i == 17 ? 0 : i == 298 ? 65537 : i == 299 ? 3 * 70001 : sizes[i % 10];
    out.push_back(mul(randn({n}, DType::Float32, kCPU, &g), 1000.0).to(dtype));
  }
  return out;
}

TEST(AmpKernels, CpuUnscalesAndFlagsNonFiniteValues) {
  for (DType dtype : kFloatTypes) {
    SCOPED_TRACE(dtype_name(dtype));
    TensorList grads = {from_vector<double>({2, -4, 8}).to(dtype), from_vector<double>({16}).to(dtype)};
    EXPECT_EQ(unscale_and_check(grads, 0.25f), 0.0f);
    EXPECT_EQ(to_vector<double>(grads[0].to(DType::Float64)), (std::vector<double>{0.5, -1, 2}));
    EXPECT_EQ(grads[1].item<double>(), 4.0);
    for (double bad : {kInf, -kInf, kNaN}) {
      TensorList with_bad = {from_vector<double>({1, bad, 3}).to(dtype)};
      EXPECT_EQ(unscale_and_check(with_bad, std::nullopt), 1.0f) << bad;
      EXPECT_EQ(to_vector<double>(with_bad[0].to(DType::Float64))[0], 1.0);  // no inv_scale: untouched
    }
    TensorList clean = {from_vector<double>({1, 2}).to(dtype)};
    EXPECT_EQ(unscale_and_check(clean, 0.5f, /*flag=*/1.0f), 1.0f) << "the flag is never cleared";
  }
}

TEST(AmpKernels, CpuScaleUpdateFollowsTheRule) {
  Tensor scale = full({}, 1024.0, DType::Float32), tracker = zeros({}, DType::Int32);
  Tensor skipped = zeros({}, DType::Int64), found = zeros({}, DType::Float32), inv = zeros({}, DType::Float32);
  amp::ScaleState s{0,
                    static_cast<float*>(scale.data_ptr()),
                    static_cast<float*>(inv.data_ptr()),
                    static_cast<int32_t*>(tracker.data_ptr()),
                    static_cast<int64_t*>(skipped.data_ptr()),
                    static_cast<float*>(found.data_ptr())};
  const amp::ScaleRule rule{2.0, 0.5, 3, 256.0, 4096.0};
  struct Expect {
    float found_inf, scale;
    int32_t tracker;
    int64_t skipped;
  };
  // Grows after 3 clean steps, backs off on an inf, stops at both bounds.
  const Expect sequence[] = {{0, 1024, 1, 0}, {0, 1024, 2, 0}, {0, 2048, 0, 0}, {1, 1024, 0, 1}, {1, 512, 0, 2},
                             {1, 256, 0, 3},  {1, 256, 0, 4},  {0, 256, 1, 4},  {0, 256, 2, 4},  {0, 512, 0, 4},
                             {0, 512, 1, 4},  {0, 512, 2, 4},  {0, 1024, 0, 4}};
  for (const Expect& e : sequence) {
    found.fill_(e.found_inf);
    amp::update_scale_stub(DeviceType::CPU)(s, rule);
    EXPECT_EQ(scale.item<float>(), e.scale);
    EXPECT_EQ(inv.item<float>(), 1.0f / e.scale);
    EXPECT_EQ(found.item<float>(), 0.0f) << "the flag is reset for the next step";
    EXPECT_EQ(tracker.item<int32_t>(), e.tracker);
    EXPECT_EQ(skipped.item<int64_t>(), e.skipped);
  }
  scale.fill_(4096.0);
  tracker.fill_(2);
  found.fill_(0.0);
  amp::update_scale_stub(DeviceType::CPU)(s, rule);
  EXPECT_EQ(scale.item<float>(), 4096.0f) << "max_scale caps the growth";
  // An unbounded rule keeps a scale whose growth would overflow.
  scale.fill_(3e38);
  tracker.fill_(2);
  amp::update_scale_stub(DeviceType::CPU)(s, {2.0, 0.5, 3, 1.0, kInf});
  EXPECT_EQ(scale.item<float>(), 3e38f);
  EXPECT_EQ(inv.item<float>(), 1.0f / 3e38f);
  EXPECT_EQ(tracker.item<int32_t>(), 0);
}

TEST(AmpKernelsCuda, UnscaleAndCheckMatchTheCpu) {
  if (!testing::cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  const Device gpu = cuda_device(0);
  for (DType dtype : kFloatTypes) {
    for (int plant : {-1, 0, 298, 299}) {  // where an inf or NaN goes (-1: nowhere)
      for (bool unscale : {true, false}) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " planted in " + std::to_string(plant) +
                     (unscale ? " unscale" : " check only"));
        TensorList cpu = make_grads(dtype, 11);
        if (plant >= 0) {
          const int64_t at = cpu[size_t(plant)].numel() - 1;  // the last element of the last chunk
          cpu[size_t(plant)].narrow(0, at, 1).fill_(plant == 299 ? kNaN : -kInf);
        }
        TensorList cuda;
        for (const Tensor& g : cpu) cuda.push_back(g.to(gpu));
        const std::optional<float> inv = unscale ? std::optional<float>(1.0f / 65536.0f) : std::nullopt;
        EXPECT_EQ(unscale_and_check(cuda, inv), unscale_and_check(cpu, inv));
        for (size_t k = 0; k < cpu.size(); ++k) {
          ASSERT_TRUE(testing::tensors_close(cuda[k], cpu[k], {0, 0})) << "gradient " << k;
        }
      }
    }
  }
}

TEST(AmpKernelsCuda, ScaleUpdateMatchesTheCpu) {
  if (!testing::cuda_available()) GTEST_SKIP() << "no CUDA device visible";
  const Device gpu = cuda_device(0);
  struct Copy {
    Tensor scale, inv, tracker, skipped, found;
    amp::ScaleState state(int index) const {
      return {index,
              static_cast<float*>(scale.data_ptr()),
              static_cast<float*>(inv.data_ptr()),
              static_cast<int32_t*>(tracker.data_ptr()),
              static_cast<int64_t*>(skipped.data_ptr()),
              static_cast<float*>(found.data_ptr())};
    }
  };
  auto make = [](Device d) {
    return Copy{full({}, 65536.0, DType::Float32, d), zeros({}, DType::Float32, d), zeros({}, DType::Int32, d),
                zeros({}, DType::Int64, d), zeros({}, DType::Float32, d)};
  };
  Copy cpu = make(kCPU), cuda = make(gpu);
  const amp::ScaleRule rule{2.0, 0.5, 4, 1.0 / 16777216.0, 16777216.0};
  Generator g(5);
  const Tensor flags = rand({200}, DType::Float32, kCPU, &g);
  for (int64_t i = 0; i < flags.numel(); ++i) {
    const float found = flags.narrow(0, i, 1).item<float>() < 0.2f ? 1.0f : 0.0f;
    cpu.found.fill_(found);
    cuda.found.fill_(found);
    amp::update_scale_stub(DeviceType::CPU)(cpu.state(0), rule);
    amp::update_scale_stub(DeviceType::CUDA)(cuda.state(gpu.index), rule);
    ASSERT_EQ(cuda.scale.item<float>(), cpu.scale.item<float>()) << "step " << i;
    ASSERT_EQ(cuda.inv.item<float>(), cpu.inv.item<float>()) << "step " << i;
    ASSERT_EQ(cuda.found.item<float>(), 0.0f) << "step " << i;
    ASSERT_EQ(cuda.tracker.item<int32_t>(), cpu.tracker.item<int32_t>()) << "step " << i;
    ASSERT_EQ(cuda.skipped.item<int64_t>(), cpu.skipped.item<int64_t>()) << "step " << i;
  }
}

// The batched cast against Tensor::to on the CPU and against the CPU kernel
// on the GPU: 120 float32 tensors of odd sizes (three ChunkLists), one of
// several chunks, an empty one, both half dtypes, values that round in
// every way (ties, subnormals, overflow to inf), destinations poisoned
// (NaN) first so that an unwritten element fails.
TEST(AmpKernels, CastManyRoundsAsTensorToDoes) {
  Generator g(9);
  TensorList src;
  for (int i = 0; i < 120; ++i) {
    const int64_t n = i == 7 ? 0 : i == 11 ? 3 * optim::kOptimChunk + 17 : 1 + (i * 37) % 501;
    src.push_back(randn({n}, DType::Float32, kCPU, &g) * (i % 3 == 0 ? 1e-6 : i % 3 == 1 ? 1.0 : 1e5));
  }
  src[1].narrow(0, 0, 3).copy_(from_vector<float>({65520.0f, 1.0f + 1.0f / 2048.0f, 3e38f}));
  for (DType to : {DType::Float16, DType::BFloat16}) {
    for (bool gpu : {false, true}) {
      if (gpu && !testing::cuda_available()) continue;
      const Device device = gpu ? cuda_device(0) : kCPU;
      TensorList in, out;
      std::vector<optim::FusedTensor> fused;
      for (const Tensor& t : src) {
        in.push_back(t.to(device));
        out.push_back(full(t.shape(), kNaN, to, device));
        optim::FusedTensor f;
        f.param = out.back().data_ptr();
        f.grad = in.back().data_ptr();
        f.numel = t.numel();
        fused.push_back(f);
      }
      amp::cast_many_stub(device.type)({gpu ? 0 : 0, to, fused.data(), int64_t(fused.size())});
      for (size_t k = 0; k < src.size(); ++k) {
        ASSERT_TRUE(testing::tensors_close(out[k], src[k].to(to), {0, 0}))
            << dtype_name(to) << (gpu ? " cuda" : " cpu") << " tensor " << k;
      }
    }
  }
}

}  // namespace
}  // namespace ember
