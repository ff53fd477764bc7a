// scaled_dot_product_attention: the checks, the mapping of (..., L, E)
// inputs onto the fused kernels' [batch, heads, rows, features] (views, with
// 0 strides where broadcast), dropout's Philox reservation, the backward, and
// the composed form for the cases the kernels do not take.
#include "ember/core/ops/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "ember/core/autocast_state.h"
#include "ember/core/autograd/function.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/memory_format.h"
#include "ember/core/ops.h"
#include "ember/core/ops/attention_kernels.h"
#include "ember/core/ops/elementwise_args.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

KernelStub<AttentionKernelFn> attention_forward_stub("scaled_dot_product_attention");
KernelStub<AttentionKernelFn> attention_backward_stub("scaled_dot_product_attention_backward");

namespace {

constexpr const char* kOp = "scaled_dot_product_attention";
constexpr const char* kBackward = "ScaledDotProductAttentionBackward";

Shape leading(const Tensor& t) { return t.dim() > 2 ? Shape(t.shape().begin(), t.shape().end() - 2) : Shape{}; }

// The batch dims query, key, value and the mask broadcast to (the result is
// this + [L, Ev]).
Shape batch_shape(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask) {
  Shape s = broadcast_shapes(kOp, broadcast_shapes(kOp, leading(query), leading(key)), leading(value));
  return attn_mask.defined() ? broadcast_shapes(kOp, s, leading(attn_mask)) : s;
}

void check_same_kind(const char* what, const Tensor& t, const Tensor& query) {
  EMBER_CHECK(t.dtype() == query.dtype() && t.device() == query.device(),
              kOp << ": " << what << " is " << detail::describe(t) << " but query is " << detail::describe(query)
                  << "; convert one with .to(device, dtype) (for a module: module->to(...))");
}

// The stride that views dims [0, n) of t as one dim, or none when they
// cannot be (size-1 dims are ignored; 0 when all are).
std::optional<int64_t> merged_stride(const Tensor& t, int64_t n) {
  int64_t stride = 0, span = 0;
  for (int64_t d = n - 1; d >= 0; --d) {
    if (t.size(d) == 1) continue;
    if (span == 0) {
      stride = t.stride(d);
      span = t.size(d);
    } else if (t.stride(d) != stride * span) {
      return std::nullopt;
    } else {
      span *= t.size(d);
    }
  }
  return stride;
}

// t broadcast to batch + [rows, cols] and seen as the kernels'
// [batch', heads, rows, cols]: the last batch dim is heads, the ones before
// it merge into batch' (no batch dim: 1 and 1). A view, with 0 strides
// where broadcast, unless the leading dims cannot merge or dense_last asks
// for a stride-1 last dim that t lacks: then a copy.
Tensor as_heads(Tensor t, const Shape& batch, int64_t rows, int64_t cols, bool dense_last) {
  if (dense_last && t.size(-1) > 1 && t.stride(-1) != 1) t = t.contiguous();
  Shape shape(batch.size() < 2 ? 2 - batch.size() : 0, 1);
  shape.insert(shape.end(), batch.begin(), batch.end());
  const int64_t n = int64_t(shape.size());
  int64_t merged = 1;
  for (int64_t d = 0; d < n - 1; ++d) merged *= shape[size_t(d)];
  shape.push_back(rows);
  shape.push_back(cols);
  Tensor e = t.expand(shape);
  std::optional<int64_t> stride = merged_stride(e, n - 1);
  if (!stride) {
    e = e.contiguous();
    stride = merged_stride(e, n - 1);
    EMBER_INTERNAL_ASSERT(stride.has_value(), "a contiguous tensor's leading dims always merge");
  }
  return e.as_strided({merged, shape[size_t(n - 1)], rows, cols},
                      {*stride, e.stride(n - 1), e.stride(n), dense_last ? 1 : e.stride(n + 1)}, e.storage_offset());
}

// Points one of AttentionArgs' tensors at t4, a [batch, heads, rows, cols]
// view: its data and its strides over (batch, head, row).
template <typename Pointer>
void bind(Pointer& data, int64_t (&strides)[3], const Tensor& t4) {
  data = t4.data_ptr();
  for (int i = 0; i < 3; ++i) strides[i] = t4.stride(i);
}

// Points the tensors both passes read at q4, k4, v4 and out4.
void bind_inputs(AttentionArgs& a, const Tensor& q4, const Tensor& k4, const Tensor& v4, const Tensor& out4) {
  bind(a.q, a.q_strides, q4);
  bind(a.k, a.k_strides, k4);
  bind(a.v, a.v_strides, v4);
  bind(a.out, a.out_strides, out4);
}

Shape with_rows(Shape batch, int64_t rows, int64_t cols) {
  batch.push_back(rows);
  batch.push_back(cols);
  return batch;
}

// A dense batch + [rows, cols] tensor laid out as `like4` (a kernel view):
// as (B, rows, H, cols) transposed when like4 is a (B, rows, H, cols)
// layout seen as (B, H, rows, cols), so that the caller's transpose back to
// (B, rows, H * cols) is a view (the output after query's layout; each
// gradient after its input's, so that a gradient flowing back through that
// transpose and a view needs no copy); else contiguous.
Tensor empty_in_layout_of(const Tensor& like4, const Shape& batch, int64_t rows, int64_t cols, DType dtype,
                          Device device) {
  if (batch.size() == 2 && like4.stride(1) < like4.stride(2)) {
    return empty({batch[0], rows, batch[1], cols}, dtype, device).transpose(1, 2);
  }
  return empty(with_rows(batch, rows, cols), dtype, device);
}

// The gradients of query, key and value as three parts of one new dense
// block, when the inputs themselves are such parts: one storage, shapes and
// strides equal to the kernel views' (no broadcast, no merged batch dims),
// offsets o, o + d and o + 2 d in some order, the three together dense. That
// is a packed (B, T, 3 H E) projection split along its last dim and viewed
// as heads: split's backward then gets the three gradients back as one
// tensor without a copy (split_views in join.cpp). Otherwise empty.
TensorList packed_input_grads(const Tensor& q4, const Tensor& k4, const Tensor& v4, const Shape& qs, const Shape& ks,
                              const Shape& vs, DType dtype, Device device) {
  const Tensor* parts[3] = {&q4, &k4, &v4};
  if (q4.shape() != qs || k4.shape() != ks || v4.shape() != vs) return {};
  for (const Tensor* t : parts) {
    if (t->storage() != q4.storage() || t->shape() != q4.shape() || t->strides() != q4.strides()) return {};
  }
  const int64_t lo = std::min({q4.storage_offset(), k4.storage_offset(), v4.storage_offset()});
  const int64_t hi = std::max({q4.storage_offset(), k4.storage_offset(), v4.storage_offset()});
  const int64_t d = (hi - lo) / 2;
  if (d <= 0 || hi - lo != 2 * d) return {};
  int64_t index[3];
  bool taken[3] = {};
  for (int i = 0; i < 3; ++i) {
    const int64_t r = parts[i]->storage_offset() - lo;
    if (r % d != 0 || taken[r / d]) return {};
    index[i] = r / d;
    taken[index[i]] = true;
  }
  Shape sizes = q4.shape(), strides = q4.strides();
  sizes.insert(sizes.begin(), 3);
  strides.insert(strides.begin(), d);
  if (!non_overlapping_and_dense(sizes, strides)) return {};
  const Tensor block = empty_strided(sizes, strides, dtype, device);
  return {block.select(0, index[0]), block.select(0, index[1]), block.select(0, index[2])};
}

}  // namespace

