// Fused attention's CUDA kernels against its CPU kernels on the same inputs,
// called through attention_forward_stub / attention_backward_stub with
// AttentionArgs (no front-end in between): every float dtype; head dims 7 to
// 256 (each SIMT bucket, whole and partial; 16-byte and element loads);
// q_len and kv_len 1, 17, 33, 100, 257; causal; bool and float masks with
// broadcast strides and fully blocked rows; (B, T, H, E) views and
// misaligned ones; dropout with a fixed seed (the same keep pattern on both
// devices, the CUDA-graph offset shift read from device memory); both
// CUDA paths forced; and scaled_dot_product_attention end to end with its
// gradients. Outputs and gradients are allocated NaN-poisoned on
// CUDA, so an element a kernel forgets to write fails.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "ember/core/allocator.h"
#include "ember/core/cuda/caching_allocator.h"
#include "ember/core/cuda/device.h"
#include "ember/core/ops/attention_kernels.h"
#include "support/cuda_compare.h"
#include "support/error_message.h"

#if defined(EMBER_WITH_CUDA)
#include "ember/kernels/cuda/attention_path.h"
#endif

namespace ember {
namespace {

using testing::Tolerance;

enum class MaskKind { None, KeyPadding, BoolRows, FloatBroadcast };
enum class Layout { Contiguous, Bthe, Misaligned };

struct Case {
  DType dtype = DType::Float32;
  int64_t batch = 2, heads = 3, q_len = 17, kv_len = 17, head_dim = 32;
  bool causal = false;
  MaskKind mask = MaskKind::None;
  Layout layout = Layout::Contiguous;
  double dropout_p = 0.0;
  uint64_t offset_shift = 0;  // CUDA reads it from device memory
};

std::string describe(const Case& c) {
  std::ostringstream s;
  s << dtype_name(c.dtype) << " B " << c.batch << " H " << c.heads << " L " << c.q_len << " S " << c.kv_len << " E "
    << c.head_dim << (c.causal ? " causal" : "") << " mask " << int(c.mask) << " layout " << int(c.layout)
    << " dropout " << c.dropout_p << " shift " << c.offset_shift;
  return s.str();
}

constexpr uint64_t kSeed = 20261206, kOffset = 11;

// A [B, H, n, E] operand of random values in the case's layout on `device`
// (the same values on every device).
Tensor operand(const Case& c, int64_t n, uint64_t seed, Device device) {
  const int64_t B = c.batch, H = c.heads, E = c.head_dim;
  switch (c.layout) {
    case Layout::Contiguous: return testing::random_values({B, H, n, E}, c.dtype, seed).to(device);
    case Layout::Bthe: return testing::random_values({B, n, H, E}, c.dtype, seed).to(device).permute({0, 2, 1, 3});
    case Layout::Misaligned: return testing::random_values({B, H, n, E + 1}, c.dtype, seed).to(device).narrow(3, 1, E);
  }
  return {};
}

// An uninitialized [B, H, n, E] output in the case's layout.
Tensor output(const Case& c, int64_t n, Device device) {
  const int64_t B = c.batch, H = c.heads, E = c.head_dim;
  switch (c.layout) {
    case Layout::Contiguous: return empty({B, H, n, E}, c.dtype, device);
    case Layout::Bthe: return empty({B, n, H, E}, c.dtype, device).permute({0, 2, 1, 3});
    case Layout::Misaligned: return empty({B, H, n, E + 1}, c.dtype, device).narrow(3, 1, E);
  }
  return {};
}

// The case's mask on the CPU, viewed as [B, H, L, S] with 0 strides where it
// broadcasts. KeyPadding: [B, 1, 1, S], batch b keeps keys j < S - b, batch
// 1 none (fully blocked rows). BoolRows: [1, H, L, S], rows i % 5 == 2
// blocked. FloatBroadcast: [L, S] of the case's dtype, -inf at some
// positions and on all of row 3.
Tensor mask_of(const Case& c) {
  const int64_t B = c.batch, H = c.heads, L = c.q_len, S = c.kv_len;
  switch (c.mask) {
    case MaskKind::None: return {};
    case MaskKind::KeyPadding: {
      std::vector<bool> keep(size_t(B * S));
      for (int64_t b = 0; b < B; ++b)
        for (int64_t j = 0; j < S; ++j) keep[size_t(b * S + j)] = b != 1 && j < S - b;
      return from_vector(keep, {B, 1, 1, S}).expand({B, H, L, S});
    }
    case MaskKind::BoolRows: {
      std::vector<bool> keep(size_t(H * L * S));
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i)
          for (int64_t j = 0; j < S; ++j)
            keep[size_t((h * L + i) * S + j)] = (i * 31 + j * 17 + h * 7) % 3 != 0 && i % 5 != 2;
      return from_vector(keep, {1, H, L, S}).expand({B, H, L, S});
    }
    case MaskKind::FloatBroadcast: {
      std::vector<float> add(size_t(L * S));
      const float inf = std::numeric_limits<float>::infinity();
      for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < S; ++j)
          add[size_t(i * S + j)] = (i + 2 * j) % 7 == 0 || i == 3 ? -inf : float((i * 13 + j * 7) % 11) * 0.3f - 1.5f;
      return from_vector(add, {1, 1, L, S}).to(c.dtype).expand({B, H, L, S});
    }
  }
  return {};
}

