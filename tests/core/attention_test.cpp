// scaled_dot_product_attention, fused (ember/core/ops/attention.cpp and the
// CPU kernels): gradient checks, agreement with the composed form
// (nn::functional::scaled_dot_product_attention_with_weights) in values and
// gradients, dropout pinned to attention_dropout_keep, fully blocked rows,
// a long sequence, the half types, thread-count independence, the mask the
// backward reads staying alive, errors, and MultiheadAttention's two paths.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <limits>

#include "ember/core/cpu_allocator.h"
#include "ember/core/ops/attention.h"
#include "ember/core/ops/attention_kernels.h"
#include "ember/ember.h"
#include "support/error_message.h"
#include "support/gradcheck.h"
#include "support/stub_swap.h"

namespace ember {
namespace {

namespace F = nn::functional;
using testing::gradcheck;
using testing::random_leaf;
using testing::throws_with;
constexpr double kInf = std::numeric_limits<double>::infinity();

// One attention problem: shapes of query, key, value, an optional mask, and
// the flags. make_* builds float64 leaves (seeded) of those shapes.
struct Case {
  const char* name;
  Shape q, k, v;
  Shape mask;  // empty: none
  bool bool_mask = false;
  bool causal = false;
  bool transposed = false;  // q, k, v given as (B, T, H, E).transpose(1, 2)
};

// Float64 leaves of the case's shapes; for transposed cases, (B, T, H, E)
// leaves seen as (B, H, T, E).
TensorList make_inputs(const Case& c, uint64_t seed) {
  auto leaf = [&](const Shape& s, uint64_t k) {
    if (!c.transposed) return random_leaf(s, seed + k);
    return random_leaf({s[0], s[2], s[1], s[3]}, seed + k).detach().transpose(1, 2).set_requires_grad();
  };
  TensorList t = {leaf(c.q, 0), leaf(c.k, 1), leaf(c.v, 2)};
  if (!c.mask.empty()) {
    Generator g(seed + 3);
    Tensor r = rand(c.mask, DType::Float64, kCPU, &g);
    // bool: about a fifth blocked; floating: values in [-2, 0] with some -inf.
    t.push_back(c.bool_mask ? ge(r, 0.2) : where(lt(r, 0.1), -kInf, r * -2.0));
  }
  return t;
}

Tensor mask_of(const TensorList& t) { return t.size() > 3 ? t[3] : Tensor(); }

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {"plain", {2, 3, 5, 4}, {2, 3, 5, 4}, {2, 3, 5, 4}},
      {"causal", {1, 2, 6, 3}, {1, 2, 6, 3}, {1, 2, 6, 3}, {}, false, true},
      {"bool_mask", {2, 2, 4, 3}, {2, 2, 6, 3}, {2, 2, 6, 3}, {2, 1, 4, 6}, true},
      {"float_mask", {2, 2, 4, 3}, {2, 2, 6, 3}, {2, 2, 6, 3}, {4, 6}},
      {"l_ne_s_causal", {1, 1, 7, 3}, {1, 1, 4, 3}, {1, 1, 4, 3}, {}, false, true},
      {"e_ne_ev", {2, 4, 3}, {2, 6, 3}, {2, 6, 5}},
      {"broadcast", {2, 3, 4, 3}, {1, 3, 5, 3}, {2, 1, 5, 3}, {3, 1, 5}, true},
      {"rank2_and_rank5", {4, 3}, {2, 1, 2, 6, 3}, {6, 2}},
      {"transposed", {2, 3, 5, 4}, {2, 3, 6, 4}, {2, 3, 6, 4}, {}, false, true, true},
      {"blocks", {1, 1, 70, 3}, {1, 1, 130, 3}, {1, 1, 130, 2}, {70, 130}, true, true},
  };
  return all;
}

TEST(Attention, GradcheckFloat64) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    TensorList in = make_inputs(c, 11);
    EXPECT_TRUE(gradcheck(
        [&](const TensorList& t) { return scaled_dot_product_attention(t[0], t[1], t[2], mask_of(t), 0.0, c.causal); },
        in));
  }
}

