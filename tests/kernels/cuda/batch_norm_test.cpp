// CUDA batch norm against the CPU kernels: training and eval, 2-D to 5-D
// inputs (channels with more values than a block has threads, channels
// whose rows are split among blocks), with and
// without weight, bias and running statistics, the running statistics after
// several steps, every float dtype, a non-contiguous input, and gradients.
// Channels-last inputs too (normalized in their layout, outputs channels-last).
#include <gtest/gtest.h>

#include "support/cuda_compare.h"

namespace ember {
namespace {

// m: the values per channel. The CPU sums a channel's float32 values in one
// running sum, whose rounding error grows about like m ulps of the partial
// sums (5e-4 seen for grad_weight at m = 25088); the GPU sums short runs and
// then a tree, far more exactly. So the float32 bound grows with m.
testing::Tolerance bn_tolerance(DType dt, int64_t m = 0) {
  switch (dt) {
    case DType::Float64: return {1e-10, 1e-10};
    case DType::Float32: return {1e-4, 1e-4 + 1e-7 * double(m)};
    case DType::Float16: return {1e-2, 1e-2};
    default: return {4e-2, 4e-2};  // bfloat16
  }
}

const std::vector<Shape>& shapes() {
  // Also channels split among many blocks: wide planes (inner 81, 784) and
  // narrow ones walked flat (inner 1 and 5); (N, C) with 40 channels, walked
  // in tiles of 32 channels (the second one partial), and with so many that
  // one split of the rows fills the device (each tile finishes its channels).
  static const std::vector<Shape> all = {{7, 5},          {3, 4, 33, 35}, {2, 3, 1025}, {2, 3, 4, 5, 6},
                                         {1, 2, 1, 2},    {64, 3, 9, 9},  {300, 7},     {257, 3, 5},
                                         {32, 8, 28, 28}, {300, 40},      {3, 40000}};
  return all;
}

TEST(CudaBatchNorm, TrainingMatchesCpuOverSteps) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const Shape& shape : shapes()) {
      int64_t c = shape[1];
      Generator g{uint64_t(shape.size())};
      Tensor x = (randn(shape, DType::Float32, kCPU, &g) * 2.0 + 0.5).to(dt).set_requires_grad();
      Tensor w = randn({c}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      Tensor b = randn({c}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      Tensor rm = zeros({c}, dt), rv = ones({c}, dt);
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [](const TensorList& in) {
            // Three steps update the running statistics on the device; the
            // last step's output and the statistics are compared.
            Tensor y;
            for (int step = 0; step < 3; ++step) {
              y = batch_norm(in[0] * double(step + 1), in[3], in[4], in[1], in[2], true, 0.2, 1e-4);
            }
            return TensorList{y, in[3], in[4]};
          },
          {x, w, b, rm, rv}, /*grads=*/true, bn_tolerance(dt, x.numel() / c)))
          << dtype_name(dt) << " " << shape_str(shape);
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [](const TensorList& in) { return TensorList{batch_norm(in[0], {}, {}, {}, {}, true)}; }, {x}, true,
          bn_tolerance(dt, x.numel() / c)))
          << dtype_name(dt) << " " << shape_str(shape) << " (no affine, no running stats)";
    }
  }
}

TEST(CudaBatchNorm, EvalMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (const Shape& shape : shapes()) {
      int64_t c = shape[1];
      Generator g(7);
      Tensor x = randn(shape, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      Tensor w = randn({c}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      Tensor rm = randn({c}, DType::Float32, kCPU, &g).to(dt);
      Tensor rv = (rand({c}, DType::Float32, kCPU, &g) + 0.5).to(dt);
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{batch_norm(in[0], in[2], in[3], in[1], {}, false), in[2], in[3]};
          },
          {x, w, rm, rv}, true, bn_tolerance(dt, x.numel() / c)))
          << dtype_name(dt) << " " << shape_str(shape);
    }
  }
}

// Half input beside float32 parameters and statistics (autocast's case):
// the kernels read and write each in its own dtype, on the GPU as on the CPU.
TEST(CudaBatchNorm, HalfInputWithFloat32ParametersMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    for (const Shape& shape : shapes()) {
      const int64_t c = shape[1];
      Generator g(9);
      Tensor x = (randn(shape, DType::Float32, kCPU, &g) * 2.0 + 0.5).to(dt).set_requires_grad();
      Tensor w = randn({c}, DType::Float32, kCPU, &g).set_requires_grad();
      Tensor b = randn({c}, DType::Float32, kCPU, &g).set_requires_grad();
      Tensor rm = zeros({c}), rv = ones({c});
      for (bool training : {true, false}) {
        EXPECT_TRUE(testing::cuda_matches_cpu(
            [training](const TensorList& in) {
              Tensor y = batch_norm(in[0], in[3], in[4], in[1], in[2], training, 0.2, 1e-4);
              return TensorList{y, in[3], in[4]};
            },
            {x, w, b, rm, rv}, /*grads=*/true, bn_tolerance(dt, x.numel() / c)))
            << dtype_name(dt) << " " << shape_str(shape) << (training ? " training" : " eval");
      }
    }
  }
}