namespace detail {

void check_attention_inputs(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask,
                            double dropout_p) {
  EMBER_CHECK(query.defined() && key.defined() && value.defined(), kOp << ": query, key and value must be defined");
  EMBER_CHECK(query.dim() >= 2 && key.dim() >= 2 && value.dim() >= 2,
              kOp << ": query, key and value need at least 2 dims (..., length, features), got "
                  << shape_str(query.shape()) << ", " << shape_str(key.shape()) << " and " << shape_str(value.shape()));
  EMBER_CHECK(query.size(-1) == key.size(-1), kOp << ": query " << shape_str(query.shape()) << " and key "
                                                  << shape_str(key.shape())
                                                  << " must have the same last dim (the feature size)");
  EMBER_CHECK(key.size(-2) == value.size(-2), kOp << ": key " << shape_str(key.shape()) << " and value "
                                                  << shape_str(value.shape())
                                                  << " must have the same source length (dim -2)");
  EMBER_CHECK(is_floating(query.dtype()), kOp << ": expected a floating query, got " << describe(query));
  check_same_kind("key", key, query);
  check_same_kind("value", value, query);
  EMBER_CHECK(dropout_p >= 0.0 && dropout_p <= 1.0, kOp << ": dropout_p must be in [0, 1], got " << dropout_p);
  if (attn_mask.defined()) {
    EMBER_CHECK(attn_mask.device() == query.device(), kOp << ": attn_mask is " << describe(attn_mask)
                                                          << " but query is " << describe(query)
                                                          << "; move the mask with .to(device)");
    EMBER_CHECK(attn_mask.dtype() == DType::Bool || is_floating(attn_mask.dtype()),
                kOp << ": attn_mask must be bool (true = attend) or floating (added to the scores), got "
                    << describe(attn_mask));
    const int64_t L = query.size(-2), S = key.size(-2);
    const int64_t ml = attn_mask.dim() >= 2 ? attn_mask.size(-2) : 1,
                  ms = attn_mask.dim() >= 1 ? attn_mask.size(-1) : 1;
    EMBER_CHECK((ml == 1 || ml == L) && (ms == 1 || ms == S),
                kOp << ": attn_mask " << shape_str(attn_mask.shape()) << " must broadcast to (..., L, S) = (..., " << L
                    << ", " << S << ") for query " << shape_str(query.shape()) << " and key "
                    << shape_str(key.shape()));
  }
  batch_shape(query, key, value, attn_mask);  // the batch dims must broadcast
}

bool fused_attention_supports(const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& attn_mask) {
  if (attn_mask.defined() && attn_mask.dtype() != DType::Bool && autograd::needs_grad(attn_mask)) return false;
  if (query.device().is_cuda() && (key.size(-1) != value.size(-1) || key.size(-1) > 256)) return false;
  return attention_forward_stub.has(query.device().type) && attention_backward_stub.has(query.device().type);
}

std::pair<Tensor, Tensor> scaled_dot_product_attention_composed(const Tensor& query, const Tensor& key,
                                                                const Tensor& value, const Tensor& attn_mask,
                                                                double dropout_p, bool is_causal,
                                                                std::optional<double> scale, Generator* gen) {
  const double inf = std::numeric_limits<double>::infinity();
  const int64_t L = query.size(-2), S = key.size(-2);
  const double s = scale.value_or(1.0 / std::sqrt(double(query.size(-1))));
  Tensor scores = matmul(query, key.transpose(-2, -1)) * s;
  if (is_causal) {
    Tensor rows = arange(L, DType::Int64, query.device()).view({L, 1});
    Tensor cols = arange(S, DType::Int64, query.device()).view({1, S});
    scores = where(gt(cols, rows), -inf, scores);
  }
  Tensor blocked;  // rows with every position blocked
  if (attn_mask.defined()) {
    scores = attn_mask.dtype() == DType::Bool ? where(attn_mask, scores, -inf) : scores + attn_mask.to(scores.dtype());
    // softmax of an all -inf row is NaN, and so would be its gradient: such
    // rows get scores of 0 and probabilities of 0, so the output and every
    // gradient through them are zeros.
    blocked = eq(amax(scores.detach(), {-1}, true), -inf);
    scores = where(blocked, 0.0, scores);
  }
  Tensor probs = softmax(scores, -1);
  if (blocked.defined()) probs = where(blocked, 0.0, probs);
  if (dropout_p > 0.0) probs = dropout(probs, dropout_p, true, gen);
  return {matmul(probs, value), probs};
}

}  // namespace detail

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale, Generator* gen) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor cq = query, ck = key, cv = value;
    if (autocast_state::lower_precision_inputs({&cq, &ck, &cv})) {
      return scaled_dot_product_attention(cq, ck, cv, attn_mask, dropout_p, is_causal, scale, gen);
    }
  }
  detail::check_attention_inputs(query, key, value, attn_mask, dropout_p);
  if (!detail::fused_attention_supports(query, key, value, attn_mask)) {
    return detail::scaled_dot_product_attention_composed(query, key, value, attn_mask, dropout_p, is_causal, scale, gen)
        .first;
  }
  const Device device = query.device();
  const int64_t L = query.size(-2), S = key.size(-2), E = query.size(-1), Ev = value.size(-1);
  const Shape batch = batch_shape(query, key, value, attn_mask);
  Tensor q4 = as_heads(query.detach(), batch, L, E, true);
  Tensor k4 = as_heads(key.detach(), batch, S, E, true);
  Tensor v4 = as_heads(value.detach(), batch, S, Ev, true);
  Tensor mask4;
  if (attn_mask.defined()) {
    Tensor m = attn_mask.dtype() == DType::Bool ? attn_mask.detach() : attn_mask.detach().to(query.dtype());
    mask4 = as_heads(m, batch, L, S, false);
  }
  Tensor out = empty_in_layout_of(q4, batch, L, Ev, query.dtype(), device);
  Tensor out4 = as_heads(out, batch, L, Ev, true);
  const int64_t B = q4.size(0), H = q4.size(1);
  Tensor lse = empty({B, H, L}, attention_stats_dtype(query.dtype()), device);

  AttentionArgs a;
  a.device = device.index;
  a.dtype = query.dtype();
  a.batch = B;
  a.heads = H;
  a.q_len = L;
  a.kv_len = S;
  a.head_dim = E;
  a.value_dim = Ev;
  bind_inputs(a, q4, k4, v4, out4);
  a.logsumexp = lse.data_ptr();
  if (mask4.defined()) {
    a.mask = mask4.data_ptr();
    a.mask_dtype = mask4.dtype();
    for (int i = 0; i < 4; ++i) a.mask_strides[i] = mask4.stride(i);
  }
  a.causal = is_causal;
  a.scale = scale.value_or(1.0 / std::sqrt(double(E)));
  a.dropout_p = dropout_p;
  if (dropout_p > 0.0) {
    Generator& g = gen ? *gen : default_generator(device);
    const uint64_t blocks = attention_dropout_blocks(B, H, L, S);
    a.dropout_state = g.reserve(blocks);
    if (device.is_cuda())
      a.dropout_offset_shift = cuda::detail::captured_random_shift(a.device, g, a.dropout_state, blocks);
  }
  // The kernels take no empty problem: with no key every row is blocked.
  const bool work = B * H * L * S > 0;
  if (work) {
    attention_forward_stub(device.type)(a);
  } else {
    out.zero_();
    lse.fill_(-std::numeric_limits<double>::infinity());
  }

  if (autograd::needs_grad(query, key, value)) {
    autograd::SavedTensor sq(query), sk(key), sv(value), so = autograd::SavedTensor::output(out);
    const Shape qs = query.shape(), ks = key.shape(), vs = value.shape();
    // a's logsumexp and mask point into lse and mask4: the closure holds them
    // so that the backward reads them through a.
    autograd::record(kBackward, {&out}, {query, key, value}, [=, lse = lse, mask4 = mask4](const TensorList& g) {
      EMBER_CHECK(!GradMode::is_enabled(),
                  kOp << ": double backward (create_graph=true) is not supported by the fused kernels; use "
                         "nn::functional::scaled_dot_product_attention_with_weights, which is composed of "
                         "differentiable ops");
      Tensor qv = as_heads(sq.unpack(kBackward).detach(), batch, L, E, true);
      Tensor kv = as_heads(sk.unpack(kBackward).detach(), batch, S, E, true);
      Tensor vv = as_heads(sv.unpack(kBackward).detach(), batch, S, Ev, true);
      Tensor ov = as_heads(so.unpack(kBackward).detach(), batch, L, Ev, true);
      Tensor go = as_heads(g[0], batch, L, Ev, true);
      Tensor dq, dk, dv;
      if (TensorList packed = packed_input_grads(qv, kv, vv, qs, ks, vs, a.dtype, device); !packed.empty()) {
        dq = packed[0];
        dk = packed[1];
        dv = packed[2];
      } else {
        dq = empty_in_layout_of(qv, batch, L, E, a.dtype, device);
        dk = empty_in_layout_of(kv, batch, S, E, a.dtype, device);
        dv = empty_in_layout_of(vv, batch, S, Ev, a.dtype, device);
      }
      if (!work) {
        dq.zero_();
        dk.zero_();
        dv.zero_();
        return TensorList{sum_to(dq, qs), sum_to(dk, ks), sum_to(dv, vs)};
      }
      Tensor dq4 = as_heads(dq, batch, L, E, true), dk4 = as_heads(dk, batch, S, E, true),
             dv4 = as_heads(dv, batch, S, Ev, true);
      // q, k, v and out are rebound to the saved tensors' views.
      AttentionArgs ba = a;
      bind_inputs(ba, qv, kv, vv, ov);
      bind(ba.grad_out, ba.grad_out_strides, go);
      bind(ba.grad_q, ba.grad_q_strides, dq4);
      bind(ba.grad_k, ba.grad_k_strides, dk4);
      bind(ba.grad_v, ba.grad_v_strides, dv4);
      attention_backward_stub(device.type)(ba);
      return TensorList{sum_to(dq, qs), sum_to(dk, ks), sum_to(dv, vs)};
    });
  }
  return out;
}

}  // namespace ember
