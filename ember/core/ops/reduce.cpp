// Front-ends of the reductions: dim handling, layout, dispatch, backward.
//
// Every reduction here takes dims (negative allowed, empty = all dims) and
// keepdim as PyTorch does, runs one kernel of reduce_stub over a dense
// [outer, reduce, inner] block (ember/core/ops/reduce_kernels.h), and records its
// backward in terms of other ops.
#include <algorithm>
#include <limits>

#include "ember/core/autocast_state.h"
#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/reduce_kernels.h"

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

// Runs one reduction kernel; values in values->dtype() and/or int64 indices.
void run_reduce(const char* op, ReduceOp rop, const Tensor& x, const std::vector<bool>& mask, Tensor* values,
                Tensor* indices, double correction = 1) {
  Layout l = layout_for(x.detach(), mask);
  bool has_identity = rop == ReduceOp::Sum || rop == ReduceOp::Mean || rop == ReduceOp::Var || rop == ReduceOp::Std ||
                      rop == ReduceOp::LogSumExp;
  EMBER_CHECK(has_identity || l.reduce > 0, op << ": cannot reduce over a zero-size dimension of a tensor of shape "
                                               << shape_str(x.shape()) << " (" << op
                                               << " of no elements is undefined); reduce over non-empty dims only");
  ReduceArgs a;
  a.device = x.device().index;
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

// Expands a keepdim=false gradient (or result) back to the input's rank.
Tensor unsqueeze_reduced(const Tensor& g, const std::vector<bool>& mask, bool keepdim) {
  if (keepdim) return g;
  Tensor r = g;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d]) r = r.unsqueeze(int64_t(d));
  }
  return r;
}

// The reduced dims as a list (every dim of a 0-dim tensor: none, which sum
// reads as "all").
Shape mask_dims(const std::vector<bool>& mask) {
  Shape dims;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d]) dims.push_back(int64_t(d));
  }
  return dims;
}

// How many input elements each output element reduces.
int64_t reduced_count(const Shape& shape, const std::vector<bool>& mask) {
  int64_t n = 1;
  for (size_t d = 0; d < mask.size(); ++d) {
    if (mask[d]) n *= shape[d];
  }
  return n;
}

void check_floating(const char* op, const Tensor& x) {
  EMBER_CHECK(is_floating(x.dtype()), op << ": could not infer the output dtype: the input (shape "
                                         << shape_str(x.shape()) << ") must be floating point, but got "
                                         << dtype_name(x.dtype())
                                         << "; convert it first, e.g. with .to(DType::Float32)");
}

// Floating-only ops promote integral and bool inputs to float32.
Tensor to_floating(const Tensor& x) {
  if (is_floating(x.dtype())) return x;
  NoGradGuard no_grad;
  return x.to(kDefaultFloat);
}

// The gradient of a max/min over `mask` (result y): split evenly among the
// elements equal to y, or among the NaNs when y is NaN (PyTorch's
// evenly_distribute_backward).
Tensor evenly_distribute(const Tensor& g, const Tensor& x, const Tensor& y, const std::vector<bool>& mask,
                         bool keepdim) {
  Tensor yk = unsqueeze_reduced(y, mask, keepdim), gk = unsqueeze_reduced(g, mask, keepdim);
  Tensor selected = logical_or(eq(x, yk), logical_and(ne(x, x), ne(yk, yk)));
  Tensor count = sum(selected, mask_dims(mask), true);
  return gk / count * selected;
}

// amax/amin and the full max()/min(): values only, ties share the gradient.
Tensor extreme(const char* op, const char* node, ReduceOp rop, const Tensor& x, const Shape& dims, bool keepdim) {
  std::vector<bool> mask = reduced_mask(op, x, dims);
  Tensor out = empty(reduced_shape(x, mask, keepdim), x.dtype(), x.device());
  run_reduce(op, rop, x, mask, &out, nullptr);
  if (needs_grad(x)) {
    SavedTensor sx(x), sy = SavedTensor::output(out);
    record(node, {&out}, {x}, [=](const TensorList& g) {
      return TensorList{evenly_distribute(g[0], sx.unpack(node), sy.unpack(node), mask, keepdim)};
    });
  }
  return out;
}

