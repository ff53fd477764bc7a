// cuDNN's fused attention route (ember/kernels/cuda/libraries/cudnn_attention.h),
// forced through force_attention_path, against the CPU kernels in float64
// on the same (float16/bfloat16-valued) inputs, through the stubs of
// ember/core/ops/attention_kernels.h: head dims 64 (contiguous operands and
// outputs) and 128 ((B, T, H, E) ones), and 40 and 80, which only this route
// of the fused ones takes; odd and unequal lengths (77, 1000, 100 x 257:
// kv_len not a multiple of 128 takes cuDNN's padding-mask workaround on
// cuDNN up to 9.15) and 256; causal or not. Outputs and gradients
// start as NaN, so an element the route forgot fails. Then: a forward by
// one route and the backward by the other agree with the CPU (the shared
// logsumexp contract); the backward gives the same bits twice; Auto's
// timed choice gives the CPU's results; forcing the route on a call it
// cannot take is an ember::Error that names the path, the shape, the dtype
// and why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>

#include "ember/core/ops/attention_kernels.h"
#include "support/cuda_compare.h"
#include "support/error_message.h"

#if defined(EMBER_WITH_CUDA)
#include "ember/kernels/cuda/attention_path.h"

namespace ember {
namespace {

using testing::tensors_close;
using testing::Tolerance;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Sets the path for a scope.
class ForcedPath {
 public:
  explicit ForcedPath(cuda::AttentionPath path) : before_(cuda::force_attention_path(path)) {}
  ~ForcedPath() { cuda::force_attention_path(before_); }
  ForcedPath(const ForcedPath&) = delete;
  ForcedPath& operator=(const ForcedPath&) = delete;

