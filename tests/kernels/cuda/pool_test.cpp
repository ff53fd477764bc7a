// CUDA pooling against the CPU kernels: max (padding, dilation, ceil_mode,
// ties, NaN), average (count_include_pad, ceil_mode), adaptive average
// (non-divisible and upsampling bins), every float dtype, non-contiguous
// inputs, gradients, and second-order gradients of the average pools.
// Channels-last inputs: pooled in their layout, outputs channels-last, and
// their gradients from gradients in any layout.
#include <gtest/gtest.h>

#include <cmath>

#include "support/cuda_compare.h"

namespace ember {
namespace {

struct Window {
  Int2 kernel, stride, padding, dilation;
  bool ceil_mode;
};

const std::vector<Window>& windows() {
  static const std::vector<Window> all = {
      {{2, 2}, {2, 2}, {0, 0}, {1, 1}, false},
      {{3, 3}, {2, 2}, {1, 1}, {1, 1}, true},
      {{3, 2}, {1, 2}, {1, 0}, {2, 1}, true},
      {{5, 3}, {3, 2}, {2, 1}, {1, 3}, false},
      {{4, 4}, {3, 3}, {2, 2}, {1, 1}, true},
      // Windows that tile the plane (max backward's output-centric kernel),
      // with rows and columns left over or a last window cut by ceil_mode.
      {{3, 3}, {3, 3}, {0, 0}, {1, 1}, true},
      {{2, 3}, {2, 3}, {0, 0}, {1, 1}, false},
  };
  return all;
}

const std::vector<Shape>& shapes() {
  static const std::vector<Shape> all = {{2, 3, 17, 13}, {1, 1, 7, 7}, {3, 5, 32, 33}};
  return all;
}

TEST(CudaPool2d, MaxMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const Shape& shape : shapes()) {
      for (size_t k = 0; k < windows().size(); ++k) {
        const Window& w = windows()[k];
        Generator g(k);
        Tensor x = randn(shape, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
        EXPECT_TRUE(testing::cuda_matches_cpu(
            [&](const TensorList& in) {
              return TensorList{max_pool2d(in[0], w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode)};
            },
            {x}, true))
            << dtype_name(dt) << " " << shape_str(shape) << " window " << k;
      }
    }
  }
}

TEST(CudaPool2d, MaxTiesNaNAndTransposedInput) {
  EMBER_REQUIRE_CUDA();
  Generator g(5);
  // Small integers: many ties, each must route to the first maximum as on the CPU.
  Tensor ties = (randn({2, 3, 12, 11}, DType::Float32, kCPU, &g) * 1.5).to(DType::Int32).to(DType::Float32);
  std::vector<float> v = to_vector<float>(ties);
  v[5] = NAN;
  v[40] = NAN;
  v[41] = NAN;
  Tensor x = from_vector<float>(v, ties.shape()).set_requires_grad();
  for (const Window& w : windows()) {
    EXPECT_TRUE(testing::cuda_matches_cpu(
        [&](const TensorList& in) {
          return TensorList{max_pool2d(in[0].transpose(2, 3), w.kernel, w.stride, w.padding, w.dilation, w.ceil_mode)};
        },
        {x}, true));
  }
}

TEST(CudaPool2d, AvgMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const Shape& shape : shapes()) {
      for (size_t k = 0; k < windows().size(); ++k) {
        const Window& w = windows()[k];
        for (bool include_pad : {true, false}) {
          Generator g(k);
          Tensor x = randn(shape, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
          EXPECT_TRUE(testing::cuda_matches_cpu(
              [&](const TensorList& in) {
                return TensorList{avg_pool2d(in[0], w.kernel, w.stride, w.padding, w.ceil_mode, include_pad)};
              },
              {x}, true))
              << dtype_name(dt) << " " << shape_str(shape) << " window " << k << " include_pad " << include_pad;
        }
      }
    }
  }
}

TEST(CudaPool2d, AdaptiveAvgMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const Shape& shape : shapes()) {
      for (Int2 out : {Int2{1, 1}, Int2{5, 3}, Int2{7, 7}, Int2{20, 40}}) {
        Generator g{uint64_t(out[0])};
        Tensor x = randn(shape, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
        EXPECT_TRUE(testing::cuda_matches_cpu(
            [&](const TensorList& in) { return TensorList{adaptive_avg_pool2d(in[0].transpose(2, 3), out)}; }, {x},
            true))
            << dtype_name(dt) << " " << shape_str(shape) << " out " << out[0] << "x" << out[1];
      }
    }
  }
}

