// nn::MultiheadAttention and functional::scaled_dot_product_attention:
// values against a hand-written per-head loop reference, masks, the causal
// mask blocking the future, layouts, gradients, errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/ember.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

using ::testing::HasSubstr;
constexpr double kInf = std::numeric_limits<double>::infinity();

// Scores to add for (batch n, head h, query i, key j).
using MaskFn = std::function<double(int64_t, int64_t, int64_t, int64_t)>;

struct Reference {
  std::vector<double> out;      // (N, L, E)
  std::vector<double> weights;  // (N, L, S), averaged over heads
};

// Multi-head attention by plain loops over batch-first (N, len, E) data.
Reference reference(const nn::MultiheadAttention& m, const Tensor& q_bf, const Tensor& k_bf, const Tensor& v_bf,
                    const MaskFn& mask) {
  const int64_t N = q_bf.size(0), L = q_bf.size(1), S = k_bf.size(1), E = m.embed_dim, H = m.num_heads, D = E / H;
  std::vector<double> q = to_vector<double>(q_bf), k = to_vector<double>(k_bf), v = to_vector<double>(v_bf);
  std::vector<double> W = to_vector<double>(m.in_proj_weight), b = to_vector<double>(m.in_proj_bias);
  std::vector<double> Wo = to_vector<double>(m.out_proj->weight), bo = to_vector<double>(m.out_proj->bias);
  // row r of (x W_block^T + b_block), for block 0 (q), 1 (k), 2 (v)
  auto proj = [&](const std::vector<double>& x, int64_t row, int64_t block, int64_t f) {
    double s = b[block * E + f];
    for (int64_t e = 0; e < E; ++e) s += x[row * E + e] * W[(block * E + f) * E + e];
    return s;
  };
  Reference r{std::vector<double>(N * L * E, 0.0), std::vector<double>(N * L * S, 0.0)};
  for (int64_t n = 0; n < N; ++n) {
    std::vector<double> concat(L * E, 0.0);
    for (int64_t h = 0; h < H; ++h) {
      for (int64_t i = 0; i < L; ++i) {
        std::vector<double> p(S);
        double mx = -kInf;
        for (int64_t j = 0; j < S; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) {
            dot += proj(q, n * L + i, 0, h * D + d) * proj(k, n * S + j, 1, h * D + d);
          }
          p[j] = dot / std::sqrt(double(D)) + mask(n, h, i, j);
          mx = std::max(mx, p[j]);
        }
        double z = 0;
        for (double& x : p) z += (x = std::exp(x - mx));
        for (int64_t j = 0; j < S; ++j) {
          p[j] /= z;
          r.weights[(n * L + i) * S + j] += p[j] / double(H);
          for (int64_t d = 0; d < D; ++d) concat[i * E + h * D + d] += p[j] * proj(v, n * S + j, 2, h * D + d);
        }
      }
    }
    for (int64_t i = 0; i < L; ++i) {
      for (int64_t o = 0; o < E; ++o) {
        double s = bo[o];
        for (int64_t e = 0; e < E; ++e) s += concat[i * E + e] * Wo[o * E + e];
        r.out[(n * L + i) * E + o] = s;
      }
    }
  }
  return r;
}

void expect_close(const std::vector<double>& a, const std::vector<double>& b, double tol = 1e-10) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << "at " << i;
}

std::shared_ptr<nn::MultiheadAttention> make_mha(int64_t E, int64_t H, bool batch_first = false) {
  manual_seed(17);
  auto m = std::make_shared<nn::MultiheadAttention>(E, H, 0.0, true, batch_first);
  m->to(DType::Float64);
  // Non-zero biases, so the reference checks where they go.
  nn::init::uniform_(m->in_proj_bias, -0.5, 0.5);
  nn::init::uniform_(m->out_proj->bias, -0.5, 0.5);
  return m;
}

const MaskFn kNoMask = [](int64_t, int64_t, int64_t, int64_t) { return 0.0; };