TEST(Attention, GradcheckWithDropoutAndScale) {
  const Case c = cases()[2];
  TensorList in = make_inputs(c, 21);
  // Every evaluation draws the same mask: a fresh generator of one seed.
  EXPECT_TRUE(gradcheck(
      [&](const TensorList& t) {
        Generator g(99);
        return scaled_dot_product_attention(t[0], t[1], t[2], mask_of(t), 0.3, true, 0.7, &g);
      },
      in));
}

// Values and gradients (for a fixed output weighting) of fused and composed.
struct Result {
  Tensor out;
  TensorList grads;
};

Result run(const Case& c, DType dtype, bool fused, uint64_t seed = 5) {
  TensorList in = make_inputs(c, seed);
  TensorList x;
  for (size_t i = 0; i < 3; ++i) {
    Tensor leaf = c.transposed ? in[i].detach().transpose(1, 2).to(dtype).transpose(1, 2) : in[i].detach().to(dtype);
    x.push_back(leaf.set_requires_grad());
  }
  Tensor mask = mask_of(in);
  if (mask.defined() && mask.dtype() != DType::Bool) mask = mask.to(dtype);
  Tensor out = fused ? scaled_dot_product_attention(x[0], x[1], x[2], mask, 0.0, c.causal)
                     : F::scaled_dot_product_attention_with_weights(x[0], x[1], x[2], mask, 0.0, c.causal).first;
  Generator g(3);
  Tensor w = randn(out.shape(), dtype, kCPU, &g);
  TensorList grads = autograd::grad({out}, x, {w});
  return {out.detach(), grads};
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const char* what) {
  ASSERT_EQ(a.shape(), b.shape()) << what;
  Tensor d = abs(a.to(DType::Float64) - b.to(DType::Float64));
  double err = d.numel() ? d.max().item<double>() : 0.0;
  EXPECT_LE(err, tol) << what;
}

TEST(Attention, FusedMatchesComposedFloat32AndFloat64) {
  for (DType dtype : {DType::Float64, DType::Float32}) {
    const double tol = dtype == DType::Float64 ? 1e-12 : 2e-5;
    for (const Case& c : cases()) {
      SCOPED_TRACE(std::string(c.name) + " " + dtype_name(dtype));
      Result f = run(c, dtype, true), r = run(c, dtype, false);
      EXPECT_EQ(f.out.dtype(), dtype);
      expect_close(f.out, r.out, tol, "output");
      for (size_t i = 0; i < 3; ++i) expect_close(f.grads[i], r.grads[i], tol, "gradient");
    }
  }
}

TEST(Attention, TransposedInputsGiveATransposableOutput) {
  // (B, T, H, E) seen as (B, H, T, E): read in place, and the output is laid
  // out so that transposing it back to (B, T, H, Ev) is contiguous.
  Tensor q = randn({2, 5, 3, 4}).transpose(1, 2), k = randn({2, 6, 3, 4}).transpose(1, 2),
         v = randn({2, 6, 3, 4}).transpose(1, 2);
  Tensor out = scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 5, 4}));
  EXPECT_TRUE(out.transpose(1, 2).is_contiguous());
}

AttentionArgs g_seen_backward;  // the last backward call's arguments
void backward_spy(const AttentionArgs& a) {
  g_seen_backward = a;
  testing::StubSwap<AttentionKernelFn, &attention_backward_stub>::real()(a);
}

