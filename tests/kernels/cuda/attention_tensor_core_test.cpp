// The tensor-core path of CUDA fused attention (ember/kernels/cuda/
// attention_tensor_core.h), forced on every call, against the CPU kernels
// through the stubs of ember/core/ops/attention_kernels.h: float16 and
// bfloat16, every head dim it takes, odd lengths, causal, bool and float
// masks, a fully blocked row, dropout, strided (fused QKV) and broadcast
// operands; the backward gets the CPU forward's out and logsumexp, so each
// direction is checked on its own. Outputs start as NaN, so an element a
// kernel forgot fails. Last, the error when the path is forced on a call it
// cannot take.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <optional>
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

// q, k, v [batch, heads, rows, dim] views and an optional 4-d mask view, made
// from base tensors by the same function on each device.
struct Operands {
  Tensor q, k, v, mask;
};
using MakeViews = std::function<Operands(const TensorList& bases)>;

struct Options {
  bool causal = false;
  double dropout_p = 0.0;
  GeneratorState dropout_state{1234, 56};
};

void set_rows(const Tensor& t, const void*& ptr, int64_t (&strides)[3]) {
  ptr = t.data_ptr();
  for (int d = 0; d < 3; ++d) strides[d] = t.strides()[d];
}
void set_rows(const Tensor& t, void*& ptr, int64_t (&strides)[3]) {
  ptr = t.data_ptr();
  for (int d = 0; d < 3; ++d) strides[d] = t.strides()[d];
}

AttentionArgs args_for(const Operands& in, const Options& opt) {
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
  if (in.mask.defined()) {
    a.mask = in.mask.data_ptr();
    a.mask_dtype = in.mask.dtype();
    for (int d = 0; d < 4; ++d) a.mask_strides[d] = in.mask.strides()[d];
  }
  a.causal = opt.causal;
  a.scale = 1.0 / std::sqrt(double(a.head_dim));
  a.dropout_p = opt.dropout_p;
  a.dropout_state = opt.dropout_state;
  return a;
}

struct Results {
  Tensor out, lse, grad_q, grad_k, grad_v;
};

// Forward on in's device into NaN-filled outputs; with `saved` (the CPU
// forward's results, moved to this device), also the backward of grad_out.
Results run(const Operands& in, const Options& opt, const Tensor& grad_out, const Results* saved) {
  const Device dev = in.q.device();
  const int64_t B = in.q.shape()[0], H = in.q.shape()[1], L = in.q.shape()[2], S = in.k.shape()[2];
  const int64_t E = in.q.shape()[3], Ev = in.v.shape()[3];
  AttentionArgs a = args_for(in, opt);
  Results r;
  r.out = full({B, H, L, Ev}, kNaN, in.q.dtype(), dev);
  r.lse = full({B, H, L}, kNaN, DType::Float32, dev);
  a.out = r.out.data_ptr();
  for (int d = 0; d < 3; ++d) a.out_strides[d] = r.out.strides()[d];
  a.logsumexp = r.lse.data_ptr();
  attention_forward_stub(dev.type)(a);
  if (saved == nullptr) return r;

  const Tensor out = saved->out.to(dev), lse = saved->lse.to(dev), go = grad_out.to(dev);
  set_rows(out, a.out, a.out_strides);
  a.logsumexp = lse.data_ptr();
  set_rows(go, a.grad_out, a.grad_out_strides);
  r.grad_q = full({B, H, L, E}, kNaN, in.q.dtype(), dev);
  r.grad_k = full({B, H, S, E}, kNaN, in.q.dtype(), dev);
  r.grad_v = full({B, H, S, Ev}, kNaN, in.q.dtype(), dev);
  set_rows(r.grad_q, a.grad_q, a.grad_q_strides);
  set_rows(r.grad_k, a.grad_k, a.grad_k_strides);
  set_rows(r.grad_v, a.grad_v, a.grad_v_strides);
  attention_backward_stub(dev.type)(a);
  return r;
}