// The inputs of one call on a device.
struct Operands {
  Device device;
  Tensor q, k, v, mask, grad_out, shift;
};

Operands operands(const Case& c, Device device) {
  Operands x{device};
  x.q = operand(c, c.q_len, 1, device);
  x.k = operand(c, c.kv_len, 2, device);
  x.v = operand(c, c.kv_len, 3, device);
  x.grad_out = operand(c, c.q_len, 4, device);
  Tensor m = mask_of(c);
  if (m.defined()) x.mask = m.to(device);
  if (device.is_cuda() && c.offset_shift != 0) {
    x.shift = from_vector<int64_t>({int64_t(c.offset_shift)}).to(device);
  }
  return x;
}

void strides_of(const Tensor& t, int64_t (&s)[3]) {
  for (int d = 0; d < 3; ++d) s[d] = t.stride(d);
}

AttentionArgs args_of(const Case& c, const Operands& x) {
  AttentionArgs a;
  a.device = x.device.index;
  a.dtype = c.dtype;
  a.batch = c.batch;
  a.heads = c.heads;
  a.q_len = c.q_len;
  a.kv_len = c.kv_len;
  a.head_dim = a.value_dim = c.head_dim;
  a.q = x.q.data_ptr();
  strides_of(x.q, a.q_strides);
  a.k = x.k.data_ptr();
  strides_of(x.k, a.k_strides);
  a.v = x.v.data_ptr();
  strides_of(x.v, a.v_strides);
  if (x.mask.defined()) {
    a.mask = x.mask.data_ptr();
    a.mask_dtype = x.mask.dtype();
    for (int d = 0; d < 4; ++d) a.mask_strides[d] = x.mask.stride(d);
  }
  a.causal = c.causal;
  a.scale = 1.0 / std::sqrt(double(c.head_dim));
  a.dropout_p = c.dropout_p;
  // The CPU has no device-side shift: its offset includes it.
  a.dropout_state = {kSeed, kOffset + (x.shift.defined() ? 0 : c.offset_shift)};
  if (x.shift.defined()) a.dropout_offset_shift = static_cast<const uint64_t*>(x.shift.data_ptr());
  return a;
}

struct Poisoned {
  explicit Poisoned(bool on) : on_(on) { set_allocation_poisoning(on_); }
  ~Poisoned() { set_allocation_poisoning(false); }
  bool on_;
};

struct Forward {
  Tensor out, logsumexp;  // on the CPU
};

Forward forward(const Case& c, const Operands& x) {
  Tensor out, lse;
  {
    Poisoned poison(x.device.is_cuda());
    out = output(c, c.q_len, x.device);
    lse = empty({c.batch, c.heads, c.q_len}, attention_stats_dtype(c.dtype), x.device);
  }
  AttentionArgs a = args_of(c, x);
  a.out = out.data_ptr();
  strides_of(out, a.out_strides);
  a.logsumexp = lse.data_ptr();
  attention_forward_stub(x.device.type)(a);
  return {out.cpu(), lse.cpu()};
}

struct Gradients {
  Tensor q, k, v;  // on the CPU
};