TEST(Attention, GradientsOfASplitPackedProjectionAreOneBlock) {
  // q, k and v as (B, H, T, E) views of thirds of one (B, T, 3 H E)
  // projection (a GPT's split), in any order: the kernel writes their
  // gradients into the thirds of one new block laid out as the projection,
  // so the way back through the transposes, the views and split's join
  // copies nothing (qkv's gradient is that block); and they equal the
  // composed form's. Inputs that are not such thirds (one tensor three
  // times) get gradients of their own.
  testing::StubSwap<AttentionKernelFn, &attention_backward_stub> swap(DeviceType::CPU, &backward_spy);
  const int64_t B = 2, T = 5, H = 3, E = 4;
  const int orders[][3] = {{0, 1, 2}, {2, 0, 1}, {0, 0, 0}};
  for (const auto& order : orders) {
    SCOPED_TRACE(std::to_string(order[0]) + std::to_string(order[1]) + std::to_string(order[2]));
    Tensor qkv = randn({B, T, 3 * H * E}, DType::Float64).set_requires_grad();
    const auto heads = [&](const Tensor& x) {
      const TensorList parts = split(x, H * E, 2);
      TensorList h;
      for (int i : order) h.push_back(parts[size_t(i)].view({B, T, H, E}).transpose(1, 2));
      return h;
    };
    const TensorList h = heads(qkv);
    Tensor out = scaled_dot_product_attention(h[0], h[1], h[2], {}, 0.0, true);
    const Tensor grad_out = randn(out.shape(), DType::Float64);
    const Tensor dqkv = autograd::grad({out}, {qkv}, {grad_out})[0];
    const bool packed = order[0] != order[1];
    const char* first = static_cast<const char*>(g_seen_backward.grad_q) - order[0] * H * E * sizeof(double);
    EXPECT_EQ(dqkv.data_ptr() == first, packed) << "qkv's gradient is (only) the block the kernel wrote";
    EXPECT_TRUE(dqkv.is_contiguous());
    Tensor ref_qkv = qkv.detach().set_requires_grad();
    const TensorList r = heads(ref_qkv);
    Tensor ref =
        detail::scaled_dot_product_attention_composed(r[0], r[1], r[2], {}, 0.0, true, std::nullopt, nullptr).first;
    EXPECT_TRUE(allclose(dqkv, autograd::grad({ref}, {ref_qkv}, {grad_out})[0], 1e-12, 1e-12));
  }
}

AttentionArgs g_seen;  // the last forward call's arguments
void spy(const AttentionArgs& a) {
  g_seen = a;
  testing::StubSwap<AttentionKernelFn, &attention_forward_stub>::real()(a);
}

TEST(Attention, ViewsReachTheKernelWithoutCopies) {
  // (B, T, H, E) projections seen as (B, H, T, E), with k and v broadcast
  // over the batch and the mask over batch and heads: strides, no copies.
  testing::StubSwap<AttentionKernelFn, &attention_forward_stub> swap(DeviceType::CPU, &spy);
  const int64_t B = 2, T = 5, H = 3, E = 4;
  Tensor q = randn({B, T, H, E}).transpose(1, 2), k = randn({1, T, H, E}).transpose(1, 2),
         v = randn({1, T, H, E}).transpose(1, 2);
  Tensor mask = ones({T, T}, DType::Bool);
  scaled_dot_product_attention(q, k, v, mask);
  EXPECT_EQ(g_seen.q, q.data_ptr());
  EXPECT_EQ(g_seen.k, k.data_ptr());
  EXPECT_EQ(g_seen.mask, mask.data_ptr());
  EXPECT_EQ((std::vector<int64_t>(g_seen.q_strides, g_seen.q_strides + 3)),
            (std::vector<int64_t>{T * H * E, E, H * E}));
  EXPECT_EQ((std::vector<int64_t>(g_seen.k_strides, g_seen.k_strides + 3)), (std::vector<int64_t>{0, E, H * E}));
  EXPECT_EQ((std::vector<int64_t>(g_seen.mask_strides, g_seen.mask_strides + 4)), (std::vector<int64_t>{0, 0, T, 1}));
  // Rank 5: the leading dims merge into the batch when their strides allow.
  Tensor q5 = randn({2, 3, 2, 4, 8});
  scaled_dot_product_attention(q5, q5, q5);
  EXPECT_EQ(g_seen.batch, 6);
  EXPECT_EQ(g_seen.heads, 2);
  EXPECT_EQ(g_seen.q, q5.data_ptr());
}