Tolerance output_tolerance(DType dt) { return dt == DType::BFloat16 ? Tolerance{2e-2, 2e-2} : Tolerance{5e-3, 5e-3}; }

// Gradients sum many products of rounded probabilities and dS: compared with
// an absolute tolerance relative to the largest expected element.
Tolerance gradient_tolerance(DType dt, const Tensor& expected) {
  const double rel = dt == DType::BFloat16 ? 3e-2 : 1e-2;
  const double peak = expected.numel() ? amax(abs(expected.to(DType::Float32))).item<double>() : 0.0;
  return {rel, rel * std::max(peak, 1.0)};
}

// Runs the forward (and, with `backward`, the backward) with the tensor-core
// path forced on the CPU bases' views and on their CUDA copies, and compares.
::testing::AssertionResult tensor_cores_match_cpu(const TensorList& bases, const MakeViews& views, const Options& opt,
                                                  bool backward) {
  const Operands cpu = views(bases);
  TensorList cuda_bases;
  for (const Tensor& b : bases) cuda_bases.push_back(b.cuda());
  const Operands gpu = views(cuda_bases);
  const DType dt = cpu.q.dtype();
  Generator g(99);
  const Tensor grad_out =
      randn({cpu.q.shape()[0], cpu.q.shape()[1], cpu.q.shape()[2], cpu.v.shape()[3]}, DType::Float32, kCPU, &g).to(dt);

  const cuda::AttentionPath previous = cuda::force_attention_path(cuda::AttentionPath::TensorCore);
  Results expected, actual;
  try {
    expected = run(cpu, opt, grad_out, nullptr);
    if (backward) expected = run(cpu, opt, grad_out, &expected);
    actual = run(gpu, opt, grad_out, backward ? &expected : nullptr);
  } catch (...) {
    cuda::force_attention_path(previous);
    throw;
  }
  cuda::force_attention_path(previous);

  if (auto r = tensors_close(actual.out, expected.out, output_tolerance(dt)); !r) return r << " (out)";
  if (auto r = tensors_close(actual.lse, expected.lse, Tolerance{1e-4, 1e-3}); !r) return r << " (logsumexp)";
  if (!backward) return ::testing::AssertionSuccess();
  if (auto r = tensors_close(actual.grad_q, expected.grad_q, gradient_tolerance(dt, expected.grad_q)); !r) {
    return r << " (grad_q)";
  }
  if (auto r = tensors_close(actual.grad_k, expected.grad_k, gradient_tolerance(dt, expected.grad_k)); !r) {
    return r << " (grad_k)";
  }
  if (auto r = tensors_close(actual.grad_v, expected.grad_v, gradient_tolerance(dt, expected.grad_v)); !r) {
    return r << " (grad_v)";
  }
  return ::testing::AssertionSuccess();
}

Tensor normal(const Shape& shape, DType dt, uint64_t seed) {
  Generator g(seed);
  return randn(shape, DType::Float32, kCPU, &g).to(dt);
}

// Dense q [B, H, L, E], k and v [B, H, S, E].
TensorList dense_bases(DType dt, int64_t B, int64_t H, int64_t L, int64_t S, int64_t E, uint64_t seed) {
  return {normal({B, H, L, E}, dt, seed), normal({B, H, S, E}, dt, seed + 1), normal({B, H, S, E}, dt, seed + 2)};
}
Operands dense_views(const TensorList& b) { return {b[0], b[1], b[2], Tensor()}; }

const DType kHalfTypes[] = {DType::Float16, DType::BFloat16};
const int64_t kHeadDims[] = {32, 64, 96, 128};
struct Lengths {
  int64_t q, kv;
};
const Lengths kLengths[] = {{1, 1}, {17, 17}, {100, 257}, {257, 100}, {1, 300}};

