// Front-ends of the reductions: dim handling, layout, dispatch, backward.
#include <algorithm>
#include <numeric>

#include "core/autograd/function.h"
#include "core/ops.h"
#include "core/ops/reduce_kernels.h"

namespace ember {

KernelStub<ReduceKernelFn> reduce_stub("reduce");

using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

namespace {

// The reduced dims, wrapped and sorted; every dim when dims is empty.
std::vector<bool> reduced_mask(const char* op, const Tensor& x, const Shape& dims) {
  int64_t n = x.dim();
  std::vector<bool> mask(size_t(n), dims.empty());
  for (int64_t d : dims) {
    int64_t m = std::max<int64_t>(n, 1);
    EMBER_CHECK(d >= -m && d < m, op << ": dim " << d << " is out of range for a tensor of shape "
                                     << shape_str(x.shape()) << " (valid dims: " << -m << " to " << m - 1 << ")");
    if (n == 0) continue;
    int64_t w = d < 0 ? d + n : d;
    EMBER_CHECK(!mask[w], op << ": dim " << w << " appears twice in " << shape_str(dims));
    mask[w] = true;
  }
  return mask;
}

Shape reduced_shape(const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  Shape out;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[d]) out.push_back(x.size(d));
    else if (keepdim) out.push_back(1);
  }
  return out;
}

struct Layout {
  Tensor input;  // dense [outer, reduce, inner]
  int64_t outer, reduce, inner;
};

// Brings the reduced dims together: a view when they already form one
// adjacent block of a contiguous tensor, otherwise a permuted copy with the
// reduced dims last.
Layout layout_for(const Tensor& x, const std::vector<bool>& mask) {
  int64_t n = x.dim();
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < n; ++d) {
    if (mask[d]) {
      if (first < 0) first = d;
      last = d;
    }
  }
  if (first < 0) return {x.contiguous(), x.numel(), 1, 1};
  bool adjacent = true;
  for (int64_t d = first; d <= last; ++d) adjacent = adjacent && mask[d];
  if (adjacent && x.is_contiguous()) {
    int64_t outer = 1, reduce = 1, inner = 1;
    for (int64_t d = 0; d < n; ++d) (d < first ? outer : d <= last ? reduce : inner) *= x.size(d);
    return {x, outer, reduce, inner};
  }
  Shape perm;
  int64_t outer = 1, reduce = 1;
  for (int64_t d = 0; d < n; ++d) {
    if (!mask[d]) {
      perm.push_back(d);
      outer *= x.size(d);
    }
  }
  for (int64_t d = 0; d < n; ++d) {
    if (mask[d]) {
      perm.push_back(d);
      reduce *= x.size(d);
    }
  }
  return {x.permute(perm).contiguous(), outer, reduce, 1};
}

// Runs one reduction kernel; values in out_dtype and/or int64 indices.
void run_reduce(const char* op, ReduceOp rop, const Tensor& x, const std::vector<bool>& mask, Tensor* values,
                Tensor* indices, double correction = 1) {
  Layout l = layout_for(x.detach(), mask);
  if (rop != ReduceOp::Sum && rop != ReduceOp::Mean) {
    EMBER_CHECK(l.reduce > 0, op << ": cannot reduce over a zero-size dimension of a tensor of shape "
                                 << shape_str(x.shape()) << " (the operation has no identity)");
  }
  ReduceArgs a;
  a.in = l.input.data_ptr();
  a.out = values ? values->data_ptr() : nullptr;
  a.indices = indices ? indices->data<int64_t>() : nullptr;
  a.outer = l.outer;
  a.reduce = l.reduce;
  a.inner = l.inner;
  a.in_dtype = x.dtype();
  a.out_dtype = values ? values->dtype() : DType::Int64;
  a.correction = correction;
  reduce_stub(x.device().type)(rop, a);
}

// Expands a keepdim=false gradient back to the input's rank.
Tensor unsqueeze_reduced(const Tensor& g, const std::vector<bool>& mask, bool keepdim) {
  if (keepdim) return g;
  Tensor r = g;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d]) r = r.unsqueeze(int64_t(d));
  }
  return r;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  std::vector<bool> mask = reduced_mask("sum", x, dims);
  DType out_dtype = is_floating(x.dtype()) ? x.dtype() : DType::Int64;
  Tensor out = empty(reduced_shape(x, mask, keepdim), out_dtype, x.device());
  run_reduce("sum", ReduceOp::Sum, x, mask, &out, nullptr);
  if (needs_grad(x)) {
    Shape in_shape = x.shape();
    record("SumBackward", {&out}, {x}, [mask, keepdim, in_shape](const TensorList& g) {
      return TensorList{unsqueeze_reduced(g[0], mask, keepdim).expand(in_shape)};
    });
  }
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  int64_t lead = x.dim() - int64_t(shape.size());
  EMBER_CHECK(lead >= 0, "sum_to: shape " << shape_str(x.shape()) << " cannot be summed to the larger shape "
                                          << shape_str(shape));
  Shape dims;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (d < lead) {
      dims.push_back(d);
      continue;
    }
    int64_t target = shape[d - lead];
    EMBER_CHECK(target == x.size(d) || target == 1,
                "sum_to: shape " << shape_str(x.shape()) << " cannot be summed to " << shape_str(shape));
    if (target == 1 && x.size(d) != 1) dims.push_back(d);
  }
  Tensor r = dims.empty() ? x : sum(x, dims, true);
  return lead > 0 || r.shape() != shape ? r.reshape(shape) : r;
}

Tensor Tensor::sum() const { return ember::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return ember::sum(*this, dims, keepdim); }

}  // namespace ember