// The composed computation with dropout's keep mask built from
// attention_dropout_keep: pins what the kernels drop.
TEST(Attention, DropoutKeepsWhatAttentionDropoutKeepSays) {
  const int64_t B = 2, H = 2, L = 9, S = 70, E = 3;
  const double p = 0.4;
  Tensor q = random_leaf({B, H, L, E}, 1), k = random_leaf({B, H, S, E}, 2), v = random_leaf({B, H, S, E}, 3);
  Generator g(1234);
  const GeneratorState state = g.get_state();
  Tensor out = scaled_dot_product_attention(q, k, v, {}, p, true, std::nullopt, &g);
  EXPECT_EQ(g.get_state().offset, state.offset + attention_dropout_blocks(B, H, L, S));
  std::vector<double> keep(size_t(B * H * L * S));
  for (size_t i = 0; i < keep.size(); ++i) {
    keep[i] = attention_dropout_keep(state.seed, state.offset, i, float(p)) ? 1.0 / (1.0 - p) : 0.0;
  }
  Tensor z = from_vector(keep, {B, H, L, S});
  Tensor probs = F::scaled_dot_product_attention_with_weights(q, k, v, {}, 0.0, true).second;
  Tensor ref = matmul(probs * z, v);
  expect_close(out, ref, 1e-12, "output");
  Tensor w = randn(out.shape(), DType::Float64);
  TensorList gf = autograd::grad({out}, {q, k, v}, {w}), gr = autograd::grad({ref}, {q, k, v}, {w});
  for (size_t i = 0; i < 3; ++i) expect_close(gf[i], gr[i], 1e-12, "gradient");
  // about 1 - p kept
  double kept = 0;
  for (double e : keep) kept += e != 0.0;
  EXPECT_NEAR(kept / double(keep.size()), 1.0 - p, 0.05);
}

TEST(Attention, FullyBlockedRowsGiveZerosInBothPaths) {
  const int64_t L = 4, S = 5;
  Tensor keep = ones({L, S}, DType::Bool);
  keep.select(0, 1).fill_(false);
  Tensor additive = zeros({L, S}, DType::Float64);
  additive.select(0, 2).fill_(-kInf);
  for (const Tensor& mask : {keep, additive}) {
    for (bool fused : {true, false}) {
      SCOPED_TRACE(std::string(fused ? "fused " : "composed ") + dtype_name(mask.dtype()));
      Tensor q = random_leaf({2, L, 3}, 1), k = random_leaf({2, S, 3}, 2), v = random_leaf({2, S, 3}, 3);
      Tensor out = fused ? scaled_dot_product_attention(q, k, v, mask)
                         : F::scaled_dot_product_attention_with_weights(q, k, v, mask).first;
      out.sum().backward();
      const int64_t row = mask.dtype() == DType::Bool ? 1 : 2;
      EXPECT_TRUE(equal(out.select(1, row), zeros({2, 3}, DType::Float64)));
      EXPECT_TRUE(equal(q.grad().select(1, row), zeros({2, 3}, DType::Float64)));
      for (const Tensor& t : {out, q.grad(), k.grad(), v.grad()}) {
        EXPECT_TRUE(equal(t, t)) << "NaN in a result";  // NaN != NaN
      }
    }
  }
  // No key at all: every row is blocked.
  Tensor q = random_leaf({3, 2}), k = random_leaf({0, 2}), v = random_leaf({0, 4});
  Tensor out = scaled_dot_product_attention(q, k, v);
  EXPECT_TRUE(equal(out, zeros({3, 4}, DType::Float64)));
  out.sum().backward();
  EXPECT_TRUE(equal(q.grad(), zeros({3, 2}, DType::Float64)));
}

// ember has no CPU allocator statistics; the process's peak resident size
// stands in. It bounds the growth this test causes only when the process
// has not already peaked higher, so a run of this test alone
// (--gtest_filter=Attention.LongSequence*) is the meaningful one.
int64_t peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return int64_t(u.ru_maxrss) * 1024;
}