TEST(CudaAttentionTensorCore, ForwardAndBackwardEveryHeadDimLengthAndCausal) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kHalfTypes) {
    for (int64_t E : kHeadDims) {
      for (const Lengths& n : kLengths) {
        for (bool causal : {false, true}) {
          Options opt;
          opt.causal = causal;
          EXPECT_TRUE(
              tensor_cores_match_cpu(dense_bases(dt, 2, 3, n.q, n.kv, E, uint64_t(E + n.q)), dense_views, opt, true))
              << dtype_name(dt) << " head_dim " << E << " L " << n.q << " S " << n.kv << " causal " << causal;
        }
      }
    }
  }
}

// head_dim 256 is forward-only (the backward's accumulators would spill).
TEST(CudaAttentionTensorCore, ForwardHeadDim256) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kHalfTypes) {
    for (const Lengths& n : kLengths) {
      for (bool causal : {false, true}) {
        Options opt;
        opt.causal = causal;
        EXPECT_TRUE(
            tensor_cores_match_cpu(dense_bases(dt, 1, 2, n.q, n.kv, 256, uint64_t(n.q)), dense_views, opt, false))
            << dtype_name(dt) << " L " << n.q << " S " << n.kv << " causal " << causal;
      }
    }
  }
}

TEST(CudaAttentionTensorCore, LongSequences) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kHalfTypes) {
    for (bool causal : {false, true}) {
      Options opt;
      opt.causal = causal;
      EXPECT_TRUE(tensor_cores_match_cpu(dense_bases(dt, 1, 1, 1000, 1000, 64, 7), dense_views, opt, true))
          << dtype_name(dt) << " causal " << causal;
    }
  }
}

// A key-padding bool mask [B, 1, 1, S] broadcast over heads and rows, with
// causal: row 0 of batch 1 keeps nothing (its only causal key is padded),
// so its logsumexp is -inf and its output and gradients zeros.
TEST(CudaAttentionTensorCore, KeyPaddingMaskAndFullyBlockedRow) {
  EMBER_REQUIRE_CUDA();
  const int64_t B = 2, H = 2, L = 70, S = 70, E = 64;
  for (DType dt : kHalfTypes) {
    Tensor keep = testing::random_values({B, 1, 1, S}, DType::Bool, 5);
    keep.data<bool>()[S] = false;  // batch 1, key 0
    TensorList bases = dense_bases(dt, B, H, L, S, E, 11);
    bases.push_back(keep);
    const MakeViews views = [&](const TensorList& b) { return Operands{b[0], b[1], b[2], b[3].expand({B, H, L, S})}; };
    for (bool causal : {false, true}) {
      Options opt;
      opt.causal = causal;
      EXPECT_TRUE(tensor_cores_match_cpu(bases, views, opt, true)) << dtype_name(dt) << " causal " << causal;
    }
  }
}

// A float mask of q's dtype over every position, added to the scores.
TEST(CudaAttentionTensorCore, FloatMask) {
  EMBER_REQUIRE_CUDA();
  const int64_t B = 1, H = 2, L = 90, S = 130, E = 32;
  for (DType dt : kHalfTypes) {
    TensorList bases = dense_bases(dt, B, H, L, S, E, 21);
    bases.push_back(normal({B, H, L, S}, dt, 25));
    const MakeViews views = [](const TensorList& b) { return Operands{b[0], b[1], b[2], b[3]}; };
    EXPECT_TRUE(tensor_cores_match_cpu(bases, views, Options{}, true)) << dtype_name(dt);
  }
}

// Dropout draws the same Philox numbers as the CPU kernels.
TEST(CudaAttentionTensorCore, Dropout) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kHalfTypes) {
    for (bool causal : {false, true}) {
      Options opt;
      opt.causal = causal;
      opt.dropout_p = 0.3;
      EXPECT_TRUE(tensor_cores_match_cpu(dense_bases(dt, 2, 2, 77, 131, 64, 31), dense_views, opt, true))
          << dtype_name(dt) << " causal " << causal;
    }
  }
}