// Backward from the CPU forward's out and logsumexp on either device, so
// that only the backward kernels differ.
Gradients backward(const Case& c, const Operands& x, const Forward& f) {
  Tensor out = f.out.to(x.device), lse = f.logsumexp.to(x.device);
  Tensor gq, gk, gv;
  {
    Poisoned poison(x.device.is_cuda());
    gq = output(c, c.q_len, x.device);
    gk = output(c, c.kv_len, x.device);
    gv = output(c, c.kv_len, x.device);
  }
  AttentionArgs a = args_of(c, x);
  a.out = out.data_ptr();
  strides_of(out, a.out_strides);
  a.logsumexp = lse.data_ptr();
  a.grad_out = x.grad_out.data_ptr();
  strides_of(x.grad_out, a.grad_out_strides);
  a.grad_q = gq.data_ptr();
  strides_of(gq, a.grad_q_strides);
  a.grad_k = gk.data_ptr();
  strides_of(gk, a.grad_k_strides);
  a.grad_v = gv.data_ptr();
  strides_of(gv, a.grad_v_strides);
  attention_backward_stub(x.device.type)(a);
  return {gq.cpu(), gk.cpu(), gv.cpu()};
}

// Sums over up to 257 keys and 256 features are formed in another order on
// each device; the 16-bit types round once from float32 on both.
Tolerance simt_tolerance(DType dt) {
  switch (dt) {
    case DType::Float64: return {1e-9, 1e-9};
    case DType::Float32: return {1e-4, 1e-4};
    case DType::Float16: return {4e-3, 4e-3};
    default: return {2e-2, 2e-2};
  }
}

// The tensor-core path rounds P to the input dtype before P V (as
// FlashAttention does), and dS before dS K and dS^T Q.
Tolerance tensor_core_tolerance(DType dt) {
  return dt == DType::Float16 ? Tolerance{2e-2, 2e-2} : Tolerance{6e-2, 6e-2};
}

// Forward outputs, then (with grads) the gradients from the CPU forward's.
::testing::AssertionResult cuda_matches_cpu(const Case& c, Tolerance tol, bool grads = true) {
  Operands cpu = operands(c, kCPU), gpu = operands(c, cuda_device(0));
  Forward f_cpu = forward(c, cpu), f_gpu = forward(c, gpu);
  if (auto r = testing::tensors_close(f_gpu.out, f_cpu.out, tol); !r) return r << " (out)";
  Tolerance stats = c.dtype == DType::Float64 ? simt_tolerance(DType::Float64) : Tolerance{1e-4, 1e-4};
  if (auto r = testing::tensors_close(f_gpu.logsumexp, f_cpu.logsumexp, stats); !r) return r << " (logsumexp)";
  if (!grads) return ::testing::AssertionSuccess();
  Gradients g_cpu = backward(c, cpu, f_cpu), g_gpu = backward(c, gpu, f_cpu);
  if (auto r = testing::tensors_close(g_gpu.q, g_cpu.q, tol); !r) return r << " (grad_q)";
  if (auto r = testing::tensors_close(g_gpu.k, g_cpu.k, tol); !r) return r << " (grad_k)";
  if (auto r = testing::tensors_close(g_gpu.v, g_cpu.v, tol); !r) return r << " (grad_v)";
  return ::testing::AssertionSuccess();
}

#if defined(EMBER_WITH_CUDA)
class ForcedPath {
 public:
  explicit ForcedPath(cuda::AttentionPath path) : before_(cuda::force_attention_path(path)) {}
  ~ForcedPath() { cuda::force_attention_path(before_); }

 private:
  cuda::AttentionPath before_;
};

#endif

// The SIMT kernels, whatever the tensor-core path would take.
::testing::AssertionResult simt_matches_cpu(const Case& c) {
#if defined(EMBER_WITH_CUDA)
  ForcedPath simt(cuda::AttentionPath::Simt);
#endif
  return cuda_matches_cpu(c, simt_tolerance(c.dtype));
}

constexpr DType kFloatDtypes[] = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};

TEST(CudaAttention, EveryDtypeAndHeadDimMatchesTheCpu) {
  EMBER_REQUIRE_CUDA();
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {17, 100}, {257, 33}};
  for (DType dt : kFloatDtypes) {
    for (int64_t e : {7, 16, 32, 40, 64, 80, 128, 256}) {
      for (auto [l, s] : lengths) {
        Case c;
        c.dtype = dt;
        c.q_len = l;
        c.kv_len = s;
        c.head_dim = e;
        EXPECT_TRUE(simt_matches_cpu(c)) << describe(c);
      }
    }
  }
}