TEST(Attention, LongSequenceRunsWithoutAnLByLBuffer) {
  const int64_t T = 4096, E = 64;
  Generator g(8);
  Tensor q = randn({1, T, E}, DType::Float32, kCPU, &g).set_requires_grad();
  Tensor k = randn({1, T, E}, DType::Float32, kCPU, &g).set_requires_grad();
  Tensor v = randn({1, T, E}, DType::Float32, kCPU, &g).set_requires_grad();
  const int64_t before = peak_rss_bytes();
  Tensor out = scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  out.sum().backward();
  const int64_t grown = peak_rss_bytes() - before;
  EXPECT_LT(grown, T * T * 4 / 2) << "the peak grew by " << grown << " bytes; a (T, T) float32 matrix is " << T * T * 4;
  // The last rows against the composed form over all keys.
  const int64_t rows = 8;
  Tensor qs = q.detach().narrow(1, T - rows, rows);
  Tensor keep = ones({rows, T}, DType::Bool).tril(T - rows);  // causal for rows T - rows ...
  Tensor ref = F::scaled_dot_product_attention_with_weights(qs, k.detach(), v.detach(), keep).first;
  expect_close(out.detach().narrow(1, T - rows, rows), ref, 1e-5, "last rows");
  EXPECT_TRUE(equal(q.grad(), q.grad())) << "NaN in the gradient";
}

