// conv2d through cuDNN against the CPU im2col kernels: strides, padding,
// dilation, groups (depthwise too), 1x1, odd sizes, non-contiguous inputs,
// every float dtype, gradients of input, weight and bias, second-order
// gradients, the TF32 switch, and tensors whose addresses are only
// element-aligned (cuDNN plans are made per pointer alignment).
// Channels-last too: cuDNN's NHWC engines, with the input, the weight or
// both channels-last, outputs and gradients channels-last. Plans chosen by
// timing the candidates and by the heuristics alone, and the timed choice's
// log. Filters of few taps, whose weight gradients ember sums itself.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "support/cuda_compare.h"

namespace ember {
namespace {

struct Case {
  Shape x, w;
  Int2 stride, padding, dilation;
  int64_t groups;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {{2, 3, 17, 13}, {8, 3, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},
      {{3, 4, 15, 16}, {6, 4, 5, 3}, {2, 3}, {2, 0}, {1, 1}, 1},
      {{2, 6, 11, 12}, {6, 3, 3, 3}, {1, 2}, {1, 1}, {2, 3}, 2},
      {{2, 8, 9, 9}, {8, 1, 3, 3}, {2, 2}, {1, 1}, {1, 1}, 8},     // depthwise
      {{1, 4, 7, 5}, {12, 1, 3, 2}, {1, 1}, {1, 0}, {1, 1}, 4},    // depthwise, multiplier 3
      {{4, 16, 8, 8}, {32, 16, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},  // 1x1
      {{1, 1, 1, 1}, {3, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},     // one pixel, all padding around
  };
  return all;
}

testing::Tolerance conv_tolerance(DType dt) {
  switch (dt) {
    case DType::Float64: return {1e-10, 1e-10};
    case DType::Float32: return {1e-4, 1e-4};  // FMA math, sums in another order
    case DType::Float16: return {1e-2, 1e-2};
    default: return {4e-2, 4e-2};  // bfloat16
  }
}

TEST(CudaConv2d, ForwardAndBackwardMatchCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (size_t k = 0; k < cases().size(); ++k) {
      const Case& c = cases()[k];
      Generator g(k + 1);
      Tensor x = randn(c.x, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      Tensor w = (randn(c.w, DType::Float32, kCPU, &g) * 0.5).to(dt).set_requires_grad();
      Tensor b = randn({c.w[0]}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [&](const TensorList& in) {
            return TensorList{conv2d(in[0], in[1], in[2], c.stride, c.padding, c.dilation, c.groups)};
          },
          {x, w, b}, /*grads=*/true, conv_tolerance(dt)))
          << dtype_name(dt) << " case " << k;
    }
  }
}

TEST(CudaConv2d, NonContiguousInputsWithoutBias) {
  EMBER_REQUIRE_CUDA();
  Generator g(11);
  Tensor x = randn({2, 9, 10, 5}, DType::Float32, kCPU, &g).set_requires_grad();
  Tensor w = randn({3, 4, 2, 6}, DType::Float32, kCPU, &g).set_requires_grad();
  EXPECT_TRUE(testing::cuda_matches_cpu(
      [](const TensorList& in) {
        Tensor xv = in[0].permute({0, 3, 2, 1}).narrow(1, 1, 3);  // (2, 3, 10, 9), strided, offset
        Tensor wv = in[1].permute({3, 1, 0, 2}).narrow(1, 0, 3);  // (6, 3, 3, 2), strided
        return TensorList{conv2d(xv, wv, {}, {2, 1}, {1, 0})};
      },
      {x, w}, true, conv_tolerance(DType::Float32)));
}

TEST(CudaConv2d, SecondOrderGradientsMatchCpu) {
  EMBER_REQUIRE_CUDA();
  Generator g(12);
  Tensor x = randn({2, 4, 7, 6}, DType::Float64, kCPU, &g).set_requires_grad();
  Tensor w = randn({6, 2, 3, 3}, DType::Float64, kCPU, &g).set_requires_grad();
  Tensor b = randn({6}, DType::Float64, kCPU, &g).set_requires_grad();
  Tensor v = randn({2, 6, 4, 6}, DType::Float64, kCPU, &g);
  EXPECT_TRUE(testing::cuda_matches_cpu(
      [](const TensorList& in) {
        Tensor y = conv2d(in[0], in[1], in[2], {2, 1}, {1, 1}, {1, 1}, 2);
        // The first gradients with a graph; cuda_matches_cpu then runs
        // backward through them (the backward ops' own backward).
        TensorList d = autograd::grad({y}, {in[0], in[1], in[2]}, {in[3] * y}, true, true);
        return d;
      },
      {x, w, b, v}, true, conv_tolerance(DType::Float64)));
}

TEST(CudaConv2d, ElementAlignedViewsMatchCpu) {
  EMBER_REQUIRE_CUDA();
  // Contiguous views one element into a flat buffer: their addresses are
  // 2-byte aligned for the half types, 4 for float32, 8 for float64, where
  // fresh allocations are 256-byte aligned. The same shapes run first at
  // fresh addresses, so a plan made for aligned pointers is in the cache.
  Generator g(17);
  const Shape xs{2, 8, 9, 7}, ws{16, 8, 3, 3};
  const int64_t x_numel = 2 * 8 * 9 * 7, w_numel = 16 * 8 * 3 * 3;
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor x = randn({x_numel + 1}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
    Tensor w = (randn({w_numel + 1}, DType::Float32, kCPU, &g) * 0.3).to(dt).set_requires_grad();
    for (int64_t offset : {0, 1}) {
      auto fn = [&](const TensorList& in) {
        Tensor xv = in[0].narrow(0, offset, x_numel).view(xs);
        Tensor wv = in[1].narrow(0, offset, w_numel).view(ws);
        return TensorList{conv2d(xv, wv, {}, {1, 1}, {1, 1})};
      };
      EXPECT_TRUE(testing::cuda_matches_cpu(fn, {x, w}, true, conv_tolerance(dt)))
          << dtype_name(dt) << " offset " << offset;
    }
  }
}

TEST(CudaConv2d, Tf32OnlyWhenAllowed) {
  EMBER_REQUIRE_CUDA();
  // 1 + 2^-12 is a float32 but rounds to 1 in TF32 (10-bit mantissa). With
  // ones as weights every partial sum is exact in float32, so FMA math gives
  // k * (1 + 2^-12) (up to the transforms of Winograd/FFT algorithms, ~1e-6),
  // while TF32 would give k, 2.4e-4 less.
  Tensor x = full({2, 64, 12, 12}, 1.0 + 1.0 / 4096, DType::Float32);
  Tensor w = ones({32, 64, 3, 3}, DType::Float32);
  auto fn = [](const TensorList& in) { return TensorList{conv2d(in[0], in[1], {}, {1, 1}, {1, 1})}; };
  ASSERT_FALSE(allow_tf32());
  EXPECT_TRUE(testing::cuda_matches_cpu(fn, {x, w}, false, testing::Tolerance{2e-5, 0}));
  // Allowed, cuDNN may pick tensor cores: within TF32's rounding.
  set_allow_tf32(true);
  EXPECT_TRUE(testing::cuda_matches_cpu(fn, {x, w}, false, testing::Tolerance{1e-3, 1e-3}));
  set_allow_tf32(false);
}

TEST(CudaConv2d, ChannelsLastMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  // The cases above and the CNN's two layers (one input channel, then 32).
  std::vector<Case> cl_cases = cases();
  cl_cases.push_back({{5, 1, 28, 28}, {32, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1});
  cl_cases.push_back({{4, 32, 14, 14}, {64, 32, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1});
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (size_t k = 0; k < cl_cases.size(); ++k) {
      const Case& c = cl_cases[k];
      Generator g(k + 1);
      Tensor x = randn(c.x, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      Tensor w = (randn(c.w, DType::Float32, kCPU, &g) * 0.5).to(dt).set_requires_grad();
      Tensor b = randn({c.w[0]}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
      for (int which = 0; which < 3; ++which) {  // both channels-last, the input only, the weight only
        EXPECT_TRUE(testing::cuda_matches_cpu(
            [&](const TensorList& in) {
              Tensor xi = which != 2 ? in[0].to(cl) : in[0], wi = which != 1 ? in[1].to(cl) : in[1];
              Tensor y = conv2d(xi, wi, in[2], c.stride, c.padding, c.dilation, c.groups);
              // Channels-last out when either operand is (an (N, 1, 1, 1)
              // tensor never is), except float64 on CUDA (NCHW only).
              const bool cl_out = (xi.suggest_memory_format() == cl || wi.suggest_memory_format() == cl) &&
                                  !(dt == DType::Float64 && y.is_cuda());
              return TensorList{cl_out ? testing::channels_last_output(y) : y};
            },
            {x, w, b}, /*grads=*/true, conv_tolerance(dt)))
            << dtype_name(dt) << " case " << k << " layout " << which;
      }
    }
  }
}

TEST(CudaConv2d, ChannelsLastGradientsAreChannelsLast) {
  EMBER_REQUIRE_CUDA();
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  Tensor x = randn({2, 8, 9, 9}, DType::Float16, cuda_device(0)).to(cl).detach().set_requires_grad();
  Tensor w = randn({16, 8, 3, 3}, DType::Float16, cuda_device(0)).to(cl).detach().set_requires_grad();
  conv2d(x, w, {}, {1, 1}, {1, 1}).sum().backward();
  EXPECT_EQ(x.grad().strides(), x.strides());
  EXPECT_EQ(w.grad().strides(), w.strides());
}

// Filters of at most 27 taps (c_in / groups * kh * kw) take their weight and
// bias gradients from ember's own kernels (ember/kernels/cuda/conv_small_filter.h),
// not cuDNN: one-channel and RGB first layers, depthwise and grouped
// filters, a 1x1 over 16 channels, with strides, padding and dilation, more
// output channels than a block covers and not a multiple of it, and enough
// positions (the first case: the train_step CNN's first layer) that many
// blocks add partial sums; NCHW and channels-last, every float dtype
// (float64 stays NCHW on CUDA), outputs poisoned. Asked with the timed
// choice's log on, cuDNN plans the forward and backward-data of these
// shapes, never their backward-filter.
TEST(CudaConv2d, SmallFiltersWeightGradientsMatchTheCpu) {
  EMBER_REQUIRE_CUDA();
  const std::vector<Case> small = {
      {{64, 1, 28, 28}, {32, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 1},   // 9 taps, 50176 positions
      {{3, 3, 33, 31}, {40, 3, 3, 3}, {2, 2}, {1, 0}, {1, 1}, 1},    // RGB, 27 taps, 40 channels
      {{2, 48, 13, 15}, {48, 1, 3, 3}, {1, 2}, {2, 2}, {2, 2}, 48},  // depthwise, dilated
      {{2, 4, 9, 10}, {10, 2, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},     // grouped, 18 taps
      {{3, 16, 7, 9}, {33, 16, 1, 1}, {1, 1}, {0, 0}, {1, 1}, 1},    // 1x1 over 16 channels
      {{2, 1, 19, 17}, {5, 1, 5, 5}, {1, 1}, {2, 2}, {1, 1}, 1},     // 25 taps
      {{2, 2, 9, 10}, {10, 1, 3, 3}, {1, 1}, {1, 1}, {1, 1}, 2},     // a group's last chunk partial
      {{4, 4, 30, 30}, {12, 2, 2, 2}, {1, 1}, {0, 0}, {1, 1}, 2},    // 2 channels a group, 8 taps
  };
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  ASSERT_EQ(setenv("EMBER_CONV_AUTOTUNE_LOG", "1", 1), 0);
  ::testing::internal::CaptureStderr();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    for (MemoryFormat format : {MemoryFormat::Contiguous, cl}) {
      for (size_t k = 0; k < small.size(); ++k) {
        const Case& c = small[k];
        Generator g(100 + k);
        Tensor x = randn(c.x, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
        Tensor w = (randn(c.w, DType::Float32, kCPU, &g) * 0.5).to(dt).set_requires_grad();
        Tensor b = randn({c.w[0]}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
        EXPECT_TRUE(testing::cuda_matches_cpu(
            [&](const TensorList& in) {
              Tensor xi = in[0].contiguous(format), wi = in[1].contiguous(format);
              Tensor y = conv2d(xi, wi, in[2], c.stride, c.padding, c.dilation, c.groups);
              // (A one-channel input and weight are both layouts at once.)
              const bool cl_out = (xi.suggest_memory_format() == cl || wi.suggest_memory_format() == cl) &&
                                  !(dt == DType::Float64 && y.is_cuda());
              return TensorList{cl_out ? testing::channels_last_output(y) : y};
            },
            {x, w, b}, /*grads=*/true, conv_tolerance(dt)))
            << dtype_name(dt) << (format == cl ? " channels-last" : " nchw") << " case " << k;
      }
    }
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  unsetenv("EMBER_CONV_AUTOTUNE_LOG");
  if (conv_autotune()) {
    EXPECT_NE(log.find("ember conv autotune: forward"), std::string::npos) << log;
  }
  EXPECT_EQ(log.find("backward-filter"), std::string::npos) << log;
}

struct ConvAutotuneScope {
  explicit ConvAutotuneScope(bool on) : previous(conv_autotune()) { set_conv_autotune(on); }
  ~ConvAutotuneScope() { set_conv_autotune(previous); }
  bool previous;
};

// Plans chosen by timing cuDNN's candidates on the call's own tensors, or by
// the heuristics alone (each case a configuration no other test meets, so
// the choice is made here): the first call, made with the timed runs
// before it, matches the CPU, its output and (from a random gradient) its
// input gradients; a second call, which reuses the kept plans, gives the
// first call's output and gradients of ones, both calls with allocations
// poisoned. (Within tolerance, not bit for bit: some float32 engines, the
// heuristics' first among them, sum in an order that varies from call to
// call.)
TEST(CudaConv2d, TimedAndHeuristicPlanChoicesMatchTheCpu) {
  EMBER_REQUIRE_CUDA();
  int64_t n = 2;
  for (bool autotune : {true, false}) {
    ConvAutotuneScope scope(autotune);
    for (DType dt : {DType::Float32, DType::Float16, DType::BFloat16}) {
      for (MemoryFormat format : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
        ++n;  // a fresh configuration each case
        Generator g(static_cast<uint64_t>(n));
        Tensor x = randn({n, 16, 13, 11}, DType::Float32, kCPU, &g).to(dt).set_requires_grad();
        Tensor w = (randn({24, 16, 3, 3}, DType::Float32, kCPU, &g) * 0.3).to(dt).set_requires_grad();
        std::vector<TensorList> calls;  // each CUDA call's output and input gradients
        auto fn = [&](const TensorList& in) {
          Tensor y = conv2d(in[0].contiguous(format), in[1].contiguous(format), {}, {1, 1}, {1, 1});
          if (y.is_cuda()) {
            const Tensor gy = ones_like(y);
            TensorList grads = autograd::grad({y}, {in[0], in[1]}, {gy}, /*retain_graph=*/true);
            calls.push_back({y.detach().clone(), grads[0], grads[1]});
          }
          return TensorList{y};
        };
        const std::string what = std::string(dtype_name(dt)) +
                                 (format == MemoryFormat::ChannelsLast ? " channels-last" : " nchw") +
                                 (autotune ? ", timed" : ", heuristic");
        EXPECT_TRUE(testing::cuda_matches_cpu(fn, {x, w}, /*grads=*/true, conv_tolerance(dt))) << what;
        Tensor xg = x.detach().cuda().set_requires_grad(), wg = w.detach().cuda().set_requires_grad();
        {
          struct Poisoned {
            Poisoned() { set_allocation_poisoning(true); }
            ~Poisoned() { set_allocation_poisoning(false); }
          } poisoned;
          fn({xg, wg});
        }
        ASSERT_EQ(calls.size(), 2u) << what;
        for (size_t i = 0; i < 3; ++i) {
          EXPECT_TRUE(testing::tensors_close(calls[1][i], calls[0][i], conv_tolerance(dt)))
              << what << ", tensor " << i << ": the second call";
        }
      }
    }
  }
}

// EMBER_CONV_AUTOTUNE_LOG=1: a timed choice prints its configuration, its
// candidates' engines and times, and the engine kept.
TEST(CudaConv2d, TimedChoicesAreLoggedOnRequest) {
  EMBER_REQUIRE_CUDA();
  ConvAutotuneScope scope(true);
  // A configuration no other test meets, of a kind cuDNN has many plans for
  // (the CNN's second layer, channels-last float16, with another batch).
  const MemoryFormat cl = MemoryFormat::ChannelsLast;
  Tensor x = randn({3, 32, 14, 14}, DType::Float16, cuda_device(0)).contiguous(cl);
  Tensor w = randn({64, 32, 3, 3}, DType::Float16, cuda_device(0)).contiguous(cl);
  ASSERT_EQ(setenv("EMBER_CONV_AUTOTUNE_LOG", "1", 1), 0);
  ::testing::internal::CaptureStderr();
  conv2d(x, w, {}, {1, 1}, {1, 1});
  const std::string log = ::testing::internal::GetCapturedStderr();
  unsetenv("EMBER_CONV_AUTOTUNE_LOG");
  EXPECT_NE(log.find("ember conv autotune: forward, input [3, 32, 14, 14], weight [64, 32, 3, 3], output "
                     "[3, 64, 14, 14], float16 channels-last"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find("kept engine"), std::string::npos) << log;
  EXPECT_NE(log.find("candidates (engine: event ms / host ms for 3 runs)"), std::string::npos) << log;
}

}  // namespace
}  // namespace ember
