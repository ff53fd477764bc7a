// cuDNN's fused attention through its graph (backend) API (contract in
// ember/kernels/cuda/libraries/cudnn_attention.h).
//
// - Graphs: cuDNN recognises fused attention only as the operation graphs
//   cudnn-frontend's sdpa and sdpa_backward nodes emit (the composite form,
//   which every cuDNN 9 with the fused engines takes, causal or not); see
//   Note [cuDNN SDPA graphs]. ember builds them itself, as it builds its
//   convolutions (ember/kernels/cuda/libraries/cudnn_backend.h), without the
//   frontend.
// - Plans: one per (direction, dtype, shapes, every operand's strides,
//   causal, device, handle), made at the first call on a thread outside a
//   CUDA graph capture and kept for the life of the process; a
//   configuration cuDNN declines, or whose graph or plan cuDNN rejects with
//   an error, is remembered too, with the reason. The plan is the
//   heuristics' first engine (mode A, then the fallback list) whose numerical
//   notes keep the contract and whose workspace fits. The backward tries the
//   deterministic graph first, then the frontend's default (dQ summed with
//   atomics).
// - Workspace: one allocation per call from the caching allocator: the
//   engine's workspace, then the backward's float32 row sums D_i
//   (softmax_sum) and, in the atomic graph, its float32 dQ accumulator.
// - With EMBER_ATTENTION_ROUTE_LOG=1, each plan made prints one line on
//   stderr (engine, graph, workspace), or why cuDNN declined.
//
// Note [cuDNN SDPA graphs]
// Tensors are 4-d {batch, heads, rows, cols}; io = q's dtype; every
// intermediate is a virtual float32 tensor unless said; compute type float32
// everywhere; scale, one and -inf are float32 scalars passed by value; every
// tensor 16-byte aligned. K enters transposed: {b, h, d, s_kv} with K's
// strides (k0, k1, 1, k2); the backward reads V the same way.
// Forward: S = Q K^T; S *= scale; [causal: row = GEN_INDEX(axis 2), col =
// GEN_INDEX(axis 3) (int32), keep = row >= col (bool), S = keep ? S : -inf];
// M = max_j S; E = exp(S - M); Z = sum_j E; Stats = M + log Z (written:
// {b, h, s_q, 1}, strides {h s_q, s_q, 1, 1}, ember's logsumexp); P = E / Z
// (io type); O = P V.
// Backward: D = sum_c dO O (row strides {h s_q d, s_q d, h d, 1}, as the
// frontend's); softmax_sum = D * one (written, in the workspace); S = Q K^T
// * scale; [padding workaround: keep = row < seq_len_q && col < seq_len_kv,
// S = keep ? S : -inf]; S -= Stats; [causal as above]; P = exp S; dV =
// reshape(P)^T dO (P^T {b, h, s_kv, s_q}, strides (.., 1, s_kv), io type);
// dP = dO V^T; dS = (dP - softmax_sum) * P * scale; dK = reshape(dS)^T Q;
// dQ = dS reshape(K^T) (the reshape back to {b, h, s_kv, d} is float32, as
// the frontend leaves it), either written directly (deterministic) or into
// a float32 accumulator that an IDENTITY op writes to dQ (atomic, cuDNN's
// default). The padding workaround (frontend v1.15, cudnn-frontend#160: NaN
// gradients otherwise) applies when kv_len is not a multiple of 128 on cuDNN
// up to 9.15: int32 {b, 1, 1, 1} tensors holding s_q and s_kv, which also
// override the GEMMs' M, N or K extents.
#include "ember/kernels/cuda/libraries/cudnn_attention.h"

#include <cudnn.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ember/core/cuda/cuda_check.h"
#include "ember/core/cuda/cudnn_check.h"
#include "ember/core/cuda/device.h"
#include "ember/core/cuda/graph.h"
#include "ember/core/error.h"
#include "ember/kernels/cuda/common/workspace.h"
#include "ember/kernels/cuda/libraries/cudnn_backend.h"

namespace ember::cuda {
namespace {

using Dims = std::array<int64_t, 4>;

// Unique ids of the tensors a call passes; intermediates are numbered from
// kFirstIntermediate.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kOut,
  kStats,
  kGradOut,
  kGradQ,
  kGradK,
  kGradV,
  kScale,
  kNegInf,
  kOne,
  kSoftmaxSum,
  kGradQAccum,
  kSeqLenQ,
  kSeqLenKv,
  kFirstIntermediate = 100
};

// The first cuDNN with every piece used here and without the fused-attention
// bugs of 9.10.0 and 9.10.1 that cudnn-frontend refuses.
constexpr size_t kMinCudnnVersion = 91002;
// cuDNN versions whose backward needs the padding-mask workaround when
// kv_len is not a multiple of this tile.
constexpr size_t kLastPaddingWorkaroundVersion = 91500;
constexpr int64_t kPaddingTile = 128;
constexpr int64_t kMaxHeadDim = 128;

// ---------------- what the route takes ----------------

bool rows_aligned(const void* p, const int64_t (&strides)[3]) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && strides[0] % 8 == 0 && strides[1] % 8 == 0 && strides[2] % 8 == 0;
}