// max/min along one dim: values and the int64 index of each; the gradient
// goes to that index alone.
std::pair<Tensor, Tensor> extreme_dim(const char* op, const char* node, ReduceOp rop, const Tensor& x, int64_t dim,
                                      bool keepdim) {
  std::vector<bool> mask = reduced_mask(op, x, {dim});
  Shape shape = reduced_shape(x, mask, keepdim);
  Tensor values = empty(shape, x.dtype(), x.device());
  Tensor indices = empty(shape, DType::Int64, x.device());
  run_reduce(op, rop, x, mask, &values, &indices);
  if (needs_grad(x)) {
    SavedTensor si(indices);
    Shape in_shape = x.shape();
    record(node, {&values}, {x}, [=](const TensorList& g) {
      if (in_shape.empty()) return TensorList{g[0]};
      Tensor ik = unsqueeze_reduced(si.unpack(node), mask, keepdim);
      Tensor gk = unsqueeze_reduced(g[0], mask, keepdim);
      int64_t d = mask_dims(mask)[0];
      Shape pos_shape(in_shape.size(), 1);
      pos_shape[size_t(d)] = in_shape[size_t(d)];
      Tensor pos = arange(in_shape[size_t(d)], DType::Int64, g[0].device()).view(pos_shape);
      return TensorList{where(eq(pos, ik), gk, 0.0)};
    });
  }
  return {values, indices};
}

Tensor arg_extreme(const char* op, ReduceOp rop, const Tensor& x, const Shape& dims, bool keepdim) {
  std::vector<bool> mask = reduced_mask(op, x, dims);
  Tensor indices = empty(reduced_shape(x, mask, keepdim), DType::Int64, x.device());
  run_reduce(op, rop, x, mask, nullptr, &indices);
  return indices;
}

// var and std (std = sqrt(var), in one kernel pass).
Tensor var_std(const char* op, const char* node, ReduceOp rop, const Tensor& x, const Shape& dims, int64_t correction,
               bool keepdim) {
  check_floating(op, x);
  std::vector<bool> mask = reduced_mask(op, x, dims);
  Tensor out = empty(reduced_shape(x, mask, keepdim), x.dtype(), x.device());
  run_reduce(op, rop, x, mask, &out, nullptr, double(correction));
  if (needs_grad(x)) {
    SavedTensor sx(x), sy = SavedTensor::output(out);
    bool is_std = rop == ReduceOp::Std;
    // d var / dx = 2 (x - mean) / (N - correction); the scale is inf once
    // N <= correction, matching the forward's inf/NaN.
    double dof = double(reduced_count(x.shape(), mask)) - double(correction);
    double scale = dof > 0 ? 2.0 / dof : std::numeric_limits<double>::infinity();
    record(node, {&out}, {x}, [=](const TensorList& g) {
      Tensor xv = sx.unpack(node);
      Tensor gv = g[0];
      if (is_std) {
        // d std = d var / (2 std), taken as 0 where std == 0 (as PyTorch does).
        Tensor y = sy.unpack(node);
        gv = where(eq(y, 0.0), 0.0, gv / (y * 2.0));
      }
      Tensor centered = xv - mean(xv, mask_dims(mask), true);
      return TensorList{unsqueeze_reduced(gv, mask, keepdim) * centered * scale};
    });
  }
  return out;
}

}  // namespace

Tensor sum(const Tensor& x, const Shape& dims, bool keepdim) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor cx = x;
    if (autocast_state::float32_inputs({&cx})) return sum(cx, dims, keepdim);
  }
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
  EMBER_CHECK(lead >= 0,
              "sum_to: shape " << shape_str(x.shape()) << " cannot be summed to the larger shape " << shape_str(shape));
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

Tensor mean(const Tensor& x, const Shape& dims, bool keepdim) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor cx = x;
    if (autocast_state::float32_inputs({&cx})) return mean(cx, dims, keepdim);
  }
  check_floating("mean", x);
  std::vector<bool> mask = reduced_mask("mean", x, dims);
  Tensor out = empty(reduced_shape(x, mask, keepdim), x.dtype(), x.device());
  run_reduce("mean", ReduceOp::Mean, x, mask, &out, nullptr);
  if (needs_grad(x)) {
    Shape in_shape = x.shape();
    double count = double(reduced_count(in_shape, mask));
    record("MeanBackward", {&out}, {x}, [mask, keepdim, in_shape, count](const TensorList& g) {
      return TensorList{unsqueeze_reduced(g[0], mask, keepdim).expand(in_shape) / count};
    });
  }
  return out;
}

