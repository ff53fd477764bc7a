// matmul (torch.matmul) and the TF32 switch: shape rules, the operand
// layouts handed to the GEMM kernel (ember/core/ops/gemm_kernels.h), backward.
//
// Shapes: 1-D x 1-D is a dot product (a 0-dim result). Otherwise a 1-D
// first operand is a row [1, k] and a 1-D second operand a column [k, 1],
// and that added dim is removed from the result. The dims before the last
// two are batch dims and broadcast as NumPy does. Both operands must share
// one dtype and one device: matmul does not promote, as in PyTorch.
//
// Layout: an operand goes to the kernel without a copy when its strides
// already describe a GEMM operand: a matrix with unit-stride columns as it
// is, one with unit-stride rows with the transpose flag, and batch dims
// that collapse to one stride (0 for a broadcast) as the batch stride.
// Otherwise it is expanded to the batch shape and made contiguous. When the
// second operand is one matrix for every batch and the first's batches are
// evenly spaced rows, the batches fold into the rows of a single GEMM.
#include <algorithm>
#include <atomic>
#include <optional>

#include "ember/core/autocast_state.h"
#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/gemm_kernels.h"
#include "ember/core/ops/gemm_layout.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

using detail::describe;

namespace {

std::atomic<bool> g_allow_tf32{false};

void check_operands(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "matmul: got an undefined tensor");
  EMBER_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both operands must be at least 1-D, but got shapes "
                                                << shape_str(a.shape()) << " and " << shape_str(b.shape())
                                                << "; use mul() to scale by a 0-dim tensor");
  EMBER_CHECK(a.device() == b.device(), "matmul: expected both operands on the same device, but found "
                                            << describe(a) << " and " << describe(b) << "; move one with .to(device)");
  EMBER_CHECK(a.dtype() == b.dtype(), "matmul: expected both operands to have the same dtype, but got "
                                          << describe(a) << " and " << describe(b)
                                          << "; matmul does not promote, convert one with .to(dtype)");
  EMBER_CHECK(a.dtype() != DType::Bool, "matmul: not defined for bool operands (" << describe(a) << " and "
                                                                                  << describe(b)
                                                                                  << "); convert them with .to(dtype)");
}

// The contraction dims must agree; the message names both shapes and dims.
void check_inner(const Tensor& a, const Tensor& b) {
  int64_t ka = a.size(-1), kb = b.dim() == 1 ? b.size(0) : b.size(-2);
  if (ka == kb) return;
  EMBER_CHECK(a.dim() != 1 || b.dim() != 1, "matmul: a dot product needs 1-D operands of one size, but got shapes "
                                                << shape_str(a.shape()) << " and " << shape_str(b.shape()));
  EMBER_FAIL("matmul: shapes " << shape_str(a.shape()) << " and " << shape_str(b.shape())
                               << " cannot be multiplied: the " << (a.dim() == 1 ? "only" : "last")
                               << " dim of the first operand (size " << ka << ") must equal the "
                               << (b.dim() == 1 ? "only" : "second-to-last") << " dim of the second (size " << kb
                               << ")");
}