TEST(NnAttention, MatchesPerHeadReferenceInBothLayouts) {
  auto m = make_mha(6, 2);
  Generator g(1);
  Tensor q = randn({2, 3, 6}, DType::Float64, kCPU, &g), k = randn({2, 4, 6}, DType::Float64, kCPU, &g),
         v = randn({2, 4, 6}, DType::Float64, kCPU, &g);  // batch-first data
  Reference ref = reference(*m, q, k, v, kNoMask);
  auto [out, w] = m->forward_with_weights(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1));
  ASSERT_EQ(out.shape(), (Shape{3, 2, 6}));
  ASSERT_EQ(w.shape(), (Shape{2, 3, 4}));
  expect_close(to_vector<double>(out.transpose(0, 1)), ref.out);
  expect_close(to_vector<double>(w), ref.weights);

  auto bf = std::make_shared<nn::MultiheadAttention>(6, 2, 0.0, true, true);
  bf->to(DType::Float64);
  bf->load_state_dict(m->state_dict());
  expect_close(to_vector<double>((*bf)(q, k, v)), ref.out);
  auto per_head = bf->forward_with_weights(q, k, v, {.average_attn_weights = false}).second;
  EXPECT_EQ(per_head.shape(), (Shape{2, 2, 3, 4}));
  expect_close(to_vector<double>(per_head.mean({1})), ref.weights);

  // Unbatched (L, E) input equals a batch of one.
  Tensor one = (*bf)(q[1], k[1], v[1]);
  EXPECT_EQ(one.shape(), (Shape{3, 6}));
  expect_close(to_vector<double>(one), std::vector<double>(ref.out.begin() + 18, ref.out.end()));
}

TEST(NnAttention, MasksMatchTheReference) {
  auto m = make_mha(4, 2, true);
  Generator g(2);
  const int64_t N = 2, T = 4, H = 2;
  Tensor x = randn({N, T, 4}, DType::Float64, kCPU, &g);
  // Bool attn_mask (T, T): true blocks; block key 0 for query 2 and key 3 for query 0.
  std::vector<bool> blocked(T * T, false);
  blocked[2 * T + 0] = true;
  blocked[0 * T + 3] = true;
  std::vector<int64_t> flat;
  for (bool b : blocked) flat.push_back(b);
  Tensor bool_mask = ne(from_vector<int64_t>(flat, {T, T}), 0);
  // key_padding_mask (N, T): the last key of batch 1 is padding.
  Tensor padding = ne(from_vector<int64_t>({0, 0, 0, 0, 0, 0, 0, 1}, {N, T}), 0);
  // A float per-(batch, head) mask (N * H, T, T).
  Tensor float_mask = randn({N * H, T, T}, DType::Float64, kCPU, &g);
  std::vector<double> fm = to_vector<double>(float_mask);

  MaskFn combined = [&](int64_t n, int64_t h, int64_t i, int64_t j) {
    double add = fm[((n * H + h) * T + i) * T + j];
    if (blocked[i * T + j] || (n == 1 && j == 3) || j > i) add = -kInf;
    return add;
  };
  Reference ref = reference(*m, x, x, x, combined);
  // The bool and float attn_masks are combined here by passing the float
  // one and folding the bool one into it.
  Tensor folded = float_mask + where(bool_mask, -kInf, zeros({}, DType::Float64));
  auto [out, w] =
      m->forward_with_weights(x, x, x, {.attn_mask = folded, .key_padding_mask = padding, .is_causal = true});
  expect_close(to_vector<double>(out), ref.out);
  expect_close(to_vector<double>(w), ref.weights);

  // The bool attn_mask alone.
  MaskFn only_bool = [&](int64_t, int64_t, int64_t i, int64_t j) { return blocked[i * T + j] ? -kInf : 0.0; };
  expect_close(to_vector<double>((*m)(x, x, x, {.attn_mask = bool_mask})), reference(*m, x, x, x, only_bool).out);
}

TEST(NnAttention, CausalMaskBlocksTheFuture) {
  auto m = make_mha(4, 2);
  Generator g(3);
  const int64_t T = 5;
  Tensor x = randn({T, 2, 4}, DType::Float64, kCPU, &g);
  Tensor y = (*m)(x, x, x, {.is_causal = true});
  for (int64_t t = 0; t + 1 < T; ++t) {
    Tensor changed = x.clone();
    {
      NoGradGuard no_grad;
      changed.narrow(0, t + 1, T - t - 1).copy_(randn({T - t - 1, 2, 4}, DType::Float64, kCPU, &g));
    }
    Tensor y2 = (*m)(changed, changed, changed, {.is_causal = true});
    EXPECT_TRUE(equal(y2.narrow(0, 0, t + 1), y.narrow(0, 0, t + 1))) << "t = " << t;
    EXPECT_FALSE(allclose(y2.narrow(0, t + 1, 1), y.narrow(0, t + 1, 1))) << "t = " << t;
  }
  // Without the mask the past does see the future.
  Tensor changed = x.clone();
  {
    NoGradGuard no_grad;
    changed.narrow(0, T - 1, 1).fill_(3.0);
  }
  EXPECT_FALSE(allclose((*m)(changed, changed, changed).narrow(0, 0, 1), (*m)(x, x, x).narrow(0, 0, 1)));
}