TEST(CudaAttention, LongKeysAndSingleQueries) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatDtypes) {
    for (auto [l, s] : {std::pair<int64_t, int64_t>{1, 257}, {100, 257}, {257, 1}, {33, 1000}}) {
      Case c;
      c.dtype = dt;
      c.batch = 1;
      c.q_len = l;
      c.kv_len = s;
      c.head_dim = 64;
      EXPECT_TRUE(simt_matches_cpu(c)) << describe(c);
    }
  }
}

TEST(CudaAttention, CausalMatchesTheCpu) {
  EMBER_REQUIRE_CUDA();
  // Top-left aligned: q_len > kv_len leaves later rows every key, q_len <
  // kv_len blocks the keys past each row.
  const std::pair<int64_t, int64_t> lengths[] = {{1, 1}, {17, 17}, {100, 257}, {257, 100}};
  for (DType dt : kFloatDtypes) {
    for (int64_t e : {16, 64, 80, 256}) {
      for (auto [l, s] : lengths) {
        Case c;
        c.dtype = dt;
        c.q_len = l;
        c.kv_len = s;
        c.head_dim = e;
        c.causal = true;
        EXPECT_TRUE(simt_matches_cpu(c)) << describe(c);
      }
    }
  }
}

TEST(CudaAttention, MasksWithBroadcastStridesMatchTheCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatDtypes) {
    for (MaskKind m : {MaskKind::KeyPadding, MaskKind::BoolRows, MaskKind::FloatBroadcast}) {
      for (bool causal : {false, true}) {
        for (auto [l, s] : {std::pair<int64_t, int64_t>{17, 100}, {100, 33}}) {
          Case c;
          c.dtype = dt;
          c.q_len = l;
          c.kv_len = s;
          c.head_dim = dt == DType::Float64 ? 40 : 64;
          c.mask = m;
          c.causal = causal;
          EXPECT_TRUE(simt_matches_cpu(c)) << describe(c);
        }
      }
    }
  }
}

TEST(CudaAttention, FullyBlockedRowsGiveZerosAndMinusInfinity) {
  EMBER_REQUIRE_CUDA();
  Case c;
  c.q_len = 9;
  c.kv_len = 21;
  c.mask = MaskKind::KeyPadding;  // batch 1 keeps no key
  Operands x = operands(c, cuda_device(0));
  Forward f = forward(c, x);
  Gradients g = backward(c, x, f);
  const Tensor zero_rows = zeros({c.heads, c.q_len, c.head_dim});
  EXPECT_TRUE(testing::tensors_close(f.out.select(0, 1), zero_rows, {0, 0}));
  EXPECT_TRUE(testing::tensors_close(f.logsumexp.select(0, 1),
                                     full({c.heads, c.q_len}, -std::numeric_limits<double>::infinity()), {0, 0}));
  EXPECT_TRUE(testing::tensors_close(g.q.select(0, 1), zero_rows, {0, 0}));
  EXPECT_TRUE(testing::tensors_close(g.k.select(0, 1), zeros({c.heads, c.kv_len, c.head_dim}), {0, 0}));
  EXPECT_TRUE(testing::tensors_close(g.v.select(0, 1), zeros({c.heads, c.kv_len, c.head_dim}), {0, 0}));
  // Batch 0 keeps every key: finite everywhere.
  EXPECT_TRUE(f.logsumexp.select(0, 0).abs().max().item<float>() < std::numeric_limits<float>::infinity());
}

TEST(CudaAttention, StridedAndMisalignedViewsMatchTheCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatDtypes) {
    for (Layout layout : {Layout::Bthe, Layout::Misaligned}) {
      for (int64_t e : {20, 40, 64, 128}) {
        Case c;
        c.dtype = dt;
        c.q_len = 33;
        c.kv_len = 65;
        c.head_dim = e;
        c.layout = layout;
        c.causal = e == 64;
        c.mask = e == 40 ? MaskKind::KeyPadding : MaskKind::None;
        EXPECT_TRUE(simt_matches_cpu(c)) << describe(c);
      }
    }
  }
}

