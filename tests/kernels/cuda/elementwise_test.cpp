// CUDA elementwise kernels against their CPU counterparts: every op, odd
// sizes, non-contiguous and broadcast views, every dtype, gradients.
// Channels-last inputs keep their layout.
#include <gtest/gtest.h>

#include "ember/core/cuda/graph.h"
#include "support/cuda_compare.h"

namespace ember {
namespace {

using testing::cuda_matches_cpu;
using testing::odd_sizes;

const DType kFloatTypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

Tensor random_input(const Shape& shape, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::Float32, kCPU, &g).to(dtype);
}

TEST(CudaElementwise, UnaryFloatOpsAllSizesAndDtypes) {
  EMBER_REQUIRE_CUDA();
  using Fn = Tensor (*)(const Tensor&);
  const std::pair<const char*, Fn> ops[] = {{"neg", &neg},         {"exp", &exp},       {"tanh", &tanh},
                                            {"sigmoid", &sigmoid}, {"relu", &relu},     {"gelu", &gelu},
                                            {"abs", &abs},         {"sign", &sign},     {"sin", &sin},
                                            {"cos", &cos},         {"square", &square}, {"reciprocal", &reciprocal}};
  for (DType dt : kFloatTypes) {
    for (int64_t n : odd_sizes()) {
      Tensor x = random_input({n}, dt, uint64_t(n));
      for (auto [name, fn] : ops) {
        EXPECT_TRUE(cuda_matches_cpu([fn](const TensorList& in) { return TensorList{fn(in[0])}; }, {x}))
            << name << " " << dtype_name(dt) << " n=" << n;
      }
      Tensor pos = abs(x) + 0.5;
      for (Fn fn : {Fn(&log), Fn(&sqrt), Fn(&rsqrt)}) {
        EXPECT_TRUE(cuda_matches_cpu([fn](const TensorList& in) { return TensorList{fn(in[0])}; }, {pos}));
      }
    }
  }
}

TEST(CudaElementwise, BinaryOpsWithBroadcastAndStrides) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    Tensor a = random_input({33, 65}, dt, 1), b = random_input({65}, dt, 2), c = random_input({65, 33}, dt, 3);
    auto check = [&](auto fn) { EXPECT_TRUE(cuda_matches_cpu(fn, {a, b, c})) << dtype_name(dt); };
    check([](const TensorList& in) { return TensorList{in[0] + in[1], in[0] - in[1], in[0] * in[1], in[0] / in[1]}; });
    check([](const TensorList& in) { return TensorList{maximum(in[0], in[2].t()), minimum(in[0], in[2].t())}; });
    check([](const TensorList& in) { return TensorList{in[0].narrow(1, 3, 40) * in[2].t().narrow(1, 1, 40)}; });
    check([](const TensorList& in) { return TensorList{in[0] * 2.5, 1.5 - in[0], 3.0 / (abs(in[0]) + 1.0)}; });
    check([](const TensorList& in) { return TensorList{pow(abs(in[0]) + 0.1, in[1]), pow(in[0], 2)}; });
    check([](const TensorList& in) { return TensorList{in[0].unsqueeze(2).expand({33, 65, 3}) + 1.0}; });
  }
}

TEST(CudaElementwise, IntegerAndBoolOps) {
  EMBER_REQUIRE_CUDA();
  for (int64_t n : odd_sizes()) {
    Tensor a = randint(-50, 50, {n}, DType::Int64), b = randint(1, 9, {n}, DType::Int32);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          return TensorList{in[0] + in[1], in[0] * in[1], in[0] - 3,     maximum(in[0], in[1]), abs(in[0]),
                            pow(in[1], 3), in[0] / in[1], in[0] > in[1], eq(in[0], 7),          logical_not(in[0] > 0)};
        },
        {a, b}))
        << n;
  }
}

TEST(CudaElementwise, ComparisonsWhereCastsAndFills) {
  EMBER_REQUIRE_CUDA();
  Tensor a = random_input({17, 31}, DType::Float32, 5), b = random_input({31}, DType::Float32, 6);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        return TensorList{in[0] < in[1], ge(in[0], 0.25), where(in[0] > in[1], in[0], in[1]),
                          where(in[0] > 0, in[0], 0.0)};
      },
      {a, b}));
  for (DType from :
       {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64, DType::Bool}) {
    Tensor x = (random_input({1025}, DType::Float32, 7) * 100.0).to(from);
    for (DType to :
         {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64, DType::Bool}) {
      EXPECT_TRUE(cuda_matches_cpu(
          [to](const TensorList& in) {
            return TensorList{in[0].to(to), in[0].t().to(to)};
          },
          {x}))
          << dtype_name(from) << " -> " << dtype_name(to);
    }
  }
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        Tensor z = zeros_like(in[0]);
        z.narrow(0, 1, 3).fill_(2.5);
        return TensorList{z, full({5, 7}, 3, DType::Int64, in[0].device())};
      },
      {a}));
}