 private:
  cuda::AttentionPath before_;
};

enum class Layout { Contiguous, Bthe };

struct Case {
  DType dtype = DType::BFloat16;
  int64_t batch = 2, heads = 2, q_len = 77, kv_len = 77, head_dim = 64;
  bool causal = false;
  Layout layout = Layout::Contiguous;
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << dtype_name(c.dtype) << " B " << c.batch << " H " << c.heads << " L " << c.q_len << " S " << c.kv_len << " E "
    << c.head_dim << (c.causal ? " causal" : "") << (c.layout == Layout::Bthe ? " (B, T, H, E)" : " contiguous");
  return s.str();
}

// x [B, H, n, E] with the same values in `layout`.
Tensor in_layout(const Tensor& x, Layout layout) {
  if (layout == Layout::Contiguous) return x.contiguous();
  return x.permute({0, 2, 1, 3}).contiguous().permute({0, 2, 1, 3});
}

// A NaN-filled [B, H, n, E] output in `layout`.
Tensor nan_output(const Case& c, int64_t n, Device device) {
  if (c.layout == Layout::Contiguous) return full({c.batch, c.heads, n, c.head_dim}, kNaN, c.dtype, device);
  return full({c.batch, n, c.heads, c.head_dim}, kNaN, c.dtype, device).permute({0, 2, 1, 3});
}

template <typename Ptr>
void set_rows(const Tensor& t, Ptr& ptr, int64_t (&strides)[3]) {
  ptr = t.data_ptr();
  for (int d = 0; d < 3; ++d) strides[d] = t.strides()[d];
}

// One call's operands ([B, H, n, E] views) on one device.
struct Operands {
  Tensor q, k, v, grad_out;
};

struct Results {
  Tensor out, lse, grad_q, grad_k, grad_v;
};

AttentionArgs args_for(const Operands& in, bool causal) {
  AttentionArgs a;
  a.device = in.q.device().index;
  a.dtype = in.q.dtype();
  a.batch = in.q.shape()[0];
  a.heads = in.q.shape()[1];
  a.q_len = in.q.shape()[2];
  a.head_dim = in.q.shape()[3];
  a.kv_len = in.k.shape()[2];
  a.value_dim = in.v.shape()[3];
  set_rows(in.q, a.q, a.q_strides);
  set_rows(in.k, a.k, a.k_strides);
  set_rows(in.v, a.v, a.v_strides);
  a.causal = causal;
  a.scale = 1.0 / std::sqrt(double(a.head_dim));
  return a;
}

// out and logsumexp, written into NaN-filled tensors of the case's dtype
// (in's) and layout.
Results forward(const Case& c, const Operands& in) {
  const Device dev = in.q.device();
  AttentionArgs a = args_for(in, c.causal);
  Results r;
  r.out = nan_output(c, c.q_len, dev);
  r.lse = full({c.batch, c.heads, c.q_len}, kNaN, attention_stats_dtype(c.dtype), dev);
  set_rows(r.out, a.out, a.out_strides);
  a.logsumexp = r.lse.data_ptr();
  attention_forward_stub(dev.type)(a);
  return r;
}

// The gradients of the forward `saved` (out and logsumexp on in's device),
// written into NaN-filled tensors of the case's layout.
Results backward(const Case& c, const Operands& in, const Results& saved) {
  const Device dev = in.q.device();
  AttentionArgs a = args_for(in, c.causal);
  set_rows(saved.out, a.out, a.out_strides);
  a.logsumexp = saved.lse.data_ptr();
  set_rows(in.grad_out, a.grad_out, a.grad_out_strides);
  Results r = saved;
  r.grad_q = nan_output(c, c.q_len, dev);
  r.grad_k = nan_output(c, c.kv_len, dev);
  r.grad_v = nan_output(c, c.kv_len, dev);
  set_rows(r.grad_q, a.grad_q, a.grad_q_strides);
  set_rows(r.grad_k, a.grad_k, a.grad_k_strides);
  set_rows(r.grad_v, a.grad_v, a.grad_v_strides);
  attention_backward_stub(dev.type)(a);
  return r;
}

Tensor normal(const Shape& shape, DType dt, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::Float32, kCPU, &g).to(dt);
}

// The case's inputs on the CPU in its dtype, contiguous [B, H, n, E].
Operands cpu_inputs(const Case& c, uint64_t seed) {
  const int64_t B = c.batch, H = c.heads, E = c.head_dim;
  return {normal({B, H, c.q_len, E}, c.dtype, seed), normal({B, H, c.kv_len, E}, c.dtype, seed + 1),
          normal({B, H, c.kv_len, E}, c.dtype, seed + 2), normal({B, H, c.q_len, E}, c.dtype, seed + 3)};
}

Operands on(const Operands& x, Device device, DType dtype, Layout layout) {
  auto move = [&](const Tensor& t) { return in_layout(t.to(device, dtype), layout); };
  return {move(x.q), move(x.k), move(x.v), move(x.grad_out)};
}

// The CPU's float64 forward and backward of the inputs.
Results reference(const Case& c, const Operands& cpu) {
  Case c64 = c;
  c64.dtype = DType::Float64;
  c64.layout = Layout::Contiguous;
  const Operands in = on(cpu, kCPU, DType::Float64, Layout::Contiguous);
  return backward(c64, in, forward(c64, in));
}

// The CPU's forward results as the CUDA backward reads them: out in the
// case's dtype and layout, logsumexp float32.
Results saved_on_cuda(const Case& c, const Results& ref) {
  return {
      in_layout(ref.out.to(cuda_device(0), c.dtype), c.layout), ref.lse.to(cuda_device(0), DType::Float32), {}, {}, {}};
}

Tolerance output_tolerance(DType dt) { return dt == DType::BFloat16 ? Tolerance{2e-2, 2e-2} : Tolerance{5e-3, 5e-3}; }

// Gradients sum many products of rounded probabilities and dS: compared with
// an absolute tolerance relative to the largest expected element.
Tolerance gradient_tolerance(DType dt, const Tensor& expected) {
  const double rel = dt == DType::BFloat16 ? 3e-2 : 1e-2;
  const double peak = expected.numel() ? amax(abs(expected.to(DType::Float32))).item<double>() : 0.0;
  return {rel, rel * std::max(peak, 1.0)};
}

::testing::AssertionResult forward_close(const Results& actual, const Results& expected, DType dt) {
  if (auto r = tensors_close(actual.out, expected.out.to(dt), output_tolerance(dt)); !r) return r << " (out)";
  if (auto r = tensors_close(actual.lse, expected.lse.to(DType::Float32), Tolerance{1e-4, 1e-3}); !r) {
    return r << " (logsumexp)";
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult gradients_close(const Results& actual, const Results& expected, DType dt) {
  const std::pair<const Tensor*, const Tensor*> grads[] = {
      {&actual.grad_q, &expected.grad_q}, {&actual.grad_k, &expected.grad_k}, {&actual.grad_v, &expected.grad_v}};
  const char* names[] = {"grad_q", "grad_k", "grad_v"};
  for (int i = 0; i < 3; ++i) {
    const Tensor want = grads[i].second->to(dt);
    if (auto r = tensors_close(*grads[i].first, want, gradient_tolerance(dt, want)); !r)
      return r << " (" << names[i] << ")";
  }
  return ::testing::AssertionSuccess();
}

// The case with cuDNN forced on its forward and on its backward (the latter
// given the CPU's forward), each against the CPU in float64.
::testing::AssertionResult cudnn_matches_cpu(const Case& c, uint64_t seed) {
  const Operands cpu = cpu_inputs(c, seed);
  const Results expected = reference(c, cpu);
  const Operands gpu = on(cpu, cuda_device(0), c.dtype, c.layout);
  ForcedPath cudnn(cuda::AttentionPath::Cudnn);
  if (auto r = forward_close(forward(c, gpu), expected, c.dtype); !r) return r;
  return gradients_close(backward(c, gpu, saved_on_cuda(c, expected)), expected, c.dtype);
}

const DType kHalfTypes[] = {DType::Float16, DType::BFloat16};

// Each shape builds cuDNN plans whose kernels compile at run time, so the
// layouts alternate with the head dim rather than multiply the cases.
TEST(CudaCudnnAttention, MatchesFloat64CpuAcrossHeadDimsLengthsCausalAndLayouts) {
  EMBER_REQUIRE_CUDA();
  struct Lengths {
    int64_t batch, q, kv;
  };
  const Lengths lengths[] = {{2, 77, 77}, {2, 256, 256}, {2, 100, 257}, {1, 1000, 1000}};
  for (DType dt : kHalfTypes) {
    for (int64_t E : {64, 128}) {
      for (const Lengths& n : lengths) {
        for (bool causal : {false, true}) {
          const Case c{dt, n.batch, 2, n.q, n.kv, E, causal, E == 64 ? Layout::Contiguous : Layout::Bthe};
          EXPECT_TRUE(cudnn_matches_cpu(c, uint64_t(E + n.q))) << describe(c);
        }
      }
    }
  }
}

// Head dims the tensor-core path declines (it takes 32, 64, 96, 128).
TEST(CudaCudnnAttention, HeadDimsOnlyThisFusedRouteTakes) {
  EMBER_REQUIRE_CUDA();
  for (int64_t E : {40, 80}) {
    for (bool causal : {false, true}) {
      const Case c{DType::BFloat16, 2, 3, 130, 130, E, causal, Layout::Bthe};
      EXPECT_TRUE(cudnn_matches_cpu(c, uint64_t(E))) << describe(c);
    }
  }
}

// A forward by one fused route and the backward by the other: both read
// the same logsumexp contract, so the gradients match the CPU's either way.
TEST(CudaCudnnAttention, ForwardAndBackwardByDifferentRoutesAgree) {
  EMBER_REQUIRE_CUDA();
  const cuda::AttentionPath routes[][2] = {{cuda::AttentionPath::Cudnn, cuda::AttentionPath::TensorCore},
                                           {cuda::AttentionPath::TensorCore, cuda::AttentionPath::Cudnn}};
  for (DType dt : kHalfTypes) {
    for (bool causal : {false, true}) {
      const Case c{dt, 2, 3, 300, 300, 64, causal, Layout::Bthe};
      const Operands cpu = cpu_inputs(c, 71);
      const Results expected = reference(c, cpu);
      const Operands gpu = on(cpu, cuda_device(0), dt, c.layout);
      for (const auto& pair : routes) {
        Results saved;
        {
          ForcedPath first(pair[0]);
          saved = forward(c, gpu);
        }
        EXPECT_TRUE(forward_close(saved, expected, dt))
            << describe(c) << " forward " << cuda::attention_path_name(pair[0]);
        ForcedPath second(pair[1]);
        EXPECT_TRUE(gradients_close(backward(c, gpu, saved), expected, dt))
            << describe(c) << " forward " << cuda::attention_path_name(pair[0]) << ", backward "
            << cuda::attention_path_name(pair[1]);
      }
    }
  }
}

// The contract: deterministic where cuDNN has a deterministic engine whose
// workspace fits, as it should at this size.
TEST(CudaCudnnAttention, BackwardGivesTheSameBitsTwice) {
  EMBER_REQUIRE_CUDA();
  const Case c{DType::BFloat16, 2, 4, 1000, 1000, 64, true, Layout::Contiguous};
  const Operands cpu = cpu_inputs(c, 81);
  const Operands gpu = on(cpu, cuda_device(0), c.dtype, c.layout);
  ForcedPath cudnn(cuda::AttentionPath::Cudnn);
  const Results saved = forward(c, gpu);
  const Results first = backward(c, gpu, saved), second = backward(c, gpu, saved);
  const Tolerance exact{0.0, 0.0};
  EXPECT_TRUE(tensors_close(second.grad_q, first.grad_q, exact)) << "grad_q";
  EXPECT_TRUE(tensors_close(second.grad_k, first.grad_k, exact)) << "grad_k";
  EXPECT_TRUE(tensors_close(second.grad_v, first.grad_v, exact)) << "grad_v";
}

// Auto times both fused routes at a shape's first call and keeps the
// faster; the results (first call and later ones) are the CPU's.
TEST(CudaCudnnAttention, AutoChoiceMatchesCpu) {
  EMBER_REQUIRE_CUDA();
  ForcedPath automatic(cuda::AttentionPath::Auto);
  for (bool causal : {false, true}) {
    const Case c{DType::BFloat16, 2, 4, 512, 512, 64, causal, Layout::Bthe};
    const Operands cpu = cpu_inputs(c, 91);
    const Results expected = reference(c, cpu);
    const Operands gpu = on(cpu, cuda_device(0), c.dtype, c.layout);
    for (int call = 0; call < 2; ++call) {
      const Results saved = forward(c, gpu);
      EXPECT_TRUE(forward_close(saved, expected, c.dtype)) << describe(c) << " call " << call;
      EXPECT_TRUE(gradients_close(backward(c, gpu, saved), expected, c.dtype)) << describe(c) << " call " << call;
    }
  }
}

// Forcing the route on a call it cannot take names the path, the shape, the
// dtype and why.
TEST(CudaCudnnAttention, ForcedOnUnsupportedCallIsAnError) {
  EMBER_REQUIRE_CUDA();
  const int64_t B = 2, H = 3, L = 20, E = 64;
  ForcedPath cudnn(cuda::AttentionPath::Cudnn);
  {  // a bool mask
    const Case c{DType::BFloat16, B, H, L, L, E, false, Layout::Contiguous};
    const Operands gpu = on(cpu_inputs(c, 101), cuda_device(0), c.dtype, c.layout);
    const Tensor keep = full({B, H, L, L}, 1.0, DType::Bool, cuda_device(0));
    const Tensor out = nan_output(c, L, cuda_device(0));
    const Tensor lse = full({B, H, L}, kNaN, DType::Float32, cuda_device(0));
    AttentionArgs a = args_for(gpu, false);
    set_rows(out, a.out, a.out_strides);
    a.logsumexp = lse.data_ptr();
    a.mask = keep.data_ptr();
    a.mask_dtype = DType::Bool;
    for (int d = 0; d < 4; ++d) a.mask_strides[d] = keep.strides()[d];
    EXPECT_TRUE(testing::throws_with([&] { attention_forward_stub(DeviceType::CUDA)(a); },
                                     {"'cudnn'", "[2, 3, 20, 64]", "bfloat16", "mask", "AttentionPath::TensorCore"}));
  }
  {  // float32
    const Case c{DType::Float32, B, H, L, L, E, false, Layout::Contiguous};
    const Operands gpu = on(cpu_inputs(c, 102), cuda_device(0), c.dtype, c.layout);
    EXPECT_TRUE(testing::throws_with([&] { forward(c, gpu); },
                                     {"'cudnn'", "[2, 3, 20, 64]", "float32", "float16 and bfloat16"}));
  }
  {  // head_dim not a multiple of 8
    const Case c{DType::Float16, B, H, L, L, 36, false, Layout::Contiguous};
    const Operands gpu = on(cpu_inputs(c, 103), cuda_device(0), c.dtype, c.layout);
    EXPECT_TRUE(
        testing::throws_with([&] { forward(c, gpu); }, {"'cudnn'", "[2, 3, 20, 36]", "float16", "multiple of 8"}));
  }
}

}  // namespace
}  // namespace ember

#endif  // EMBER_WITH_CUDA