TEST(CudaAttention, DropoutKeepsTheCpusPattern) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatDtypes) {
    for (uint64_t shift : {uint64_t(0), uint64_t(5)}) {
      for (bool causal : {false, true}) {
        Case c;
        c.dtype = dt;
        c.q_len = 37;
        c.kv_len = 70;
        c.head_dim = 32;
        c.causal = causal;
        c.mask = causal ? MaskKind::None : MaskKind::FloatBroadcast;
        c.dropout_p = 0.25;
        c.offset_shift = shift;
        EXPECT_TRUE(simt_matches_cpu(c)) << describe(c);
      }
    }
  }
  // Dropout does drop: the output differs from p = 0's.
  Case c;
  c.dropout_p = 0.25;
  Tensor dropped = forward(c, operands(c, cuda_device(0))).out;
  c.dropout_p = 0.0;
  Tensor kept = forward(c, operands(c, cuda_device(0))).out;
  EXPECT_FALSE(testing::tensors_close(dropped, kept, {1e-3, 1e-3}));
}

#if defined(EMBER_WITH_CUDA)

TEST(CudaAttention, EachPathMatchesTheCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    for (int64_t e : {32, 64, 96, 128, 256}) {
      // The tensor-core backward takes head_dim up to 128.
      const bool tensor_core_grads = e <= 128;
      for (bool causal : {false, true}) {
        Case c;
        c.dtype = dt;
        c.q_len = 100;
        c.kv_len = 129;
        c.head_dim = e;
        c.causal = causal;
        c.mask = causal ? MaskKind::None : MaskKind::KeyPadding;
        EXPECT_TRUE(simt_matches_cpu(c)) << "simt " << describe(c);
        {
          ForcedPath tensor_core(cuda::AttentionPath::TensorCore);
          EXPECT_TRUE(cuda_matches_cpu(c, tensor_core_tolerance(dt), tensor_core_grads))
              << "tensor_core " << describe(c);
        }
        c.dropout_p = 0.2;
        c.layout = Layout::Bthe;
        c.mask = causal ? MaskKind::FloatBroadcast : MaskKind::BoolRows;
        EXPECT_TRUE(simt_matches_cpu(c)) << "simt " << describe(c);
        {
          ForcedPath tensor_core(cuda::AttentionPath::TensorCore);
          EXPECT_TRUE(cuda_matches_cpu(c, tensor_core_tolerance(dt), tensor_core_grads))
              << "tensor_core " << describe(c);
        }
      }
    }
  }
}

TEST(CudaAttention, EachPathWritesASplitPackedProjectionsGradientsAsOneBlock) {
  // q, k, v as (B, H, T, E) views of the thirds of one (B, T, 3 H E)
  // projection (a GPT's split): every path writes their gradients into one
  // block with the projection's row stride (attention.cpp), which the split
  // returns as qkv's gradient without a copy; values as on the CPU.
  EMBER_REQUIRE_CUDA();
  const int64_t B = 2, T = 37, H = 3, E = 64;
  for (cuda::AttentionPath path : {cuda::AttentionPath::Auto, cuda::AttentionPath::Simt,
                                   cuda::AttentionPath::TensorCore, cuda::AttentionPath::Cudnn}) {
    ForcedPath forced(path);
    for (DType dt : {DType::BFloat16, DType::Float16}) {
      Tensor qkv = testing::random_values({B, T, 3 * H * E}, dt, 5).set_requires_grad();
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [&](const TensorList& in) {
            const TensorList parts = split(in[0], H * E, 2);
            TensorList h;
            for (const Tensor& p : parts) h.push_back(p.view({B, T, H, E}).transpose(1, 2));
            return TensorList{scaled_dot_product_attention(h[0], h[1], h[2], {}, 0.0, /*is_causal=*/true)};
          },
          {qkv}, /*grads=*/true, tensor_core_tolerance(dt)))
          << cuda::attention_path_name(path) << " " << dtype_name(dt);
    }
  }
}

#endif