bool any_zero_stride(const int64_t (&strides)[3]) { return strides[0] == 0 || strides[1] == 0 || strides[2] == 0; }

// ---------------- the problem a plan serves ----------------

enum Operand {
  kQOperand,
  kKOperand,
  kVOperand,
  kOutOperand,
  kGradOutOperand,
  kGradQOperand,
  kGradKOperand,
  kGradVOperand
};

struct Problem {
  bool backward = false;
  DType dtype = DType::Float16;
  int device = 0;
  int64_t b = 0, h = 0, sq = 0, skv = 0, d = 0;
  bool causal = false;
  std::array<std::array<int64_t, 3>, 8> strides{};  // by Operand; the gradients' in the backward only
};

std::array<int64_t, 3> strides_of(const int64_t (&s)[3]) { return {s[0], s[1], s[2]}; }

Problem problem_of(const AttentionArgs& a, bool backward) {
  Problem p;
  p.backward = backward;
  p.dtype = a.dtype;
  p.device = a.device;
  p.b = a.batch;
  p.h = a.heads;
  p.sq = a.q_len;
  p.skv = a.kv_len;
  p.d = a.head_dim;
  p.causal = a.causal;
  p.strides[kQOperand] = strides_of(a.q_strides);
  p.strides[kKOperand] = strides_of(a.k_strides);
  p.strides[kVOperand] = strides_of(a.v_strides);
  p.strides[kOutOperand] = strides_of(a.out_strides);
  if (backward) {
    p.strides[kGradOutOperand] = strides_of(a.grad_out_strides);
    p.strides[kGradQOperand] = strides_of(a.grad_q_strides);
    p.strides[kGradKOperand] = strides_of(a.grad_k_strides);
    p.strides[kGradVOperand] = strides_of(a.grad_v_strides);
  }
  return p;
}

std::string problem_str(const Problem& p) {
  std::string s = std::string(p.backward ? "backward" : "forward") + " " + dtype_name(p.dtype) + " q [" +
                  std::to_string(p.b) + ", " + std::to_string(p.h) + ", " + std::to_string(p.sq) + ", " +
                  std::to_string(p.d) + "], kv_len " + std::to_string(p.skv);
  return p.causal ? s + " causal" : s;
}

bool padding_workaround(const Problem& p) {
  return p.backward && p.skv % kPaddingTile != 0 && cudnnGetVersion() <= kLastPaddingWorkaroundVersion;
}

// ---------------- graph building ----------------

cudnnDataType_t io_type(DType t) { return t == DType::BFloat16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF; }

// The tensor kinds of a graph: memory the call passes, intermediates the
// engine keeps to itself (virtual), and host scalars passed by value.
enum class Kind { Memory, Intermediate, ByValue };

