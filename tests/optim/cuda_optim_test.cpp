// The fused CUDA optimizer steps and clip_grad_norm_ against the CPU
// kernels, over hundreds of small tensors of odd sizes (several ChunkLists
// per step) plus tensors that span several 8K-element chunks, and the
// low-precision copies the float32 steps write for autocast.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "ember/core/allocator.h"
#include "ember/core/autocast_state.h"
#include "ember/core/cuda/graph.h"
#include "ember/optim/adam.h"
#include "ember/optim/clip_grad.h"
#include "ember/optim/sgd.h"
#include "ember/parallel/amp/autocast.h"
#include "support/cuda_compare.h"
#include "support/error_message.h"

namespace ember {
namespace {

using optim::Optimizer;

// 300 tensors: odd small sizes, an empty one, and two multi-chunk ones.
std::vector<Shape> shapes() {
  const int64_t sizes[] = {1, 7, 33, 3, 1023, 5, 1025, 2, 129, 11};
  std::vector<Shape> out;
  for (int i = 0; i < 298; ++i) out.push_back(i % 3 == 0 ? Shape{sizes[i % 10]} : Shape{sizes[i % 10], 3});
  out[17] = {0};
  out.push_back({65537});
  out.push_back({3, 70001});
  return out;
}

TensorList make_params(DType dtype, Device device) {
  NoGradGuard no_grad;
  TensorList ps;
  int k = 0;
  for (const Shape& s : shapes()) {
    Generator g(uint64_t(100 + k++));
    ps.push_back(randn(s, DType::Float32, kCPU, &g).to(dtype).to(device).set_requires_grad());
  }
  return ps;
}

// The same gradients on both devices: made on the CPU, then copied.
void set_grads(TensorList& cpu, TensorList& cuda, int step) {
  for (size_t k = 0; k < cpu.size(); ++k) {
    Generator g(uint64_t(7919 * step + k));
    Tensor grad = randn(cpu[k].shape(), DType::Float32, kCPU, &g).to(cpu[k].dtype());
    cpu[k].set_grad(grad);
    cuda[k].set_grad(grad.to(cuda[k].device()));
  }
}

using Make = std::function<std::unique_ptr<Optimizer>(const TensorList&)>;

struct Case {
  const char* name;
  Make make;
};

std::vector<Case> cases() {
  return {
      {"SGD nesterov+wd",
       [](const TensorList& ps) {
         return std::make_unique<optim::SGD>(
             ps, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
       }},
      {"SGD dampening",
       [](const TensorList& ps) {
         return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.05, .momentum = 0.5, .dampening = 0.3});
       }},
      {"SGD plain",
       [](const TensorList& ps) { return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1}); }},
      {"Adam amsgrad+L2",
       [](const TensorList& ps) {
         return std::make_unique<optim::Adam>(ps, optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
       }},
      {"AdamW",
       [](const TensorList& ps) { return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 0.01}); }},
  };
}

TEST(CudaOptim, FusedStepsMatchCpuOverManyTensors) {
  EMBER_REQUIRE_CUDA();
  for (const Case& c : cases()) {
    for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dtype));
      TensorList cpu = make_params(dtype, kCPU), cuda = make_params(dtype, cuda_device(0));
      auto opt_cpu = c.make(cpu), opt_cuda = c.make(cuda);
      for (int s = 0; s < 4; ++s) {
        set_grads(cpu, cuda, s);
        opt_cpu->step();
        set_allocation_poisoning(true);
        opt_cuda->step();
        set_allocation_poisoning(false);
      }
      for (size_t k = 0; k < cpu.size(); ++k) {
        ASSERT_TRUE(testing::tensors_close(cuda[k], cpu[k])) << "parameter " << k;
        for (const auto& [name, t] : opt_cpu->state(cpu[k])) {
          const Tensor& u = opt_cuda->state(cuda[k]).at(name);
          ASSERT_TRUE(u.is_cuda()) << name;
          ASSERT_TRUE(testing::tensors_close(u, t, testing::tolerance_for(dtype))) << "parameter " << k << " " << name;
        }
      }
    }
  }
}

// autocast's kept casts of float32 params are rewritten by the fused step
// in its own pass (FusedTensor::low_copy): after each step, over the many
// odd and multi-chunk tensors, each equals its param rounded to the half
// dtype, though poisoned before the step; the params match the CPU's.
TEST(CudaOptim, StepsRewriteAutocastsKeptCasts) {
  EMBER_REQUIRE_CUDA();
  const Device dev = cuda_device(0);
  for (const Case& c : cases()) {
    for (DType low : {DType::Float16, DType::BFloat16}) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(low));
      autocast_state::clear_cache();
      TensorList cpu = make_params(DType::Float32, kCPU), cuda = make_params(DType::Float32, dev);
      auto opt_cpu = c.make(cpu), opt_cuda = c.make(cuda);
      for (int s = 0; s < 3; ++s) {
        TensorList casts;
        {
          amp::autocast guard(DeviceType::CUDA, low);
          for (const Tensor& p : cuda) {
            casts.push_back(autocast_state::cast_without_history(p, autocast_state::CastPolicy::LowerPrecision));
          }
        }
        {
          NoGradGuard no_grad;
          for (Tensor& t : casts) t.fill_(std::nan(""));
        }
        set_grads(cpu, cuda, s);
        opt_cpu->step();
        opt_cuda->step();
        for (size_t k = 0; k < cuda.size(); ++k) {
          ASSERT_TRUE(autocast_state::fresh_kept_cast(cuda[k]).is_same(casts[k])) << "parameter " << k;
          ASSERT_TRUE(equal(casts[k].cpu(), cuda[k].detach().to(low).cpu())) << "parameter " << k;
        }
      }
      for (size_t k = 0; k < cpu.size(); ++k) ASSERT_TRUE(testing::tensors_close(cuda[k], cpu[k])) << k;
    }
  }
  autocast_state::clear_cache();
}

