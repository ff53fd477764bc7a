// Channels-last tensors on CUDA against the CPU: convolution (cuDNN's NHWC
// engines; strides, padding, dilation, groups, bias, one input channel,
// input or weight alone channels-last), batch norm (float32 parameters
// beside half inputs too), max, average and adaptive pooling, and the
// elementwise ops, in every float dtype, with gradients; each output must
// come back channels-last. Inputs are converted inside the compared
// function, so both devices see the same layouts (and poisoned outputs).
#include <gtest/gtest.h>

#include "support/cuda_compare.h"

namespace ember {
namespace {

constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

const std::vector<DType>& float_dtypes() {
  static const std::vector<DType> all = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  return all;
}

testing::Tolerance conv_tolerance(DType dt) {
  switch (dt) {
    case DType::Float64: return {1e-10, 1e-10};
    case DType::Float32: return {1e-4, 1e-4};
    case DType::Float16: return {1e-2, 1e-2};
    default: return {4e-2, 4e-2};
  }
}

Tensor cl_output(const Tensor& y) {
  EXPECT_EQ(y.suggest_memory_format(), kCL) << "on " << y.device();
  return y;
}

struct ConvCase {
  Shape x, w;
  Int2 stride, padding, dilation;
  int64_t groups;
};

TEST(CudaChannelsLast, ConvolutionMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  const std::vector<ConvCase> cases = {
      {{2, 3, 17, 13}, {8, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{3, 4, 15, 16}, {6, 4, 5, 3}, {2, 3}, {2, 0}, {1, 1}, 1},
      {{2, 6, 11, 12}, {6, 3, 3, 3}, {1, 2}, {1, 1}, {2, 3}, 2},
      {{2, 8, 9, 9}, {8, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 8},
      {{5, 1, 28, 28}, {32, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},  // the CNN's first layer
      {{4, 32, 14, 14}, {64, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{4, 16, 8, 8}, {32, 16, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},
  };
  for (DType dt : float_dtypes()) {
    for (size_t k = 0; k < cases.size(); ++k) {
      const ConvCase& c = cases[k];
      Generator g(k + 1);
      Tensor x = randn(c.x, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      Tensor w = (randn(c.w, DType::Float32, kCPU, &g) * 0.5).to(dt).set_requires_grad();
      Tensor b = randn({c.w[0]}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      for (int which = 0; which < 3; ++which) {  // both channels-last, the input only, the weight only
        EXPECT_TRUE(testing::cuda_matches_cpu(
            [&](const TensorList& in) {
              Tensor xi = which != 2 ? in[0].to(kCL) : in[0], wi = which != 1 ? in[1].to(kCL) : in[1];
              return TensorList{cl_output(conv2d(xi, wi, in[2], c.stride, c.padding, c.dilation, c.groups))};
            },
            {x, w, b}, /*grads=*/true, conv_tolerance(dt)))
            << dtype_name(dt) << " case " << k << " layout " << which;
      }
    }
  }
}

TEST(CudaChannelsLast, ConvolutionGradientsAreChannelsLast) {
  EMBER_REQUIRE_CUDA();
  Tensor x = randn({2, 8, 9, 9}, DType::Float16, cuda_device(0)).to(kCL).detach().set_requires_grad();
  Tensor w = randn({16, 8, 3, 3}, DType::Float16, cuda_device(0)).to(kCL).detach().set_requires_grad();
  conv2d(x, w, {}, {1, 1}, {1, 1}).sum().backward();
  EXPECT_EQ(x.grad().strides(), x.strides());
  EXPECT_EQ(w.grad().strides(), w.strides());
}

TEST(CudaChannelsLast, BatchNormMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : float_dtypes()) {
    for (const Shape& shape : std::vector<Shape>{{4, 32, 14, 14}, {3, 5, 7, 9}, {64, 64, 7, 7}}) {
      for (bool training : {true, false}) {
        Generator g(shape[1]);
        // Half inputs normalize with float32 parameters, as under autocast.
        const DType pdt = dt == DType::Float64 ? DType::Float64 : DType::Float32;
        Tensor x = randn(shape, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
        Tensor w = randn({shape[1]}, DType::Float32, kCPU, &g).to(pdt).set_requires_grad();
        Tensor b = randn({shape[1]}, DType::Float32, kCPU, &g).to(pdt).set_requires_grad();
        Tensor rm = rand({shape[1]}, DType::Float32, kCPU, &g).to(pdt), rv = (rand({shape[1]}) + 0.5).to(pdt);
        EXPECT_TRUE(testing::cuda_matches_cpu(
            [&](const TensorList& in) {
              Tensor m = in[3].clone(), v = in[4].clone();
              Tensor y = cl_output(batch_norm(in[0].to(kCL), m, v, in[1], in[2], training, 0.1, 1e-5));
              return TensorList{y, m, v};
            },
            {x, w, b, rm, rv}, /*grads=*/true))
            << dtype_name(dt) << " " << shape_str(shape) << " training " << training;
      }
    }
  }
}

TEST(CudaChannelsLast, PoolingMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  const std::vector<std::function<Tensor(const Tensor&)>> pools = {
      [](const Tensor& t) { return max_pool2d(t, {2, 2}); },
      [](const Tensor& t) { return max_pool2d(t, {3, 3}, {2, 2}, {1, 1}, {1, 1}, true); },
      [](const Tensor& t) { return max_pool2d(t, {3, 2}, {1, 2}, {1, 0}, {2, 1}, true); },
      [](const Tensor& t) { return max_pool2d(t, {2, 3}, {2, 3}, {0, 0}, {1, 1}, false); },
      [](const Tensor& t) { return avg_pool2d(t, {3, 3}, {2, 2}, {1, 1}, true, false); },
      [](const Tensor& t) { return avg_pool2d(t, {2, 2}); },
      [](const Tensor& t) { return adaptive_avg_pool2d(t, {5, 3}); },
  };
  for (DType dt : float_dtypes()) {
    for (const Shape& shape : std::vector<Shape>{{2, 3, 17, 13}, {4, 64, 14, 14}, {1, 1, 7, 7}}) {
      for (size_t k = 0; k < pools.size(); ++k) {
        Generator g(k);
        Tensor x = randn(shape, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
        EXPECT_TRUE(testing::cuda_matches_cpu(
            [&](const TensorList& in) { return TensorList{cl_output(pools[k](in[0].to(kCL)))}; }, {x}, true))
            << dtype_name(dt) << " " << shape_str(shape) << " pool " << k;
      }
    }
  }
}

TEST(CudaChannelsLast, ElementwiseOpsKeepTheLayout) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : float_dtypes()) {
    Generator g(3);
    Tensor x = randn({3, 5, 7, 9}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
    Tensor bias = randn({1, 5, 1, 1}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
    EXPECT_TRUE(testing::cuda_matches_cpu(
        [&](const TensorList& in) {
          Tensor xc = in[0].to(kCL);
          return TensorList{cl_output(relu(xc)), cl_output(xc * in[1] + 1.0), cl_output(sigmoid(xc)),
                            cl_output(xc.to(DType::Float32))};
        },
        {x, bias}, true))
        << dtype_name(dt);
  }
}

}  // namespace
}  // namespace ember