// One operation graph under construction: its tensors by unique id, its
// operations in order, and every descriptor they refer to. Once cuDNN
// declines a descriptor the later calls add nothing and build() is false.
class OpGraph {
 public:
  int64_t tensor(Kind kind, cudnnDataType_t type, const Dims& dims, const Dims& strides, int64_t uid = 0) {
    if (uid == 0) uid = next_intermediate_++;
    if (!ok_) return uid;
    Backend t(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    const int64_t alignment = 16;
    t.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type)
        .set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.data())
        .set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.data())
        .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
        .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    const bool yes = true;
    if (kind == Kind::Intermediate) t.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &yes);
    if (kind == Kind::ByValue) t.set(CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &yes);
    ok_ = t.try_finalize("cudnnBackendFinalize(tensor)");
    tensors_.emplace(uid, Tensor{std::move(t), dims, strides});
    return uid;
  }

  // A float32 scalar passed by value, added once.
  void scalar(int64_t uid) {
    if (tensors_.count(uid) == 0) tensor(Kind::ByValue, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, uid);
  }

  // A new intermediate with the dims and strides of `uid`.
  int64_t like(int64_t uid, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    if (!ok_) return next_intermediate_++;
    const Tensor& t = tensors_.at(uid);
    return tensor(Kind::Intermediate, type, t.dims, t.strides);
  }

  // c = a b over the last two dims; m, n, k: int32 tensors overriding the
  // GEMM's extents per batch (0: none).
  void matmul(int64_t a, int64_t b, int64_t c, int64_t m = 0, int64_t n = 0, int64_t k = 0) {
    if (!ok_) return;
    Backend desc(CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    desc.set(CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute);
    if (!finalized(desc)) return;
    Backend op(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_MATMUL_ADESC, at(a))
        .set(CUDNN_ATTR_OPERATION_MATMUL_BDESC, at(b))
        .set(CUDNN_ATTR_OPERATION_MATMUL_CDESC, at(c))
        .set(CUDNN_ATTR_OPERATION_MATMUL_DESC, desc);
    if (m != 0) op.set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, at(m));
    if (n != 0) op.set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, at(n));
    if (k != 0) op.set(CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, at(k));
    add(std::move(desc), std::move(op));
  }

  // y = mode(x) (GEN_INDEX: along `axis`).
  void unary(cudnnPointwiseMode_t mode, int64_t x, int64_t y, cudnnDataType_t math = CUDNN_DATA_FLOAT,
             int64_t axis = -1) {
    pointwise(mode, math, axis, x, 0, 0, y);
  }
  // y = mode(x, b).
  void binary(cudnnPointwiseMode_t mode, int64_t x, int64_t b, int64_t y, cudnnDataType_t math = CUDNN_DATA_FLOAT) {
    pointwise(mode, math, -1, x, b, 0, y);
  }
  // y = keep ? x : otherwise.
  void select(int64_t x, int64_t otherwise, int64_t keep, int64_t y) {
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, -1, x, otherwise, keep, y);
  }

  // y = reduce(x) over the dims where y has extent 1.
  void reduction(cudnnReduceTensorOp_t mode, int64_t x, int64_t y) {
    if (!ok_) return;
    Backend desc(CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    desc.set(CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &compute)
        .set(CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    if (cudnnGetVersion() >= 91100) {  // the frontend sets it from 9.11 on
      const bool deterministic = false;
      desc.set(CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &deterministic);
    }
    if (!finalized(desc)) return;
    Backend op(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_REDUCTION_DESC, desc)
        .set(CUDNN_ATTR_OPERATION_REDUCTION_XDESC, at(x))
        .set(CUDNN_ATTR_OPERATION_REDUCTION_YDESC, at(y));
    add(std::move(desc), std::move(op));
  }

  // y: the elements of x under y's dims and strides.
  void reshape(int64_t x, int64_t y) {
    if (!ok_) return;
    Backend op(CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    op.set(CUDNN_ATTR_OPERATION_RESHAPE_XDESC, at(x)).set(CUDNN_ATTR_OPERATION_RESHAPE_YDESC, at(y));
    add(std::nullopt, std::move(op));
  }

  // Finalizes the operation graph on h: false when cuDNN declined any part.
  bool build(cudnnHandle_t h) {
    if (!ok_) return false;
    graph_ = operation_graph(ops_, h);
    return graph_->try_finalize("cudnnBackendFinalize(operation graph)");
  }
  const Backend& graph() const { return *graph_; }

 private:
  struct Tensor {
    Backend desc;
    Dims dims, strides;
  };

  const Backend& at(int64_t uid) const { return tensors_.at(uid).desc; }

  bool finalized(Backend& desc) {
    ok_ = desc.try_finalize("cudnnBackendFinalize(operation)");
    return ok_;
  }

  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t math, int64_t axis, int64_t x, int64_t b, int64_t t,
                 int64_t y) {
    if (!ok_) return;
    Backend desc(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    desc.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
        .set(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &math);
    if (mode == CUDNN_POINTWISE_GEN_INDEX) desc.set(CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    if (!finalized(desc)) return;
    Backend op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    const float one = 1.0f;
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, desc)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, at(x))
        .set(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, at(y));
    if (b != 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, at(b));
    if (t != 0) op.set(CUDNN_ATTR_OPERATION_POINTWISE_TDESC, at(t));
    op.set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one)
        .set(CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    add(std::move(desc), std::move(op));
  }

  void add(std::optional<Backend> desc, Backend op) {
    if (!finalized(op)) return;
    if (desc) parts_.push_back(std::move(*desc));
    ops_.push_back(op.get());
    parts_.push_back(std::move(op));
  }

  std::map<int64_t, Tensor> tensors_;
  std::vector<Backend> parts_;  // operation descriptors and the descriptors they own
  std::vector<cudnnBackendDescriptor_t> ops_;
  std::optional<Backend> graph_;
  int64_t next_intermediate_ = kFirstIntermediate;
  bool ok_ = true;
};

Dims packed(const Dims& dims) { return {dims[1] * dims[2] * dims[3], dims[2] * dims[3], dims[3], 1}; }

// {b, h, rows, dim} in the operand's (batch, head, row) strides.
Dims rows(const Problem& p, Operand o) { return {p.strides[o][0], p.strides[o][1], p.strides[o][2], 1}; }
// The operand read transposed: {b, h, dim, rows}.
Dims transposed(const Problem& p, Operand o) { return {p.strides[o][0], p.strides[o][1], 1, p.strides[o][2]}; }

// keep = row >= col, scores = keep ? scores : -inf: the frontend's
// diagonal-band mask with right bound 0, aligned top-left.
int64_t causal_mask(OpGraph& g, int64_t scores) {
  g.scalar(kNegInf);
  const int64_t row = g.like(scores, CUDNN_DATA_INT32), col = g.like(scores, CUDNN_DATA_INT32);
  g.unary(CUDNN_POINTWISE_GEN_INDEX, scores, row, CUDNN_DATA_FLOAT, 2);
  g.unary(CUDNN_POINTWISE_GEN_INDEX, scores, col, CUDNN_DATA_FLOAT, 3);
  const int64_t keep = g.like(scores, CUDNN_DATA_BOOLEAN);
  g.binary(CUDNN_POINTWISE_CMP_GE, row, col, keep, CUDNN_DATA_BOOLEAN);
  const int64_t masked = g.like(scores);
  g.select(scores, kNegInf, keep, masked);
  return masked;
}

// keep = row < seq_len_q && col < seq_len_kv: the frontend's padding mask.
int64_t padding_mask(OpGraph& g, int64_t scores) {
  g.scalar(kNegInf);
  const int64_t row = g.like(scores, CUDNN_DATA_INT32), col = g.like(scores, CUDNN_DATA_INT32);
  g.unary(CUDNN_POINTWISE_GEN_INDEX, scores, row, CUDNN_DATA_INT32, 2);
  g.unary(CUDNN_POINTWISE_GEN_INDEX, scores, col, CUDNN_DATA_INT32, 3);
  const int64_t row_kept = g.like(scores, CUDNN_DATA_BOOLEAN), col_kept = g.like(scores, CUDNN_DATA_BOOLEAN);
  g.binary(CUDNN_POINTWISE_CMP_LT, row, kSeqLenQ, row_kept, CUDNN_DATA_BOOLEAN);
  g.binary(CUDNN_POINTWISE_CMP_LT, col, kSeqLenKv, col_kept, CUDNN_DATA_BOOLEAN);
  const int64_t keep = g.like(scores, CUDNN_DATA_BOOLEAN);
  g.binary(CUDNN_POINTWISE_LOGICAL_AND, row_kept, col_kept, keep, CUDNN_DATA_BOOLEAN);
  const int64_t masked = g.like(scores);
  g.select(scores, kNegInf, keep, masked);
  return masked;
}

std::unique_ptr<OpGraph> forward_graph(const Problem& p) {
  auto g = std::make_unique<OpGraph>();
  const cudnnDataType_t io = io_type(p.dtype);
  const Dims scores{p.b, p.h, p.sq, p.skv}, row_stats{p.b, p.h, p.sq, 1};
  g->tensor(Kind::Memory, io, {p.b, p.h, p.sq, p.d}, rows(p, kQOperand), kQ);
  g->tensor(Kind::Memory, io, {p.b, p.h, p.d, p.skv}, transposed(p, kKOperand), kK);
  g->tensor(Kind::Memory, io, {p.b, p.h, p.skv, p.d}, rows(p, kVOperand), kV);
  g->tensor(Kind::Memory, io, {p.b, p.h, p.sq, p.d}, rows(p, kOutOperand), kOut);
  g->tensor(Kind::Memory, CUDNN_DATA_FLOAT, row_stats, packed(row_stats), kStats);
  g->scalar(kScale);

  const int64_t products = g->tensor(Kind::Intermediate, CUDNN_DATA_FLOAT, scores, packed(scores));
  g->matmul(kQ, kK, products);
  int64_t s = g->like(products);
  g->binary(CUDNN_POINTWISE_MUL, products, kScale, s);
  if (p.causal) s = causal_mask(*g, s);

  const int64_t max = g->tensor(Kind::Intermediate, CUDNN_DATA_FLOAT, row_stats, packed(row_stats));
  g->reduction(CUDNN_REDUCE_TENSOR_MAX, s, max);
  const int64_t centred = g->like(s), exps = g->like(s);
  g->binary(CUDNN_POINTWISE_SUB, s, max, centred);
  g->unary(CUDNN_POINTWISE_EXP, centred, exps);
  const int64_t sum = g->tensor(Kind::Intermediate, CUDNN_DATA_FLOAT, row_stats, packed(row_stats));
  g->reduction(CUDNN_REDUCE_TENSOR_ADD, exps, sum);
  const int64_t log_sum = g->like(sum);
  g->unary(CUDNN_POINTWISE_LOG, sum, log_sum);
  g->binary(CUDNN_POINTWISE_ADD, max, log_sum, kStats);
  const int64_t probabilities = g->like(s, io);
  g->binary(CUDNN_POINTWISE_DIV, exps, sum, probabilities);
  g->matmul(probabilities, kV, kOut);
  return g;
}

// `deterministic`: dQ written by its GEMM; else summed in a float32
// accumulator (atomics) that an identity op writes to dQ.
std::unique_ptr<OpGraph> backward_graph(const Problem& p, bool padded, bool deterministic) {
  auto g = std::make_unique<OpGraph>();
  const cudnnDataType_t io = io_type(p.dtype);
  const Dims scores{p.b, p.h, p.sq, p.skv}, row_stats{p.b, p.h, p.sq, 1}, scores_t{p.b, p.h, p.skv, p.sq};
  const Dims scores_t_strides{p.h * p.sq * p.skv, p.sq * p.skv, 1, p.skv};
  g->tensor(Kind::Memory, io, {p.b, p.h, p.sq, p.d}, rows(p, kQOperand), kQ);
  g->tensor(Kind::Memory, io, {p.b, p.h, p.d, p.skv}, transposed(p, kKOperand), kK);
  g->tensor(Kind::Memory, io, {p.b, p.h, p.d, p.skv}, transposed(p, kVOperand), kV);
  g->tensor(Kind::Memory, io, {p.b, p.h, p.sq, p.d}, rows(p, kOutOperand), kOut);
  g->tensor(Kind::Memory, io, {p.b, p.h, p.sq, p.d}, rows(p, kGradOutOperand), kGradOut);
  g->tensor(Kind::Memory, CUDNN_DATA_FLOAT, row_stats, packed(row_stats), kStats);
  g->tensor(Kind::Memory, io, {p.b, p.h, p.sq, p.d}, rows(p, kGradQOperand), kGradQ);
  g->tensor(Kind::Memory, io, {p.b, p.h, p.skv, p.d}, rows(p, kGradKOperand), kGradK);
  g->tensor(Kind::Memory, io, {p.b, p.h, p.skv, p.d}, rows(p, kGradVOperand), kGradV);
  g->scalar(kScale);
  g->scalar(kOne);
  int64_t seq_q = 0, seq_kv = 0;
  if (padded) {
    seq_q = g->tensor(Kind::Memory, CUDNN_DATA_INT32, {p.b, 1, 1, 1}, {1, 1, 1, 1}, kSeqLenQ);
    seq_kv = g->tensor(Kind::Memory, CUDNN_DATA_INT32, {p.b, 1, 1, 1}, {1, 1, 1, 1}, kSeqLenKv);
  }

  // D_i = sum_c dO_ic O_ic
  const int64_t products = g->tensor(Kind::Intermediate, CUDNN_DATA_FLOAT, {p.b, p.h, p.sq, p.d},
                                     {p.h * p.sq * p.d, p.sq * p.d, p.h * p.d, 1});
  g->binary(CUDNN_POINTWISE_MUL, kGradOut, kOut, products);
  const int64_t row_dots = g->tensor(Kind::Intermediate, CUDNN_DATA_FLOAT, row_stats, packed(row_stats));
  g->reduction(CUDNN_REDUCE_TENSOR_ADD, products, row_dots);
  g->tensor(Kind::Memory, CUDNN_DATA_FLOAT, row_stats, packed(row_stats), kSoftmaxSum);
  g->binary(CUDNN_POINTWISE_MUL, row_dots, kOne, kSoftmaxSum);

  // P = exp(scale Q K^T - logsumexp), masked
  const int64_t qk = g->tensor(Kind::Intermediate, CUDNN_DATA_FLOAT, scores, packed(scores));
  g->matmul(kQ, kK, qk, seq_q, seq_kv);
  int64_t s = g->like(qk);
  g->binary(CUDNN_POINTWISE_MUL, qk, kScale, s);
  if (padded) s = padding_mask(*g, s);
  const int64_t shifted = g->like(s);
  g->binary(CUDNN_POINTWISE_SUB, s, kStats, shifted);
  s = p.causal ? causal_mask(*g, shifted) : shifted;
  const int64_t probabilities = g->like(s);
  g->unary(CUDNN_POINTWISE_EXP, s, probabilities);

  // dV = P^T dO
  const int64_t probabilities_t = g->tensor(Kind::Intermediate, io, scores_t, scores_t_strides);
  g->reshape(probabilities, probabilities_t);
  g->matmul(probabilities_t, kGradOut, kGradV, seq_kv, 0, seq_q);

  // dS = P o (dO V^T - D) scale
  const int64_t dp = g->tensor(Kind::Intermediate, CUDNN_DATA_FLOAT, scores, packed(scores));
  g->matmul(kGradOut, kV, dp, seq_q, seq_kv);
  const int64_t centred = g->like(dp), weighted = g->like(dp), ds = g->like(dp);
  g->binary(CUDNN_POINTWISE_SUB, dp, kSoftmaxSum, centred);
  g->binary(CUDNN_POINTWISE_MUL, centred, probabilities, weighted);
  g->binary(CUDNN_POINTWISE_MUL, weighted, kScale, ds);

  // dK = dS^T Q
  const int64_t ds_t = g->tensor(Kind::Intermediate, io, scores_t, scores_t_strides);
  g->reshape(ds, ds_t);
  g->matmul(ds_t, kQ, kGradK, seq_kv, 0, seq_q);

  // dQ = dS K
  const int64_t k_rows = g->tensor(Kind::Intermediate, CUDNN_DATA_FLOAT, {p.b, p.h, p.skv, p.d}, rows(p, kKOperand));
  g->reshape(kK, k_rows);
  if (deterministic) {
    g->matmul(ds, k_rows, kGradQ, seq_q, 0, seq_kv);
  } else {
    const Dims grad_q{p.b, p.h, p.sq, p.d};
    g->tensor(Kind::Memory, CUDNN_DATA_FLOAT, grad_q, packed(grad_q), kGradQAccum);
    g->matmul(ds, k_rows, kGradQAccum, seq_q, 0, seq_kv);
    g->unary(CUDNN_POINTWISE_IDENTITY, kGradQAccum, kGradQ);
  }
  return g;
}

// ---------------- plans ----------------

constexpr int64_t kWorkspaceAlignment = 256;

int64_t aligned(int64_t bytes) { return (bytes + kWorkspaceAlignment - 1) / kWorkspaceAlignment * kWorkspaceAlignment; }

// An execution plan, the graph it was made from, and what a call passes it
// beside the operands.
struct Plan {
  std::unique_ptr<OpGraph> graph;
  EnginePlan engine;
  bool deterministic = true;  // backward: dQ without atomics
  bool padded = false;        // backward: the padding-mask workaround
  int64_t softmax_sum_offset = 0, grad_q_accum_offset = 0, workspace_bytes = 0;
  Workspace seq_lens;  // padded: int32 s_q per batch, then from lengths_stride() s_kv
};

// The workspace beside the engine's: D_i, then the atomic graph's dQ sums.
void lay_out_workspace(const Problem& p, Plan& plan) {
  if (!p.backward) {
    plan.workspace_bytes = plan.engine.workspace;
    return;
  }
  plan.softmax_sum_offset = aligned(plan.engine.workspace);
  plan.grad_q_accum_offset = plan.softmax_sum_offset + aligned(p.b * p.h * p.sq * int64_t(sizeof(float)));
  plan.workspace_bytes =
      plan.grad_q_accum_offset + (plan.deterministic ? 0 : p.b * p.h * p.sq * p.d * int64_t(sizeof(float)));
}

int64_t extra_workspace(const Problem& p, bool deterministic) {
  if (!p.backward) return 0;
  const int64_t rows_bytes = p.b * p.h * p.sq * int64_t(sizeof(float));
  return 2 * kWorkspaceAlignment + rows_bytes + (deterministic ? 0 : rows_bytes * p.d);
}

bool route_log() {
  const char* on = std::getenv("EMBER_ATTENTION_ROUTE_LOG");  // read at each plan: plans are rare
  return on != nullptr && std::string(on) == "1";
}

// Int32 elements between the padding workaround's s_q and s_kv arrays: a
// multiple of 4, so both start 16-byte aligned.
int64_t lengths_stride(const Problem& p) { return (p.b + 3) / 4 * 4; }

// The sequence lengths the padding workaround reads, on the device, written
// before the plan is used: a shape's first call, outside captures.
Workspace sequence_lengths(const Problem& p, cudaStream_t stream) {
  const int64_t stride = lengths_stride(p);
  std::vector<int32_t> host(size_t(2 * stride), 0);
  for (int64_t i = 0; i < p.b; ++i) {
    host[size_t(i)] = int32_t(p.sq);
    host[size_t(stride + i)] = int32_t(p.skv);
  }
  Workspace lengths(host.size() * sizeof(int32_t), p.device);
  EMBER_CUDA_CHECK(
      cudaMemcpyAsync(lengths.data(), host.data(), host.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));  // `host` goes out of scope; other streams may use the plan
  return lengths;
}

// The plan for p on h, or null with *why when cuDNN declines every graph.
std::unique_ptr<Plan> make_plan(const Problem& p, cudnnHandle_t h, cudaStream_t stream, std::string* why) {
  const bool padded = padding_workaround(p);
  *why = "cuDNN declines its attention graph here (no engine of this cuDNN and GPU takes it)";
  bool numerics_declined = false, workspace_declined = false;
  for (const bool deterministic : {true, false}) {
    if (!deterministic && !p.backward) break;
    std::unique_ptr<OpGraph> graph = p.backward ? backward_graph(p, padded, deterministic) : forward_graph(p);
    if (!graph->build(h)) continue;
    RankedPlans ranked = ranked_plans(
        graph->graph(), h, p.device, 1, extra_workspace(p, deterministic), [&](const Backend& engine, size_t) {
          for (cudnnBackendNumericalNote_t note : numerical_notes(engine)) {
            const bool lossy = note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS ||
                               note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION;
            const bool varies = p.backward && deterministic && note == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
            if (lossy || varies) {
              numerics_declined = numerics_declined || lossy;
              return false;
            }
          }
          return true;
        });
    if (ranked.plans.empty()) {
      workspace_declined = workspace_declined || ranked.any_finalized;
      continue;
    }
    auto plan = std::make_unique<Plan>();
    plan->graph = std::move(graph);
    plan->engine = std::move(ranked.plans.front());
    plan->deterministic = deterministic;
    plan->padded = padded;
    lay_out_workspace(p, *plan);
    if (padded) plan->seq_lens = sequence_lengths(p, stream);
    if (route_log()) {
      std::fprintf(stderr, "ember attention route: cuDNN plan for %s: engine %lld, %s%s, workspace %lld bytes\n",
                   problem_str(p).c_str(), static_cast<long long>(engine_index(engine_of(plan->engine.config))),
                   p.backward ? (deterministic ? "deterministic dQ" : "dQ summed with atomics") : "forward graph",
                   padded ? ", padding-mask workaround" : "", static_cast<long long>(plan->workspace_bytes));
    }
    return plan;
  }
  if (workspace_declined) {
    *why = "the workspace of every cuDNN engine for it is larger than the free device memory";
  } else if (numerics_declined) {
    *why = "every cuDNN engine for it down-converts its inputs or reduces in reduced precision";
  }
  if (route_log())
    std::fprintf(stderr, "ember attention route: no cuDNN plan for %s: %s\n", problem_str(p).c_str(), why->c_str());
  return nullptr;
}

constexpr size_t kKeyLength = 10 + 8 * 3;
using PlanKey = std::pair<std::array<int64_t, kKeyLength>, cudnnHandle_t>;

PlanKey key_of(const Problem& p, cudnnHandle_t h) {
  std::array<int64_t, kKeyLength> k{
      int64_t(p.backward), int64_t(p.dtype), p.device, p.b, p.h, p.sq, p.skv, p.d, int64_t(p.causal), 0};
  size_t i = 10;
  for (const std::array<int64_t, 3>& s : p.strides) {
    for (int64_t v : s) k[i++] = v;
  }
  return {k, h};
}

// A plan, or why there is none.
struct Entry {
  std::unique_ptr<Plan> plan;
  std::string why;
};

class PlanCache {
 public:
  // The entry of p on handle h, made at its first call: null when this
  // thread captures a graph and has no entry yet. Plans live as long as the
  // process. One is made outside the lock (heuristics and finalizing take
  // long); only h's thread makes plans for h, so no two threads make the
  // same one.
  const Entry* get(const Problem& p, cudnnHandle_t h, cudaStream_t stream) {
    const PlanKey key = key_of(p, h);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      auto it = map_.find(key);
      if (it != map_.end()) return &it->second;
    }
    if (is_capturing(p.device)) return nullptr;
    Entry entry;
    try {
      entry.plan = make_plan(p, h, stream, &entry.why);
    } catch (const Error& e) {  // a graph this cuDNN rejects: Auto runs ember's kernels instead
      entry.why = std::string("making cuDNN's plan failed: ") + e.what();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    return &map_.emplace(key, std::move(entry)).first->second;
  }

 private:
  std::mutex mutex_;
  std::map<PlanKey, Entry> map_;
};

PlanCache& plan_cache() {
  static PlanCache* cache = new PlanCache;
  return *cache;
}

// The pointers of one execution, by unique id.
class Pointers {
 public:
  void add(int64_t uid, const void* p) {
    uids_[n_] = uid;
    pointers_[n_++] = const_cast<void*>(p);
  }
  Backend pack(void* workspace) const { return variant_pack({uids_.data(), n_}, {pointers_.data(), n_}, workspace); }

 private:
  std::array<int64_t, 16> uids_{};
  std::array<void*, 16> pointers_{};
  size_t n_ = 0;
};

bool run(const AttentionArgs& a, cudaStream_t stream, bool backward, const char** why) {
  const char* reason = cudnn_attention_cannot_take(a, backward);
  if (reason == nullptr && is_capturing(a.device) && !thread_has_handle(a.device)) {
    reason =
        "this thread's first cuDNN attention would make its handle and plan during a CUDA graph capture; run the "
        "call once before capturing";
  }
  if (reason != nullptr) {
    if (why != nullptr) *why = reason;
    return false;
  }
  cudnnHandle_t h = handle_for(a.device, stream, "the first cuDNN fused attention of a thread on a device");
  const Problem p = problem_of(a, backward);
  const Entry* entry = plan_cache().get(p, h, stream);
  if (entry == nullptr || entry->plan == nullptr) {
    if (why != nullptr) {
      *why = entry != nullptr ? entry->why.c_str()
                              : "its plan for this shape is made at the shape's first call on this thread, outside "
                                "CUDA graph captures; run the call once before capturing";
    }
    return false;
  }
  const Plan& plan = *entry->plan;
  const Workspace ws(size_t(plan.workspace_bytes), a.device);
  char* base = static_cast<char*>(ws.data());
  const float scale = float(a.scale), negative_infinity = -std::numeric_limits<float>::infinity(), one = 1.0f;
  Pointers ptrs;
  ptrs.add(kQ, a.q);
  ptrs.add(kK, a.k);
  ptrs.add(kV, a.v);
  ptrs.add(kOut, a.out);
  ptrs.add(kStats, a.logsumexp);
  ptrs.add(kScale, &scale);
  if (a.causal || plan.padded) ptrs.add(kNegInf, &negative_infinity);
  if (backward) {
    ptrs.add(kGradOut, a.grad_out);
    ptrs.add(kGradQ, a.grad_q);
    ptrs.add(kGradK, a.grad_k);
    ptrs.add(kGradV, a.grad_v);
    ptrs.add(kOne, &one);
    ptrs.add(kSoftmaxSum, base + plan.softmax_sum_offset);
    if (!plan.deterministic) {
      // cuDNN adds into the accumulator: it starts at zero (cudnn-frontend
      // clears it the same way).
      char* accum = base + plan.grad_q_accum_offset;
      EMBER_CUDA_CHECK(cudaMemsetAsync(accum, 0, size_t(p.b * p.h * p.sq * p.d) * sizeof(float), stream));
      ptrs.add(kGradQAccum, accum);
    }
    if (plan.padded) {
      ptrs.add(kSeqLenQ, plan.seq_lens.as<int32_t>());
      ptrs.add(kSeqLenKv, plan.seq_lens.as<int32_t>() + lengths_stride(p));
    }
  }
  const Backend pack = ptrs.pack(base);
  EMBER_CUDNN_CHECK(cudnnBackendExecute(h, plan.engine.plan.get(), pack.get()));
  return true;
}

}  // namespace