TEST(CudaOptim, FoundInfAndInvScaleOnTheDevice) {
  EMBER_REQUIRE_CUDA();
  const Device dev = cuda_device(0);
  for (DType dtype : {DType::Float32, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    TensorList cpu = make_params(dtype, kCPU), cuda = make_params(dtype, dev);
    optim::Adam opt_cpu(cpu, optim::AdamOptions{.lr = 0.01}), opt_cuda(cuda, optim::AdamOptions{.lr = 0.01});
    set_grads(cpu, cuda, 0);
    opt_cpu.step();
    opt_cuda.step();
    // A skipped step on the device: nothing moves, no counter advances.
    TensorList before;
    for (const Tensor& p : cuda) before.push_back(p.clone());
    Tensor found_inf = ones({1}, DType::Float32, dev), inv_scale = full({1}, 0.5, DType::Float32, dev);
    set_grads(cpu, cuda, 1);
    opt_cuda.step({found_inf, inv_scale});
    for (size_t k = 0; k < cuda.size(); ++k) {
      ASSERT_TRUE(equal(cuda[k].cpu(), before[k].cpu())) << k;
      ASSERT_EQ(opt_cuda.state(cuda[k]).at("step").item<int64_t>(), 1);
    }
    // Cleared: doubled grads with inv_scale 0.5 equal the CPU's plain step.
    found_inf.zero_();
    for (size_t k = 0; k < cuda.size(); ++k) cuda[k].set_grad(cpu[k].grad().to(dev) * 2.0);
    opt_cuda.step({found_inf, inv_scale});
    opt_cpu.step();
    for (size_t k = 0; k < cuda.size(); ++k) {
      ASSERT_TRUE(testing::tensors_close(cuda[k], cpu[k])) << k;
      ASSERT_EQ(opt_cuda.state(cuda[k]).at("step").item<int64_t>(), 2);
    }
  }
}

TEST(CudaOptim, ClipGradNormMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dtype : {DType::Float32, DType::Float16, DType::BFloat16, DType::Float64}) {
    for (double p : {2.0, 1.0, inf}) {
      SCOPED_TRACE(std::string(dtype_name(dtype)) + " p=" + std::to_string(p));
      TensorList cpu = make_params(dtype, kCPU), cuda = make_params(dtype, cuda_device(0));
      set_grads(cpu, cuda, 3);
      Tensor n_cpu = optim::clip_grad_norm_(cpu, 1.0, p);
      Tensor n_cuda = optim::clip_grad_norm_(cuda, 1.0, p);
      ASSERT_TRUE(n_cuda.is_cuda());
      // The norm sums thousands of squares in float32 in a device-specific
      // order (1.2e-5 relative seen on an H200 for bfloat16 gradients).
      const testing::Tolerance tol =
          dtype == DType::Float64 ? testing::Tolerance{1e-10, 1e-10} : testing::Tolerance{1e-4, 1e-4};
      ASSERT_TRUE(testing::tensors_close(n_cuda, n_cpu, tol));
      for (size_t k = 0; k < cpu.size(); ++k) ASSERT_TRUE(testing::tensors_close(cuda[k].grad(), cpu[k].grad())) << k;
    }
  }
}

// clip_grad_norm_ never waits for the device (the clip factor stays there),
// so a CUDA graph captures it: each replay computes the norm of the
// gradients the replay finds and clips by it, over gradients of two dtypes,
// both below and above max_norm. error_if_nonfinite reads the norm on the
// host, so it cannot be captured.
TEST(CudaOptim, ClipGradNormIsCapturedInAGraphWithoutAHostWait) {
  EMBER_REQUIRE_CUDA();
  const Device gpu = cuda_device(0);
  TensorList params;
  for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float32}) {
    params.push_back(zeros({1025}, dtype, gpu).set_requires_grad());
    params.back().set_grad(zeros({1025}, dtype, gpu));
  }
  auto grads_for = [&](double scale, int step) {
    TensorList out;
    for (size_t k = 0; k < params.size(); ++k) {
      Generator g(uint64_t(31 * step + k));
      out.push_back((randn({1025}, DType::Float32, kCPU, &g) * scale).to(params[k].dtype()));
    }
    return out;
  };
  Tensor norm;
  cuda::Graph graph(0);
  graph.capture([&] { norm = optim::clip_grad_norm_(params, 1.0); });
  ASSERT_TRUE(graph.captured());
  for (double scale : {1e-3, 1.0, 5.0}) {
    SCOPED_TRACE(scale);
    TensorList given = grads_for(scale, int(scale * 1000));
    TensorList cpu;
    for (size_t k = 0; k < params.size(); ++k) {
      params[k].grad().copy_(given[k].to(gpu));
      cpu.push_back(zeros({1025}, given[k].dtype()).set_requires_grad());
      cpu.back().set_grad(given[k].clone());
    }
    Tensor expected = optim::clip_grad_norm_(cpu, 1.0);
    graph.replay();
    ASSERT_TRUE(testing::tensors_close(norm, expected, {1e-5, 1e-6}));
    for (size_t k = 0; k < params.size(); ++k)
      ASSERT_TRUE(testing::tensors_close(params[k].grad(), cpu[k].grad())) << k;
  }
  cuda::Graph checked(0);
  EXPECT_TRUE(testing::throws_with([&] { checked.capture([&] { optim::clip_grad_norm_(params, 1.0, 2.0, true); }); },
                                   {"cannot run while a CUDA graph is captured"}));
}

}  // namespace
}  // namespace ember