TEST(CudaPool2d, AvgSecondOrderGradientsMatchCpu) {
  EMBER_REQUIRE_CUDA();
  Generator g(6);
  Tensor x = randn({2, 3, 9, 8}, DType::Float64, kCPU, &g).set_requires_grad();
  EXPECT_TRUE(testing::cuda_matches_cpu(
      [](const TensorList& in) {
        Tensor y = avg_pool2d(in[0], {3, 3}, {2, 2}, {1, 1}, true, false);
        Tensor z = adaptive_avg_pool2d(in[0], {4, 3});
        // First gradients with a graph (grad_output depends on x); backward then runs through them.
        return autograd::grad({y, z}, {in[0]}, {y * y, z}, true, true);
      },
      {x}, true));
}

// Max pools tiling the plane and not, average pools with and without
// padding, an adaptive one: the channels-last tests' cases.
const std::vector<std::function<Tensor(const Tensor&)>>& channels_last_pools() {
  static const std::vector<std::function<Tensor(const Tensor&)>> pools = {
      [](const Tensor& t) {
        return max_pool2d(t, {2, 2});
      },
      [](const Tensor& t) {
        return max_pool2d(t, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true);
      },
      [](const Tensor& t) {
        return max_pool2d(t, {3, 2}, {1, 2}, {1, 0}, {2, 1}, true);
      },
      [](const Tensor& t) {
        return max_pool2d(t, {2, 3}, {2, 3}, {0, 0}, {1, 1}, false);
      },
      [](const Tensor& t) {
        return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1}, true, false);
      },
      [](const Tensor& t) {
        return avg_pool2d(t, {2, 2});
      },
      [](const Tensor& t) {
        return adaptive_avg_pool2d(t, {5, 3});
      },
  };
  return pools;
}

TEST(CudaPool2d, ChannelsLastMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  const std::vector<std::function<Tensor(const Tensor&)>>& pools = channels_last_pools();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const Shape& shape : std::vector<Shape>{{2, 3, 17, 13}, {4, 64, 14, 14}, {1, 1, 7, 7}}) {
      for (size_t k = 0; k < pools.size(); ++k) {
        Generator g(k);
        Tensor x = randn(shape, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
        EXPECT_TRUE(testing::cuda_matches_cpu(
            [&](const TensorList& in) { return TensorList{testing::channels_last_output(pools[k](in[0].to(cl)))}; },
            {x}, true))
            << dtype_name(dt) << " " << shape_str(shape) << " pool " << k;
      }
    }
  }
}

// An NCHW or channels-last input's gradient from a gradient laid out NCHW,
// channels-last (each read as it is), or neither (copied first).
TEST(CudaPool2d, InputTakesItsGradientInAnyLayoutAsTheCpu) {
  EMBER_REQUIRE_CUDA();
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  const std::vector<std::function<Tensor(const Tensor&)>>& pools = channels_last_pools();
  const std::vector<std::function<Tensor(const Tensor&)>> layouts = {
      [](const Tensor& g) { return g; },
      [cl](const Tensor& g) { return g.contiguous(cl); },
      [](const Tensor& g) { return g.transpose(2, 3).contiguous().transpose(2, 3); },
  };
  for (DType dt : {DType::Float32, DType::Float16}) {
    for (size_t k = 0; k < pools.size(); ++k) {
      Generator g(k + 40);
      Tensor x = randn({3, 40, 11, 10}, DType::Float32, kCPU, &g).to(dt);
      Tensor gy = randn(pools[k](x).shape(), DType::Float32, kCPU, &g).to(dt);
      for (MemoryFormat format : {MemoryFormat::Contiguous, cl}) {
        for (size_t l = 0; l < layouts.size(); ++l) {
          EXPECT_TRUE(testing::cuda_matches_cpu(
              [&](const TensorList& in) {
                Tensor xc = in[0].detach().contiguous(format).set_requires_grad();
                Tensor dx = autograd::grad({pools[k](xc)}, {xc}, {layouts[l](in[1])})[0];
                return TensorList{format == cl ? testing::channels_last_output(dx) : dx};
              },
              {x, gy}))
              << dtype_name(dt) << " pool " << k << (format == cl ? " channels-last" : " nchw")
              << " input, gradient layout " << l;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ember