TEST(CudaBatchNorm, NonContiguousInputAndPartialGrads) {
  EMBER_REQUIRE_CUDA();
  Generator g(8);
  Tensor x = randn({9, 6, 4, 5}, DType::Float32, kCPU, &g).set_requires_grad();
  Tensor b = randn({6}, DType::Float32, kCPU, &g).set_requires_grad();
  EXPECT_TRUE(testing::cuda_matches_cpu(
      [](const TensorList& in) {
        // (4, 6, 9, 5) with C in the middle, strided; only bias (and the input) need grads.
        return TensorList{batch_norm(in[0].permute({2, 1, 0, 3}), {}, {}, {}, in[1], true)};
      },
      {x, b}, true, bn_tolerance(DType::Float32)));
  Tensor w = randn({6}, DType::Float32, kCPU, &g).set_requires_grad();
  Tensor xc = randn({9, 6, 4, 5}, DType::Float32, kCPU, &g);  // no grad: weight only
  EXPECT_TRUE(testing::cuda_matches_cpu(
      [](const TensorList& in) { return TensorList{batch_norm(in[0], {}, {}, in[1], {}, true)}; }, {xc, w}, true,
      bn_tolerance(DType::Float32)));
}

TEST(CudaBatchNorm, ChannelsLastMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    // Tiles of 32 channels (whole, two, one partial) and a few channels walked one by one.
    for (const Shape& shape : std::vector<Shape>{{4, 32, 14, 14}, {3, 5, 7, 9}, {64, 64, 7, 7}, {6, 45, 3, 5}}) {
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
              Tensor y = batch_norm(in[0].to(cl), m, v, in[1], in[2], training, 0.1, 1e-5);
              testing::channels_last_output(y);
              return TensorList{y, m, v};
            },
            {x, w, b, rm, rv}, /*grads=*/true, bn_tolerance(dt, x.numel() / shape[1])))
            << dtype_name(dt) << " " << shape_str(shape) << " training " << training;
      }
    }
  }
}

// The counter batch_norm takes is counted by the normalizing kernels, per-
// element (NCHW), tiled (channels-last, and (N, C)) alike, in training only;
// nn::BatchNorm2d's num_batches_tracked on the GPU the same, with a
// momentum (counted by the op) and without (counted on the host, which
// reads it for the cumulative average).
TEST(CudaBatchNorm, CountsBatchesInTheNormalizingKernels) {
  EMBER_REQUIRE_CUDA();
  const Device gpu = cuda_device(0);
  for (const Shape& shape : std::vector<Shape>{{4, 3, 5, 7}, {4, 32, 14, 14}, {8, 40}}) {
    for (bool channels_last : {false, true}) {
      if (channels_last && shape.size() != 4) continue;
      Tensor x = randn(shape, DType::Float16, gpu);
      if (channels_last) x = x.contiguous(MemoryFormat::ChannelsLast);
      Tensor counter = zeros({}, DType::Int64, gpu), rm = zeros({shape[1]}, DType::Float32, gpu),
             rv = ones({shape[1]}, DType::Float32, gpu);
      for (int step = 0; step < 3; ++step) batch_norm(x, rm, rv, {}, {}, true, 0.1, 1e-5, counter);
      batch_norm(x, rm, rv, {}, {}, false, 0.1, 1e-5, counter);
      EXPECT_EQ(counter.item<int64_t>(), 3) << shape_str(shape) << (channels_last ? " channels-last" : "");
    }
  }
  for (std::optional<double> momentum : {std::optional<double>(0.1), std::optional<double>()}) {
    auto bn = std::make_shared<nn::BatchNorm2d>(6, 1e-5, momentum);
    bn->to(gpu);
    Tensor x = randn({4, 6, 5, 5}, DType::Float32, gpu);
    for (int step = 0; step < 2; ++step) bn->forward(x);
    bn->eval();
    bn->forward(x);
    EXPECT_EQ(bn->num_batches_tracked.item<int64_t>(), 2) << (momentum ? "momentum 0.1" : "cumulative");
  }
}

}  // namespace
}  // namespace ember