TEST(NnAttention, Gradcheck) {
  auto m = make_mha(4, 2);
  Tensor q = testing::random_leaf({2, 1, 4}, 1), kv = testing::random_leaf({3, 1, 4}, 2);
  TensorList inputs{q, kv};
  for (const Tensor& p : m->parameters()) inputs.push_back(p);
  EXPECT_TRUE(testing::gradcheck([&](const TensorList& in) { return (*m)(in[0], in[1], in[1] * 0.5); }, inputs));
  Tensor x = testing::random_leaf({4, 3}, 3);  // transposed: (3, 4), unbatched
  EXPECT_TRUE(testing::gradcheck(
      [&](const TensorList& in) { return (*m)(in[0].t(), in[0].t(), in[0].t(), {.is_causal = true}); }, {x}));
}

TEST(NnAttention, DropoutOnlyInTraining) {
  auto m = std::make_shared<nn::MultiheadAttention>(8, 2, 0.5);
  Tensor x = randn({6, 2, 8});
  EXPECT_FALSE(equal((*m)(x, x, x), (*m)(x, x, x)));
  m->eval();
  EXPECT_TRUE(equal((*m)(x, x, x), (*m)(x, x, x)));
}

TEST(NnAttention, ParametersInitErrorsAndPrinting) {
  auto m = std::make_shared<nn::MultiheadAttention>(8, 2);
  EXPECT_EQ(m->named_parameters().keys(),
            (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(to_vector<float>(m->in_proj_bias), std::vector<float>(24, 0.0f));
  EXPECT_EQ(to_vector<float>(m->out_proj->bias), std::vector<float>(8, 0.0f));
  double bound = std::sqrt(6.0 / (8 + 24));  // xavier_uniform_ on (3E, E)
  for (float w : to_vector<float>(m->in_proj_weight)) EXPECT_LE(std::fabs(w), bound);
  EXPECT_EQ(nn::MultiheadAttention(8, 2, 0.0, false).parameters().size(), 2u);
  EXPECT_EQ(m->str(),
            "MultiheadAttention(\n"
            "  embed_dim=8, num_heads=2, dropout=0, batch_first=false\n"
            "  (out_proj): Linear(in_features=8, out_features=8, bias=true)\n"
            ")");
  try {
    nn::MultiheadAttention bad(6, 4);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("embed_dim (6) must be a positive multiple of num_heads (4)"));
  }
  Tensor x = zeros({3, 2, 8});
  try {
    (*m)(x, x, x, {.attn_mask = zeros({3, 4})});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(),
                HasSubstr("attn_mask must have shape [3, 3] or [4, 3, 3] (batch * num_heads, L, S), got [3, 4]"));
  }
  try {
    (*m)(x, zeros({3, 2, 6}), x);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("key [3, 2, 6]"));
  }
}

TEST(NnAttention, SdpaBoolMaskKeepsWhereTrue) {
  namespace F = nn::functional;
  Generator g(5);
  Tensor q = randn({2, 3, 4}, DType::Float64, kCPU, &g), k = randn({2, 5, 4}, DType::Float64, kCPU, &g),
         v = randn({2, 5, 2}, DType::Float64, kCPU, &g);
  Tensor keep = gt(randn({3, 5}, DType::Float64, kCPU, &g), -0.5);
  Tensor additive = where(keep, 0.0, full({}, -kInf, DType::Float64));
  EXPECT_TRUE(allclose(F::scaled_dot_product_attention(q, k, v, keep),
                       F::scaled_dot_product_attention(q, k, v, additive), 1e-12, 1e-12));
  // is_causal with L < S: query i sees keys 0..i (top-left aligned).
  auto [out, w] = F::scaled_dot_product_attention_with_weights(q, k, v, {}, 0.0, true);
  std::vector<double> wv = to_vector<double>(w);
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 5; ++j) {
      if (j > i) EXPECT_EQ(wv[i * 5 + j], 0.0);
      if (j <= i) EXPECT_GT(wv[i * 5 + j], 0.0);
    }
  }
  // scale overrides 1 / sqrt(E): scale 0 gives uniform weights.
  Tensor uniform = F::scaled_dot_product_attention_with_weights(q, k, v, {}, 0.0, false, 0.0).second;
  EXPECT_TRUE(allclose(uniform, full({2, 3, 5}, 0.2, DType::Float64), 1e-12, 1e-12));
}

}  // namespace
}  // namespace ember
