// CPU kernels of fused scaled dot-product attention (the contract is
// ember/core/ops/attention_kernels.h): flash attention's online softmax over
// blocks of kBlockQ query rows and kBlockK key columns, so a thread's scratch
// is a few blocks whatever the sequence lengths.
//
// Forward: one task per (batch, head, query block). It walks the key blocks
// keeping, per row, the running max m, the running sum l of exp(s - m) and
// the unnormalized output, rescaled by exp(m_old - m_new) when m grows.
//
// Backward (FlashAttention-2's: P recomputed from the saved logsumexp,
// D_i = rowsum(dO * O), dS = P * (dP * Z - D) with Z the dropout factor) runs
// in two passes so that every gradient element is written by one task, with
// no atomics and no per-thread partial sums: pass 1, one task per (batch,
// head, key block), accumulates dK and dV over the query blocks; pass 2, one
// task per (batch, head, query block), accumulates dQ over the key blocks.
// Scores and dP are computed in both passes (7 block products instead of 5);
// in return every result is the same for any thread count.
//
// Block products are written as axpy loops over a dense inner dim (K and V
// are loaded transposed where the product needs it), which the compiler
// vectorizes without reassociating a dot product.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "ember/core/ops/attention_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"

namespace ember::cpu {
namespace {

constexpr int64_t kBlockQ = 64;
constexpr int64_t kBlockK = 64;

int64_t blocks_of(int64_t n, int64_t block) { return (n + block - 1) / block; }

// One (batch, head) of the problem, with the block loads and the score
// computation both passes share. A is the accumulation type (float, or
// double for float64).
template <typename T, typename A>
struct Head {
  const AttentionArgs& a;
  int64_t b, h;

  static constexpr A kNegInf = -std::numeric_limits<A>::infinity();