TEST(Attention, HalfTypesMatchFloat32) {
  const Case c = cases()[9];  // several blocks, bool mask, causal
  Result ref = run(c, DType::Float32, true);
  for (DType dtype : {DType::Float16, DType::BFloat16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const double tol = dtype == DType::Float16 ? 1e-2 : 5e-2;
    Result r = run(c, dtype, true);
    EXPECT_EQ(r.out.dtype(), dtype);
    expect_close(r.out, ref.out, tol, "output");
    for (size_t i = 0; i < 3; ++i) expect_close(r.grads[i], ref.grads[i], 2 * tol, "gradient");
  }
}

TEST(Attention, SameResultsAtAnyThreadCount) {
  const Case c = cases()[9];
  const int threads = get_num_threads();
  set_num_threads(1);
  Result one = run(c, DType::Float32, true);
  set_num_threads(3);
  Result three = run(c, DType::Float32, true);
  set_num_threads(threads);
  EXPECT_TRUE(equal(one.out, three.out));
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(equal(one.grads[i], three.grads[i]));
}

TEST(Attention, DoubleBackwardIsAClearError) {
  Tensor q = random_leaf({3, 2}, 1), k = random_leaf({4, 2}, 2), v = random_leaf({4, 2}, 3);
  Tensor out = scaled_dot_product_attention(q, k, v);
  EXPECT_TRUE(throws_with([&] { autograd::grad({out.sum()}, {q}, {}, true, true); },
                          {"scaled_dot_product_attention", "double backward", "with_weights"}));
}

TEST(Attention, AFloatMaskThatNeedsItsGradientGetsOne) {
  Tensor q = random_leaf({3, 2}, 1), k = random_leaf({4, 2}, 2), v = random_leaf({4, 2}, 3);
  Tensor mask = random_leaf({3, 4}, 4);
  EXPECT_TRUE(gradcheck([](const TensorList& t) { return scaled_dot_product_attention(t[0], t[1], t[2], t[3]); },
                        {q, k, v, mask}));
}

TEST(Attention, TheBackwardHoldsTheMaskItsKernelReads) {
  // A float64 mask for float32 inputs is converted to a copy only the op
  // holds. At 1 MiB it is a block of the CPU allocator's cache, which the
  // next request of its size would get if the copy were freed before the
  // backward: the poison below would then block every position.
  const int64_t T = 512;
  Generator g(11);
  TensorList x;
  for (int i = 0; i < 3; ++i) x.push_back(randn({T, 4}, DType::Float32, kCPU, &g).set_requires_grad());
  Tensor mask = rand({T, T}, DType::Float64, kCPU, &g) * -2.0;
  cpu_empty_cache();
  Tensor out = scaled_dot_product_attention(x[0], x[1], x[2], mask);
  Tensor poison = full({T, T}, -kInf, DType::Float32);
  TensorList fused = autograd::grad({out.sum()}, x);
  Tensor ref = F::scaled_dot_product_attention_with_weights(x[0], x[1], x[2], mask.to(DType::Float32)).first;
  TensorList composed = autograd::grad({ref.sum()}, x);
  for (size_t i = 0; i < 3; ++i) expect_close(fused[i], composed[i], 2e-5, "gradient");
}

TEST(Attention, ErrorsNameTheOpAndTheShapes) {
  Tensor q = randn({2, 4, 3}), k = randn({2, 5, 3}), v = randn({2, 5, 6});
  const char* op = "scaled_dot_product_attention";
  EXPECT_TRUE(throws_with([&] { scaled_dot_product_attention(randn({3}), k, v); }, {op, "[3]", "at least 2 dims"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scaled_dot_product_attention(q, randn({2, 5, 4}), v);
      },
      {op, "[2, 4, 3]", "[2, 5, 4]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scaled_dot_product_attention(q, k, randn({2, 6, 6}));
      },
      {op, "[2, 5, 3]", "[2, 6, 6]"}));
  EXPECT_TRUE(throws_with([&] { scaled_dot_product_attention(q, k.to(DType::Float64), v); },
                          {op, "key", "float64", "float32", ".to("}));
  EXPECT_TRUE(throws_with([&] { scaled_dot_product_attention(q, k, v, {}, 1.5); }, {op, "dropout_p", "1.5"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scaled_dot_product_attention(q, k, v, zeros({4, 5}, DType::Int64));
      },
      {op, "attn_mask", "int64"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scaled_dot_product_attention(q, k, v, ones({3, 5}, DType::Bool));
      },
      {op, "attn_mask", "[3, 5]", "(..., 4, 5)"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scaled_dot_product_attention(q, randn({3, 5, 3}), randn({3, 5, 6}));
      },
      {op, "[2]", "[3]"}));
  EXPECT_TRUE(throws_with(
      [&] {
        scaled_dot_product_attention(zeros({4, 3}, DType::Int64), k, v);
      },
      {op, "floating", "int64"}));
}

TEST(Attention, MultiheadAttentionForwardMatchesForwardWithWeights) {
  for (bool batch_first : {false, true}) {
    auto m = std::make_shared<nn::MultiheadAttention>(8, 2, 0.0, true, batch_first);
    m->to(DType::Float64);
    Tensor x = random_leaf({5, 3, 8}, 1), kv = random_leaf({6, 3, 8}, 2);
    nn::AttentionOptions opts;
    opts.key_padding_mask = zeros({3, 6}, DType::Bool);
    opts.key_padding_mask.select(1, 5).fill_(true);
    opts.attn_mask = zeros({5, 6}, DType::Bool);
    opts.attn_mask.select(0, 0).fill_(true);  // query 0 blocked from every key
    Tensor xi = batch_first ? x.transpose(0, 1) : x, kvi = batch_first ? kv.transpose(0, 1) : kv;
    Tensor fused = m->forward(xi, kvi, kvi, opts);
    auto [composed, weights] = m->forward_with_weights(xi, kvi, kvi, opts);
    EXPECT_EQ(weights.shape(), (Shape{3, 5, 6}));
    expect_close(fused, composed, 1e-12, "output");
    TensorList gf = autograd::grad({fused.sum()}, {x, kv, m->in_proj_weight}, {}, /*retain_graph=*/true);
    TensorList gc = autograd::grad({composed.sum()}, {x, kv, m->in_proj_weight});
    for (size_t i = 0; i < gf.size(); ++i) expect_close(gf[i], gc[i], 1e-12, "gradient");
  }
}

}  // namespace
}  // namespace ember