const char* cudnn_attention_cannot_take(const AttentionArgs& a, bool backward) {
  if (a.dtype != DType::Float16 && a.dtype != DType::BFloat16) return "it takes float16 and bfloat16 only";
  if (a.mask != nullptr) return "it takes no attention mask yet (causal only)";
  if (a.dropout_p > 0.0) return "it takes no dropout yet";
  if (a.head_dim != a.value_dim) return "it takes head_dim == value_dim only";
  if (a.head_dim % 8 != 0 || a.head_dim > kMaxHeadDim) return "it takes head_dim a multiple of 8, up to 128";
  if (a.batch * a.heads * a.q_len * a.kv_len == 0) return "it takes no empty q or k";
  if (backward && a.q_len == 1 && a.kv_len == 1) return "its backward takes no q_len == kv_len == 1";
  bool broadcast = any_zero_stride(a.q_strides) || any_zero_stride(a.k_strides) || any_zero_stride(a.v_strides) ||
                   any_zero_stride(a.out_strides);
  bool aligned = rows_aligned(a.q, a.q_strides) && rows_aligned(a.k, a.k_strides) && rows_aligned(a.v, a.v_strides) &&
                 rows_aligned(a.out, a.out_strides) && reinterpret_cast<uintptr_t>(a.logsumexp) % 16 == 0;
  if (backward) {
    broadcast = broadcast || any_zero_stride(a.grad_out_strides) || any_zero_stride(a.grad_q_strides) ||
                any_zero_stride(a.grad_k_strides) || any_zero_stride(a.grad_v_strides);
    aligned = aligned && rows_aligned(a.grad_out, a.grad_out_strides) && rows_aligned(a.grad_q, a.grad_q_strides) &&
              rows_aligned(a.grad_k, a.grad_k_strides) && rows_aligned(a.grad_v, a.grad_v_strides);
  }
  if (broadcast) return "it takes no broadcast (stride 0) operands";
  if (!aligned) return "it takes 16-byte aligned operands whose batch, head and row strides are multiples of 8";
  if (properties(a.device).major < 8) return "it needs a GPU of compute capability 8.0 or newer";
  if (cudnnGetVersion() < kMinCudnnVersion) return "it needs cuDNN 9.10.2 or newer";
  return nullptr;
}

bool cudnn_attention_forward(const AttentionArgs& a, cudaStream_t stream, const char** why) {
  return run(a, stream, false, why);
}

bool cudnn_attention_backward(const AttentionArgs& a, cudaStream_t stream, const char** why) {
  return run(a, stream, true, why);
}

}  // namespace ember::cuda