  const T* row(const void* base, const int64_t* strides, int64_t r) const {
    return static_cast<const T*>(base) + b * strides[0] + h * strides[1] + r * strides[2];
  }
  T* row(void* base, const int64_t* strides, int64_t r) const {
    return static_cast<T*>(base) + b * strides[0] + h * strides[1] + r * strides[2];
  }
  // Rows [r0, r1) of a strided [rows, cols] matrix into dst[(r - r0) * cols + c].
  void load(const void* base, const int64_t* strides, int64_t r0, int64_t r1, int64_t cols, A* dst) const {
    for (int64_t r = r0; r < r1; ++r) {
      const T* src = row(base, strides, r);
      for (int64_t c = 0; c < cols; ++c) dst[(r - r0) * cols + c] = A(acc_t<T>(src[c]));
    }
  }
  // The same, transposed: dst[c * kBlockK + (r - r0)].
  void load_t(const void* base, const int64_t* strides, int64_t r0, int64_t r1, int64_t cols, A* dst) const {
    for (int64_t r = r0; r < r1; ++r) {
      const T* src = row(base, strides, r);
      for (int64_t c = 0; c < cols; ++c) dst[c * kBlockK + (r - r0)] = A(acc_t<T>(src[c]));
    }
  }
  // s[(i - i0) * kBlockK + (j - j0)] = scale * q_i . k_j, then causal and
  // mask, for rows [i0, i1) (qb dense [rows, head_dim]) and columns [j0, j1)
  // (kt from load_t).
  void scores(int64_t i0, int64_t i1, int64_t j0, int64_t j1, const A* qb, const A* kt, A* s) const {
    const int64_t nc = j1 - j0, E = a.head_dim;
    const A scale = A(a.scale);
    for (int64_t i = i0; i < i1; ++i) {
      A* sr = s + (i - i0) * kBlockK;
      const A* qr = qb + (i - i0) * E;
      std::fill(sr, sr + nc, A(0));
      for (int64_t c = 0; c < E; ++c) {
        const A qv = qr[c];
        const A* kc = kt + c * kBlockK;
        for (int64_t jj = 0; jj < nc; ++jj) sr[jj] += qv * kc[jj];
      }
      for (int64_t jj = 0; jj < nc; ++jj) sr[jj] *= scale;
      if (a.causal) {
        for (int64_t jj = std::max<int64_t>(i + 1 - j0, 0); jj < nc; ++jj) sr[jj] = kNegInf;
      }
      if (a.mask != nullptr) {
        const int64_t* ms = a.mask_strides;
        const int64_t base = b * ms[0] + h * ms[1] + i * ms[2];
        if (a.mask_dtype == DType::Bool) {
          const bool* m = static_cast<const bool*>(a.mask) + base;
          for (int64_t jj = 0; jj < nc; ++jj) {
            if (!m[(j0 + jj) * ms[3]]) sr[jj] = kNegInf;
          }
        } else {
          const T* m = static_cast<const T*>(a.mask) + base;
          for (int64_t jj = 0; jj < nc; ++jj) sr[jj] += A(acc_t<T>(m[(j0 + jj) * ms[3]]));
        }
      }
    }
  }
  // z[(i - i0) * kBlockK + (j - j0)] = the dropout factor of (i, j): 0 when
  // dropped, 1 / (1 - p) when kept (attention_dropout_keep, one Philox block
  // per four consecutive indices).
  void dropout_factors(int64_t i0, int64_t i1, int64_t j0, int64_t j1, A* z) const {
    const float p = float(a.dropout_p);
    const A kept = a.dropout_p < 1.0 ? A(1.0 / (1.0 - a.dropout_p)) : A(0);
    const uint64_t seed = a.dropout_state.seed, offset = a.dropout_state.offset;
    for (int64_t i = i0; i < i1; ++i) {
      const uint64_t first = uint64_t(((b * a.heads + h) * a.q_len + i) * a.kv_len + j0);
      const uint64_t end = first + uint64_t(j1 - j0);
      A* zr = z + (i - i0) * kBlockK;
      for (uint64_t idx = first; idx < end;) {
        const philox::Uint4 r = philox::generate(seed, offset + idx / 4);
        const uint32_t words[4] = {r.x, r.y, r.z, r.w};
        for (uint64_t w = idx & 3; w < 4 && idx < end; ++w, ++idx) {
          zr[idx - first] = philox::uniform(words[w]) >= p ? kept : A(0);
        }
      }
    }
  }
  // P = exp(s - logsumexp) in place (0 for a row whose logsumexp is -inf:
  // every position blocked).
  void probabilities(int64_t rows, int64_t nc, const A* lse, A* s) const {
    for (int64_t r = 0; r < rows; ++r) {
      A* sr = s + r * kBlockK;
      if (lse[r] == kNegInf) {
        std::fill(sr, sr + nc, A(0));
        continue;
      }
      for (int64_t jj = 0; jj < nc; ++jj) sr[jj] = std::exp(sr[jj] - lse[r]);
    }
  }
  // dp[r * kBlockK + jj] = dO_r . v_jj (vt from load_t).
  void grad_probabilities(int64_t rows, int64_t nc, const A* dob, const A* vt, A* dp) const {
    const int64_t Ev = a.value_dim;
    for (int64_t r = 0; r < rows; ++r) {
      A* dr = dp + r * kBlockK;
      std::fill(dr, dr + nc, A(0));
      for (int64_t c = 0; c < Ev; ++c) {
        const A g = dob[r * Ev + c];
        const A* vc = vt + c * kBlockK;
        for (int64_t jj = 0; jj < nc; ++jj) dr[jj] += g * vc[jj];
      }
    }
  }
  // The last key column (exclusive) rows [i0, i1) may attend to.
  int64_t key_end(int64_t i1) const { return a.causal ? std::min(a.kv_len, i1) : a.kv_len; }
};

template <typename T>
using attention_acc_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
void forward(const AttentionArgs& a) {
  using A = attention_acc_t<T>;
  const int64_t E = a.head_dim, Ev = a.value_dim, q_blocks = blocks_of(a.q_len, kBlockQ);
  const bool dropout = a.dropout_p > 0.0;
  parallel_for(0, a.batch * a.heads * q_blocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<A> qb(kBlockQ * E), kt(E * kBlockK), vb(kBlockK * Ev), s(kBlockQ * kBlockK), o(kBlockQ * Ev),
        m(kBlockQ), l(kBlockQ), z(dropout ? kBlockQ * kBlockK : 0);
    for (int64_t t = t0; t < t1; ++t) {
      const Head<T, A> hd{a, t / (a.heads * q_blocks), (t / q_blocks) % a.heads};
      const int64_t i0 = (t % q_blocks) * kBlockQ, i1 = std::min(a.q_len, i0 + kBlockQ), nr = i1 - i0;
      hd.load(a.q, a.q_strides, i0, i1, E, qb.data());
      std::fill(m.begin(), m.end(), Head<T, A>::kNegInf);
      std::fill(l.begin(), l.end(), A(0));
      std::fill(o.begin(), o.end(), A(0));
      const int64_t j_end = hd.key_end(i1);
      for (int64_t j0 = 0; j0 < j_end; j0 += kBlockK) {
        const int64_t j1 = std::min(j_end, j0 + kBlockK), nc = j1 - j0;
        hd.load_t(a.k, a.k_strides, j0, j1, E, kt.data());
        hd.load(a.v, a.v_strides, j0, j1, Ev, vb.data());
        hd.scores(i0, i1, j0, j1, qb.data(), kt.data(), s.data());
        if (dropout) hd.dropout_factors(i0, i1, j0, j1, z.data());
        for (int64_t r = 0; r < nr; ++r) {
          A* sr = s.data() + r * kBlockK;
          A m_new = m[r];
          for (int64_t jj = 0; jj < nc; ++jj) m_new = std::max(m_new, sr[jj]);
          if (m_new == Head<T, A>::kNegInf) continue;  // nothing kept in this row so far
          const A alpha = std::exp(m[r] - m_new);
          A sum = 0;
          for (int64_t jj = 0; jj < nc; ++jj) {
            sr[jj] = std::exp(sr[jj] - m_new);
            sum += sr[jj];
          }
          l[r] = l[r] * alpha + sum;
          m[r] = m_new;
          if (dropout) {
            for (int64_t jj = 0; jj < nc; ++jj) sr[jj] *= z[r * kBlockK + jj];
          }
          A* orow = o.data() + r * Ev;
          if (alpha != A(1)) {
            for (int64_t c = 0; c < Ev; ++c) orow[c] *= alpha;
          }
          for (int64_t jj = 0; jj < nc; ++jj) {
            const A p = sr[jj];
            if (p == A(0)) continue;
            const A* vr = vb.data() + jj * Ev;
            for (int64_t c = 0; c < Ev; ++c) orow[c] += p * vr[c];
          }
        }
      }
      A* lse = static_cast<A*>(a.logsumexp) + (hd.b * a.heads + hd.h) * a.q_len;
      for (int64_t r = 0; r < nr; ++r) {
        const bool any = l[r] > A(0);
        lse[i0 + r] = any ? m[r] + std::log(l[r]) : Head<T, A>::kNegInf;
        const A inv = any ? A(1) / l[r] : A(0);
        T* out = hd.row(a.out, a.out_strides, i0 + r);
        for (int64_t c = 0; c < Ev; ++c) out[c] = T(acc_t<T>(o[r * Ev + c] * inv));
      }
    }
  });
}

// dS = P * (dP * Z - D) in place of dp, and P * Z in place of p (Z = 1
// without dropout).
template <typename A>
void grad_scores(int64_t rows, int64_t nc, const A* d, const A* z, A* p, A* dp) {
  for (int64_t r = 0; r < rows; ++r) {
    A* pr = p + r * kBlockK;
    A* dr = dp + r * kBlockK;
    if (z != nullptr) {
      const A* zr = z + r * kBlockK;
      for (int64_t jj = 0; jj < nc; ++jj) {
        dr[jj] = pr[jj] * (dr[jj] * zr[jj] - d[r]);
        pr[jj] *= zr[jj];
      }
    } else {
      for (int64_t jj = 0; jj < nc; ++jj) dr[jj] = pr[jj] * (dr[jj] - d[r]);
    }
  }
}

template <typename T>
void backward(const AttentionArgs& a) {
  using A = attention_acc_t<T>;
  const int64_t E = a.head_dim, Ev = a.value_dim, heads = a.batch * a.heads;
  const int64_t q_blocks = blocks_of(a.q_len, kBlockQ), k_blocks = blocks_of(a.kv_len, kBlockK);
  const bool dropout = a.dropout_p > 0.0;
  const A* lse_all = static_cast<const A*>(a.logsumexp);

  // D_i = sum_c dO_ic * O_ic, per row of every head.
  std::vector<A> d_all(size_t(heads * a.q_len));
  parallel_for(0, heads * a.q_len, kCpuGrain / std::max<int64_t>(Ev, 1) + 1, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const Head<T, A> hd{a, r / (a.heads * a.q_len), (r / a.q_len) % a.heads};
      const T* g = hd.row(a.grad_out, a.grad_out_strides, r % a.q_len);
      const T* o = hd.row(a.out, a.out_strides, r % a.q_len);
      A sum = 0;
      for (int64_t c = 0; c < Ev; ++c) sum += A(acc_t<T>(g[c])) * A(acc_t<T>(o[c]));
      d_all[size_t(r)] = sum;
    }
  });

  // Pass 1: dK and dV, one task per (batch, head, key block).
  parallel_for(0, heads * k_blocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<A> kt(E * kBlockK), vt(Ev * kBlockK), qb(kBlockQ * E), dob(kBlockQ * Ev), s(kBlockQ * kBlockK),
        dp(kBlockQ * kBlockK), dk(kBlockK * E), dv(kBlockK * Ev), z(dropout ? kBlockQ * kBlockK : 0);
    for (int64_t t = t0; t < t1; ++t) {
      const Head<T, A> hd{a, t / (a.heads * k_blocks), (t / k_blocks) % a.heads};
      const int64_t j0 = (t % k_blocks) * kBlockK, j1 = std::min(a.kv_len, j0 + kBlockK), nc = j1 - j0;
      const A* lse = lse_all + (hd.b * a.heads + hd.h) * a.q_len;
      const A* d = d_all.data() + (hd.b * a.heads + hd.h) * a.q_len;
      hd.load_t(a.k, a.k_strides, j0, j1, E, kt.data());
      hd.load_t(a.v, a.v_strides, j0, j1, Ev, vt.data());
      std::fill(dk.begin(), dk.end(), A(0));
      std::fill(dv.begin(), dv.end(), A(0));
      // Under causal, query rows i < j0 see none of these keys.
      for (int64_t i0 = a.causal ? j0 / kBlockQ * kBlockQ : 0; i0 < a.q_len; i0 += kBlockQ) {
        const int64_t i1 = std::min(a.q_len, i0 + kBlockQ), nr = i1 - i0;
        hd.load(a.q, a.q_strides, i0, i1, E, qb.data());
        hd.load(a.grad_out, a.grad_out_strides, i0, i1, Ev, dob.data());
        hd.scores(i0, i1, j0, j1, qb.data(), kt.data(), s.data());
        hd.probabilities(nr, nc, lse + i0, s.data());
        hd.grad_probabilities(nr, nc, dob.data(), vt.data(), dp.data());
        if (dropout) hd.dropout_factors(i0, i1, j0, j1, z.data());
        grad_scores<A>(nr, nc, d + i0, dropout ? z.data() : nullptr, s.data(), dp.data());
        for (int64_t r = 0; r < nr; ++r) {
          const A* gr = dob.data() + r * Ev;
          const A* qr = qb.data() + r * E;
          for (int64_t jj = 0; jj < nc; ++jj) {
            const A pz = s[r * kBlockK + jj], ds = dp[r * kBlockK + jj];
            if (pz != A(0)) {
              A* dvr = dv.data() + jj * Ev;
              for (int64_t c = 0; c < Ev; ++c) dvr[c] += pz * gr[c];
            }
            if (ds != A(0)) {
              A* dkr = dk.data() + jj * E;
              for (int64_t c = 0; c < E; ++c) dkr[c] += ds * qr[c];
            }
          }
        }
      }
      const A scale = A(a.scale);
      for (int64_t jj = 0; jj < nc; ++jj) {
        T* gk = hd.row(a.grad_k, a.grad_k_strides, j0 + jj);
        T* gv = hd.row(a.grad_v, a.grad_v_strides, j0 + jj);
        for (int64_t c = 0; c < E; ++c) gk[c] = T(acc_t<T>(dk[jj * E + c] * scale));
        for (int64_t c = 0; c < Ev; ++c) gv[c] = T(acc_t<T>(dv[jj * Ev + c]));
      }
    }
  });

  // Pass 2: dQ, one task per (batch, head, query block).
  parallel_for(0, heads * q_blocks, 1, [&](int64_t t0, int64_t t1) {
    std::vector<A> qb(kBlockQ * E), dob(kBlockQ * Ev), kt(E * kBlockK), kb(kBlockK * E), vt(Ev * kBlockK),
        s(kBlockQ * kBlockK), dp(kBlockQ * kBlockK), dq(kBlockQ * E), z(dropout ? kBlockQ * kBlockK : 0);
    for (int64_t t = t0; t < t1; ++t) {
      const Head<T, A> hd{a, t / (a.heads * q_blocks), (t / q_blocks) % a.heads};
      const int64_t i0 = (t % q_blocks) * kBlockQ, i1 = std::min(a.q_len, i0 + kBlockQ), nr = i1 - i0;
      const A* lse = lse_all + (hd.b * a.heads + hd.h) * a.q_len + i0;
      const A* d = d_all.data() + (hd.b * a.heads + hd.h) * a.q_len + i0;
      hd.load(a.q, a.q_strides, i0, i1, E, qb.data());
      hd.load(a.grad_out, a.grad_out_strides, i0, i1, Ev, dob.data());
      std::fill(dq.begin(), dq.end(), A(0));
      const int64_t j_end = hd.key_end(i1);
      for (int64_t j0 = 0; j0 < j_end; j0 += kBlockK) {
        const int64_t j1 = std::min(j_end, j0 + kBlockK), nc = j1 - j0;
        hd.load_t(a.k, a.k_strides, j0, j1, E, kt.data());
        hd.load(a.k, a.k_strides, j0, j1, E, kb.data());
        hd.load_t(a.v, a.v_strides, j0, j1, Ev, vt.data());
        hd.scores(i0, i1, j0, j1, qb.data(), kt.data(), s.data());
        hd.probabilities(nr, nc, lse, s.data());
        hd.grad_probabilities(nr, nc, dob.data(), vt.data(), dp.data());
        if (dropout) hd.dropout_factors(i0, i1, j0, j1, z.data());
        grad_scores<A>(nr, nc, d, dropout ? z.data() : nullptr, s.data(), dp.data());
        for (int64_t r = 0; r < nr; ++r) {
          A* dqr = dq.data() + r * E;
          for (int64_t jj = 0; jj < nc; ++jj) {
            const A ds = dp[r * kBlockK + jj];
            if (ds == A(0)) continue;
            const A* kr = kb.data() + jj * E;
            for (int64_t c = 0; c < E; ++c) dqr[c] += ds * kr[c];
          }
        }
      }
      const A scale = A(a.scale);
      for (int64_t r = 0; r < nr; ++r) {
        T* gq = hd.row(a.grad_q, a.grad_q_strides, i0 + r);
        for (int64_t c = 0; c < E; ++c) gq[c] = T(acc_t<T>(dq[r * E + c] * scale));
      }
    }
  });
}

void attention_forward_cpu(const AttentionArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "scaled_dot_product_attention", [&]<typename T>() { forward<T>(a); });
}

void attention_backward_cpu(const AttentionArgs& a) {
  EMBER_DISPATCH_FLOAT(a.dtype, "scaled_dot_product_attention_backward", [&]<typename T>() { backward<T>(a); });
}

}  // namespace

EMBER_REGISTER_KERNEL(attention_forward_stub, DeviceType::CPU, attention_forward_cpu);
EMBER_REGISTER_KERNEL(attention_backward_stub, DeviceType::CPU, attention_backward_cpu);

}  // namespace ember::cpu