// The broadcast of the batch dims (all but the last two) of a2 and b2, the
// operands already promoted to at least 2-D.
Shape broadcast_batch(const Tensor& a, const Tensor& b, const Tensor& a2, const Tensor& b2) {
  Shape ba(a2.shape().begin(), a2.shape().end() - 2), bb(b2.shape().begin(), b2.shape().end() - 2);
  size_t n = std::max(ba.size(), bb.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t sa = i + ba.size() >= n ? ba[i + ba.size() - n] : 1;
    int64_t sb = i + bb.size() >= n ? bb[i + bb.size() - n] : 1;
    EMBER_CHECK(sa == sb || sa == 1 || sb == 1,
                "matmul: the batch dims " << shape_str(ba) << " of the first operand (shape " << shape_str(a.shape())
                                          << ") and " << shape_str(bb) << " of the second (shape "
                                          << shape_str(b.shape()) << ") do not broadcast (" << sa << " vs " << sb
                                          << "); each batch dim must match or be 1");
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

// One GEMM operand as the kernel takes it.
struct GemmOperand {
  Tensor data;  // first element of batch 0; a copy when the layout needed one
  bool trans = false;
  int64_t ld = 1;
  int64_t batch_stride = 0;
};

GemmOperand make_operand(const Tensor& x, const Shape& batch, int64_t rows, int64_t cols) {
  Shape full = batch;
  full.push_back(rows);
  full.push_back(cols);
  Tensor e = x.expand(full);
  size_t nb = batch.size();
  auto layout = matrix_layout(rows, cols, e.strides()[nb], e.strides()[nb + 1]);
  auto stride = collapse_batch(e.sizes(), e.strides(), nb);
  if (layout && stride) return {e, layout->trans, layout->ld, *stride};
  return {e.contiguous(), false, cols, rows * cols};
}

// out (contiguous, batch + [m, n] up to the removed 1-D dims) = a2 x b2.
void run_gemm(const Tensor& a2, const Tensor& b2, const Shape& batch, const Tensor& out) {
  int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  GemmOperand A = make_operand(a2, batch, m, k), B = make_operand(b2, batch, k, n);
  GemmArgs g;
  g.device = out.device().index;
  g.dtype = out.dtype();
  g.m = m;
  g.n = n;
  g.k = k;
  g.batch = 1;
  for (int64_t s : batch) g.batch *= s;
  g.a = A.data.data_ptr();
  g.trans_a = A.trans;
  g.lda = A.ld;
  g.stride_a = A.batch_stride;
  g.b = B.data.data_ptr();
  g.trans_b = B.trans;
  g.ldb = B.ld;
  g.stride_b = B.batch_stride;
  g.c = out.data_ptr();
  g.ldc = n;
  g.stride_c = m * n;
  // Row i of batch j is row j * m + i of one tall matrix when the batches
  // are evenly spaced rows and B is shared: one GEMM instead of a batch.
  bool evenly_spaced = m == 1 ? A.batch_stride >= k : A.batch_stride == m * A.ld;
  if (g.batch > 1 && B.batch_stride == 0 && !A.trans && evenly_spaced) {
    g.lda = m == 1 ? A.batch_stride : A.ld;
    g.m = m * g.batch;
    g.batch = 1;
    g.stride_a = 0;
    g.stride_c = 0;
  }
  gemm_stub(out.device().type)(g);
}

Tensor reshaped(const Tensor& x, const Shape& shape) { return x.shape() == shape ? x : x.reshape(shape); }

}  // namespace

void set_allow_tf32(bool allow) { g_allow_tf32.store(allow, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }

Tensor matmul(const Tensor& a, const Tensor& b) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor ca = a, cb = b;
    if (autocast_state::lower_precision_inputs({&ca, &cb})) return matmul(ca, cb);
  }
  check_operands(a, b);
  check_inner(a, b);
  Tensor a2 = a.dim() == 1 ? a.detach().unsqueeze(0) : a.detach();
  Tensor b2 = b.dim() == 1 ? b.detach().unsqueeze(1) : b.detach();
  Shape batch = broadcast_batch(a, b, a2, b2);
  int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  Shape out_shape = batch;
  if (a.dim() > 1) out_shape.push_back(m);
  if (b.dim() > 1) out_shape.push_back(n);
  Tensor out;
  if (k == 0) {
    out = zeros(out_shape, a.dtype(), a.device());
  } else {
    out = empty(out_shape, a.dtype(), a.device());
    if (out.numel() > 0) run_gemm(a2, b2, batch, out);
  }

  if (needs_grad(a, b)) {
    SavedTensor sa = b.requires_grad() ? SavedTensor(a) : SavedTensor();
    SavedTensor sb = a.requires_grad() ? SavedTensor(b) : SavedTensor();
    Shape as = a.shape(), bs = b.shape(), a2s = a2.shape(), b2s = b2.shape();
    Shape g_shape = batch;
    g_shape.push_back(m);
    g_shape.push_back(n);
    record("MatmulBackward", {&out}, {a, b}, [=](const TensorList& g) {
      // Work in the promoted shapes, whose gradient is batch + [m, n].
      Tensor g2 = reshaped(g[0], g_shape);
      Tensor da, db;
      if (sb.defined()) {
        Tensor b2v = reshaped(sb.unpack("MatmulBackward"), b2s);
        da = reshaped(sum_to(matmul(g2, b2v.transpose(-1, -2)), a2s), as);
      }
      if (sa.defined()) {
        Tensor a2v = reshaped(sa.unpack("MatmulBackward"), a2s);
        if (b2s.size() == 2 && a2s.size() > 2) {
          // B was shared by every batch: one GEMM over the folded rows sums
          // the batches as it multiplies.
          // The row count is explicit: with k or n = 0, -1 could not be inferred.
          int64_t rows = 1;
          for (int64_t d = 0; d + 1 < a2v.dim(); ++d) rows *= a2v.size(d);
          db = matmul(a2v.reshape({rows, k}).t(), g2.reshape({rows, n}));
        } else {
          db = sum_to(matmul(a2v.transpose(-1, -2), g2), b2s);
        }
        db = reshaped(db, bs);
      }
      return TensorList{da, db};
    });
  }
  return out;
}

Tensor Tensor::matmul(const Tensor& other) const { return ember::matmul(*this, other); }

}  // namespace ember