Tensor amax(const Tensor& x, const Shape& dims, bool keepdim) {
  return extreme("amax", "AmaxBackward", ReduceOp::Max, x, dims, keepdim);
}
Tensor amin(const Tensor& x, const Shape& dims, bool keepdim) {
  return extreme("amin", "AminBackward", ReduceOp::Min, x, dims, keepdim);
}

std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim("max", "MaxBackward", ReduceOp::Max, x, dim, keepdim);
}
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim("min", "MinBackward", ReduceOp::Min, x, dim, keepdim);
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extreme("argmax", ReduceOp::ArgMax, x, {dim}, keepdim);
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extreme("argmin", ReduceOp::ArgMin, x, {dim}, keepdim);
}
// Reducing every dim in order gives the row-major flat index.
Tensor argmax(const Tensor& x) { return arg_extreme("argmax", ReduceOp::ArgMax, x, {}, false); }
Tensor argmin(const Tensor& x) { return arg_extreme("argmin", ReduceOp::ArgMin, x, {}, false); }

Tensor var(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor cx = x;
    if (autocast_state::float32_inputs({&cx})) return var(cx, dims, correction, keepdim);
  }
  return var_std("var", "VarBackward", ReduceOp::Var, x, dims, correction, keepdim);
}
Tensor std(const Tensor& x, const Shape& dims, int64_t correction, bool keepdim) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor cx = x;
    if (autocast_state::float32_inputs({&cx})) return ember::std(cx, dims, correction, keepdim);
  }
  return var_std("std", "StdBackward", ReduceOp::Std, x, dims, correction, keepdim);
}

Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim) {
  if (autocast_state::any_enabled()) [[unlikely]] {
    Tensor cx = x;
    if (autocast_state::float32_inputs({&cx})) return logsumexp(cx, dims, keepdim);
  }
  std::vector<bool> mask = reduced_mask("logsumexp", x, dims);
  Tensor in = to_floating(x);
  Tensor out = empty(reduced_shape(x, mask, keepdim), in.dtype(), x.device());
  run_reduce("logsumexp", ReduceOp::LogSumExp, in, mask, &out, nullptr);
  if (needs_grad(x)) {
    SavedTensor sx(x), sy = SavedTensor::output(out);
    record("LogsumexpBackward", {&out}, {x}, [=](const TensorList& g) {
      Tensor yk = unsqueeze_reduced(sy.unpack("LogsumexpBackward"), mask, keepdim);
      return TensorList{unsqueeze_reduced(g[0], mask, keepdim) * exp(sx.unpack("LogsumexpBackward") - yk)};
    });
  }
  return out;
}

Tensor Tensor::sum() const { return ember::sum(*this); }
Tensor Tensor::sum(const Shape& dims, bool keepdim) const { return ember::sum(*this, dims, keepdim); }
Tensor Tensor::mean() const { return ember::mean(*this); }
Tensor Tensor::mean(const Shape& dims, bool keepdim) const { return ember::mean(*this, dims, keepdim); }
Tensor Tensor::max() const { return extreme("max", "MaxBackward", ReduceOp::Max, *this, {}, false); }
Tensor Tensor::min() const { return extreme("min", "MinBackward", ReduceOp::Min, *this, {}, false); }
std::pair<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const { return ember::max(*this, dim, keepdim); }
std::pair<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const { return ember::min(*this, dim, keepdim); }
Tensor Tensor::argmax(int64_t dim, bool keepdim) const { return ember::argmax(*this, dim, keepdim); }
Tensor Tensor::argmin(int64_t dim, bool keepdim) const { return ember::argmin(*this, dim, keepdim); }
Tensor Tensor::var(const Shape& dims, int64_t correction, bool keepdim) const {
  return ember::var(*this, dims, correction, keepdim);
}
Tensor Tensor::std(const Shape& dims, int64_t correction, bool keepdim) const {
  return ember::std(*this, dims, correction, keepdim);
}
Tensor Tensor::logsumexp(const Shape& dims, bool keepdim) const { return ember::logsumexp(*this, dims, keepdim); }

}  // namespace ember