// arange runs on the device (no host copy), with the CPU's values for every
// dtype and integral, negative and fractional steps; so a graph captures it.
TEST(CudaElementwise, ArangeMatchesTheCpuAndIsCaptured) {
  EMBER_REQUIRE_CUDA();
  const Device gpu(DeviceType::CUDA, 0);
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64}) {
    EXPECT_TRUE(equal(arange(1000, dt, gpu).cpu(), arange(1000, dt, kCPU))) << dtype_name(dt);
    EXPECT_TRUE(equal(arange(7, -30, -3, dt, gpu).cpu(), arange(7, -30, -3, dt, kCPU))) << dtype_name(dt);
    EXPECT_TRUE(equal(arange(-1.5, 20.25, 0.3, dt, gpu).cpu(), arange(-1.5, 20.25, 0.3, dt, kCPU))) << dtype_name(dt);
  }
  EXPECT_EQ(arange(0, DType::Int64, gpu).numel(), 0);
  Tensor positions;
  cuda::Graph graph;
  graph.capture([&] { positions = arange(33, DType::Int64, gpu) * 2; });
  graph.replay();
  EXPECT_TRUE(equal(positions.cpu(), arange(0, 66, 2, DType::Int64, kCPU)));
}

TEST(CudaElementwise, RandomMatchesCpuForTheSameSeed) {
  EMBER_REQUIRE_CUDA();
  for (int64_t n : odd_sizes()) {
    Generator g1(42), g2(42);
    Tensor u_cpu = rand({n}, DType::Float32, kCPU, &g1), u_gpu = rand({n}, DType::Float32, cuda_device(0), &g2);
    EXPECT_TRUE(testing::tensors_close(u_gpu, u_cpu, {0, 0}));
    Tensor z_cpu = randn({n}, DType::Float32, kCPU, &g1), z_gpu = randn({n}, DType::Float32, cuda_device(0), &g2);
    EXPECT_TRUE(testing::tensors_close(z_gpu, z_cpu, {1e-5, 1e-5}));
  }
}

TEST(CudaElementwise, GradientsMatchCpu) {
  EMBER_REQUIRE_CUDA();
  Tensor a = random_input({9, 13}, DType::Float32, 11).set_requires_grad();
  Tensor b = random_input({13}, DType::Float32, 12).set_requires_grad();
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        return TensorList{(in[0] * in[1]).tanh() + in[0].sigmoid() * in[0].gelu() - relu(in[0] / (abs(in[1]) + 1.0))};
      },
      {a, b}, /*grads=*/true));
}

TEST(CudaElementwise, GeluTanhValuesAndGradientsAllDtypes) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatTypes) {
    for (int64_t n : odd_sizes()) {
      Tensor x = random_input({n}, dt, uint64_t(n) + 5) * 3.0;
      EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return TensorList{gelu(in[0], "tanh")}; }, {x}))
          << dtype_name(dt) << " n=" << n;
    }
    Tensor m = random_input({37, 29}, dt, 21).set_requires_grad();
    EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return TensorList{in[0].t().gelu("tanh")}; }, {m},
                                 /*grads=*/true))
        << dtype_name(dt);
  }
}

TEST(CudaElementwise, CrossDeviceCopiesRoundTrip) {
  EMBER_REQUIRE_CUDA();
  Tensor x = random_input({65, 33}, DType::Float32, 13);
  Tensor back = x.t().to(cuda_device(0)).to(kCPU);
  EXPECT_TRUE(testing::tensors_close(back, x.t().contiguous(), {0, 0}));
  Tensor dst = zeros({33, 65}, DType::Float64, cuda_device(0));
  dst.t().copy_(x);  // strided destination, dtype change, across devices
  EXPECT_TRUE(testing::tensors_close(dst.t().to(kCPU), x.to(DType::Float64), {0, 0}));
}

TEST(CudaElementwise, ChannelsLastInputsKeepTheirLayout) {
  EMBER_REQUIRE_CUDA();
  using testing::channels_last_output;
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Generator g(3);
    Tensor x = randn({3, 5, 7, 9}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
    Tensor bias = randn({1, 5, 1, 1}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
    EXPECT_TRUE(cuda_matches_cpu(
        [&](const TensorList& in) {
          Tensor xc = in[0].to(MemoryFormat::ChannelsLast);
          return TensorList{channels_last_output(relu(xc)), channels_last_output(xc * in[1] + 1.0),
                            channels_last_output(sigmoid(xc)), channels_last_output(xc.to(DType::Float32))};
        },
        {x, bias}, true))
        << dtype_name(dt);
  }
}

// Copies between the devices keep a channels-last layout (converted on the
// source side, the bytes moved as they lie), and a channels-last slice on
// the GPU, which is not one dense block, gives channels-last results.
TEST(CudaElementwise, ChannelsLastCopiesAcrossDevicesKeepTheLayout) {
  EMBER_REQUIRE_CUDA();
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  Generator g(4);
  Tensor c = randn({3, 5, 7, 9}, DType::Float32, kCPU, &g);
  Tensor x = c.to(cl);
  for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
    Tensor on_gpu = x.to(cuda_device(0), dt);
    EXPECT_EQ(on_gpu.strides(), x.strides()) << dtype_name(dt);
    Tensor back = on_gpu.to(kCPU, DType::Float32);
    EXPECT_EQ(back.strides(), x.strides()) << dtype_name(dt);
    EXPECT_EQ(to_vector<float>(back), to_vector<float>(c.to(dt).to(DType::Float32))) << dtype_name(dt);
    Tensor r = relu(on_gpu.narrow(1, 1, 3));
    EXPECT_TRUE(r.is_contiguous(cl)) << dtype_name(dt);
    EXPECT_EQ(to_vector<float>(r.to(kCPU, DType::Float32)),
              to_vector<float>(relu(c.to(dt).narrow(1, 1, 3)).to(DType::Float32)))
        << dtype_name(dt);
  }
}

}  // namespace
}  // namespace ember