// q, k, v as views of one fused projection [B, L, 3, H, E] (row stride
// 3 * H * E), and k, v broadcast over heads (head stride 0) from [B, 1, S, E].
TEST(CudaAttentionTensorCore, StridedAndBroadcastOperands) {
  EMBER_REQUIRE_CUDA();
  const int64_t B = 2, H = 3, L = 45, S = 45, E = 64;
  for (DType dt : kHalfTypes) {
    const MakeViews fused = [&](const TensorList& b) {
      const Tensor qkv = b[0];  // [B, L, 3, H, E]
      return Operands{qkv.select(2, 0).permute({0, 2, 1, 3}), qkv.select(2, 1).permute({0, 2, 1, 3}),
                      qkv.select(2, 2).permute({0, 2, 1, 3}), Tensor()};
    };
    for (bool causal : {false, true}) {
      Options opt;
      opt.causal = causal;
      EXPECT_TRUE(tensor_cores_match_cpu({normal({B, L, 3, H, E}, dt, 41)}, fused, opt, true))
          << dtype_name(dt) << " fused qkv, causal " << causal;
    }
    const MakeViews broadcast = [&](const TensorList& b) {
      return Operands{b[0], b[1].expand({B, H, S, E}), b[2].expand({B, H, S, E}), Tensor()};
    };
    const TensorList bases = {normal({B, H, L, E}, dt, 51), normal({B, 1, S, E}, dt, 52), normal({B, 1, S, E}, dt, 53)};
    EXPECT_TRUE(tensor_cores_match_cpu(bases, broadcast, Options{}, true)) << dtype_name(dt) << " broadcast k, v";
  }
}

// Forcing the path on a call it cannot take names the path, the shape and
// why; Auto then serves the same call.
TEST(CudaAttentionTensorCore, ForcedOnUnsupportedCallIsAnError) {
  EMBER_REQUIRE_CUDA();
  struct Unsupported {
    DType dtype;
    int64_t head_dim;
    bool misaligned;
    const char* why;
  };
  const Unsupported cases[] = {{DType::Float32, 64, false, "float16 and bfloat16"},
                               {DType::Float16, 80, false, "head_dim"},
                               {DType::BFloat16, 64, true, "16-byte aligned"}};
  for (const Unsupported& c : cases) {
    const int64_t L = 20, E = c.head_dim;
    // Misaligned: q starts one element into its storage.
    const Tensor storage = normal({2 * 3 * L * E + 1}, c.dtype, 61).cuda();
    const Tensor q = c.misaligned ? storage.narrow(0, 1, 2 * 3 * L * E).view({2, 3, L, E})
                                  : storage.narrow(0, 0, 2 * 3 * L * E).view({2, 3, L, E});
    const Operands in{q, normal({2, 3, L, E}, c.dtype, 62).cuda(), normal({2, 3, L, E}, c.dtype, 63).cuda(), Tensor()};
    const cuda::AttentionPath previous = cuda::force_attention_path(cuda::AttentionPath::TensorCore);
    EXPECT_TRUE(testing::throws_with(
        [&] { run(in, Options{}, Tensor(), nullptr); },
        {"tensor_core", "[2, 3, 20, " + std::to_string(E) + "]", dtype_name(c.dtype), c.why, "AttentionPath::Simt"}))
        << dtype_name(c.dtype) << " head_dim " << E;
    cuda::force_attention_path(cuda::AttentionPath::Auto);
    Results r = run(in, Options{}, Tensor(), nullptr);
    EXPECT_FALSE(std::isnan(amax(abs(r.out.to(DType::Float32))).item<double>())) << "Auto left NaN outputs";
    cuda::force_attention_path(previous);
  }
}

}  // namespace
}  // namespace ember

#endif  // EMBER_WITH_CUDA