TEST(CudaAttention, TheAutomaticPathMatchesTheCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatDtypes) {
    for (int64_t e : {64, 96, 100}) {
      Case c;
      c.dtype = dt;
      c.q_len = 50;
      c.kv_len = 70;
      c.head_dim = e;
      c.causal = true;
      const bool half = dt == DType::Float16 || dt == DType::BFloat16;
      EXPECT_TRUE(cuda_matches_cpu(c, half ? tensor_core_tolerance(dt) : simt_tolerance(dt))) << describe(c);
    }
  }
}

TEST(CudaAttention, TheOpMatchesTheCpuEndToEnd) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kFloatDtypes) {
    for (bool causal : {false, true}) {
      // (B, T, H, E) projections viewed as (B, H, T, E); a key-padding mask
      // [B, 1, 1, S] (batch 1 keeps no key) without causal.
      Tensor q = testing::random_values({2, 33, 3, 64}, dt, 1).set_requires_grad();
      Tensor k = testing::random_values({2, 50, 3, 64}, dt, 2).set_requires_grad();
      Tensor v = testing::random_values({2, 50, 3, 64}, dt, 3).set_requires_grad();
      Case c;
      c.q_len = 33;
      c.kv_len = 50;
      c.mask = MaskKind::KeyPadding;
      Tensor mask = mask_of(c).narrow(1, 0, 1).narrow(2, 0, 1).contiguous();
      const bool half = dt == DType::Float16 || dt == DType::BFloat16;
      EXPECT_TRUE(testing::cuda_matches_cpu(
          [&](const TensorList& in) {
            return TensorList{scaled_dot_product_attention(in[0].transpose(1, 2), in[1].transpose(1, 2),
                                                           in[2].transpose(1, 2), causal ? Tensor() : in[3], 0.0,
                                                           causal)};
          },
          {q, k, v, mask}, /*grads=*/true, half ? tensor_core_tolerance(dt) : simt_tolerance(dt)))
          << dtype_name(dt) << (causal ? " causal" : " key padding");
    }
  }
}

// A long sequence: forward and backward at T = 16384 (one head, bf16,
// causal) allocate O(T) beyond the inputs, never a (T, T) matrix (512 MiB
// in bf16), by the caching allocator's peak (a CUDA build's: the CPU-only
// build has no allocator statistics).
#if defined(EMBER_WITH_CUDA)
TEST(CudaAttention, LongSequenceAllocatesNoTByTMatrix) {
  EMBER_REQUIRE_CUDA();
  const int64_t T = 16384, E = 64;
  const Device gpu(DeviceType::CUDA, 0);
  Tensor q = testing::random_values({1, 1, T, E}, DType::BFloat16, 1).to(gpu).set_requires_grad();
  Tensor k = testing::random_values({1, 1, T, E}, DType::BFloat16, 2).to(gpu).set_requires_grad();
  Tensor v = testing::random_values({1, 1, T, E}, DType::BFloat16, 3).to(gpu).set_requires_grad();
  Tensor w = testing::random_values({1, 1, T, E}, DType::BFloat16, 4).to(gpu);
  cuda::synchronize();
  const size_t before = cuda::memory_allocated(0);
  cuda::reset_peak_memory_stats(0);
  Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true);
  (out.to(DType::Float32) * w.to(DType::Float32)).sum().backward();
  cuda::synchronize();
  const size_t growth = cuda::max_memory_allocated(0) - before;
  const size_t t_by_t = size_t(T) * size_t(T) * 2;
  EXPECT_LT(growth, size_t(64) << 20) << "peak growth " << growth << " bytes; a (T, T) bf16 matrix is " << t_by_t;
  ASSERT_TRUE(q.grad().defined() && k.grad().defined() && v.grad().defined());
  for (const Tensor& g : {q.grad(), k.grad(), v.grad()}) {
    const double total = g.to(DType::Float32).abs().sum().item<double>();
    EXPECT_TRUE(std::isfinite(total) && total > 0) << "gradient magnitude sum " << total;
  }
}
#endif

TEST(CudaAttention, HeadDimOver256IsAnError) {
  EMBER_REQUIRE_CUDA();
  Case c;
  c.q_len = c.kv_len = 4;
  c.head_dim = 300;
  Operands x = operands(c, cuda_device(0));
  EXPECT_TRUE(testing::throws_with([&] { forward(c, x); }, {"scaled_dot_product_attention", "head_dim", "300"}));
}

}  // namespace
}  // namespace ember
