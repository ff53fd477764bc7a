// Front-ends of the indexing ops: index_select, gather, scatter_add,
// embedding, one_hot, and the index_add their backward uses.
//
// Contract (PyTorch's):
// - Indices are int64 or int32 tensors on the input's device; every value
//   must lie in [0, size) of the indexed dim (no negative indexing). A bad
//   value is an ember::Error from the kernel naming the op, the value, the
//   dim and its size, raised before anything is written. On CUDA that check
//   synchronizes the stream once per op (see ember/core/ops/index_kernels.h).
// - index_select takes a 0-D or 1-D index. gather and scatter_add take an
//   index with the input's number of dims and no larger than the input in
//   any dim but `dim` (and, for scatter_add, no larger than src in any dim);
//   scatter_add needs src of the input's dtype. 0-dim inputs act as 1-D of
//   size 1.
// - embedding(weight (N, D), indices) has shape indices.shape + [D]; its
//   backward adds rows, so repeated indices add up, in a fixed order: the
//   weight gradient is the same bits on every run and on CPU and CUDA
//   (ember/core/ops/embedding_kernels.h).
// - one_hot reads the class values on the host to validate them and to find
//   max + 1 (PyTorch's one_hot also synchronizes on CUDA for that).
// - Backward: index_select -> index_add into zeros; embedding -> the
//   embedding_backward kernel (whose own backward is embedding); gather ->
//   scatter_add into zeros; scatter_add -> g for the input, gather(g)
//   (zero-padded to src's shape) for src. Indices are saved with their version, so changing
//   one in place before backward is an error.
#include <algorithm>
#include <string>
#include <utility>

#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/embedding_kernels.h"
#include "ember/core/ops/index_kernels.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

KernelStub<IndexKernelFn> gather_stub("gather");
KernelStub<IndexKernelFn> scatter_add_stub("scatter_add");
KernelStub<EmbeddingBackwardKernelFn> embedding_backward_stub("embedding_backward");

namespace {
thread_local const IndexErrorContext* innermost_context = nullptr;
}  // namespace

IndexErrorContext::IndexErrorContext(std::string text) : text_(std::move(text)), outer_(innermost_context) {
  innermost_context = this;
}

IndexErrorContext::~IndexErrorContext() { innermost_context = outer_; }

const std::string* IndexErrorContext::current() {
  return innermost_context != nullptr ? &innermost_context->text_ : nullptr;
}

std::string index_error_text(const char* op, int64_t dim, int64_t dim_size, int64_t value, const std::string& context) {
  return context + op + ": index " + std::to_string(value) + " is out of bounds for dim " + std::to_string(dim) +
         " with size " + std::to_string(dim_size) + " (valid indices: 0 to " + std::to_string(dim_size - 1) + ")";
}

void index_out_of_range(const IndexArgs& a, int64_t value) {
  const std::string* context = IndexErrorContext::current();
  EMBER_FAIL(index_error_text(a.op, a.dim, a.dim_size, value, context != nullptr ? *context : std::string()));
}

using autograd::needs_grad;
using autograd::record;
using autograd::SavedTensor;

using detail::describe;
using detail::wrap_dim;

namespace {

void check_index(const char* op, const Tensor& index, const Tensor& x) {
  EMBER_CHECK(x.defined(), op << ": the input is undefined");
  EMBER_CHECK(index.defined(), op << ": the index is undefined");
  EMBER_CHECK(is_integral(index.dtype()), op << ": expected an int64 or int32 index, got " << describe(index)
                                             << "; convert it with .to(DType::Int64)");
  EMBER_CHECK(index.device() == x.device(), op << ": expected the index on the input's device, but the input is "
                                               << describe(x) << " and the index " << describe(index)
                                               << "; move one with .to(device)");
}

Tensor at_least_1d(const Tensor& t) { return t.dim() == 0 ? t.reshape({1}) : t; }

// t seen with `sizes` (no larger than t's except along dim) and stride 0
// along dim: the base address for each position of the iteration.
Tensor restride(const Tensor& t, const Shape& sizes, int64_t dim) {
  Shape strides = t.strides();
  strides[dim] = 0;
  return Tensor(std::make_shared<TensorImpl>(t.storage(), sizes, strides, t.storage_offset(), t.dtype()));
}

// A 1-D index laid along dim of `sizes`, repeated (stride 0) over the others.
Tensor spread(const Tensor& index, const Shape& sizes, int64_t dim) {
  Shape strides(sizes.size(), 0);
  strides[dim] = index.stride(0);
  return Tensor(std::make_shared<TensorImpl>(index.storage(), sizes, strides, index.storage_offset(), index.dtype()));
}

IndexArgs index_args(const char* op, const Tensor& operand0, const Tensor& operand1, const Tensor& index_iter,
                     const Tensor& indexed, int64_t dim, const Tensor& index_dense) {
  IndexArgs a;
  a.device = indexed.device().index;
  a.iter = make_elementwise_args(op, operand0, {&operand1, &index_iter});
  a.dim_stride = indexed.stride(dim);
  a.dim_size = indexed.size(dim);
  a.dim = dim;
  a.index = index_dense.data_ptr();
  a.index_numel = index_dense.numel();
  a.dtype = indexed.dtype();
  a.index_dtype = index_dense.dtype();
  a.op = op;
  return a;
}

// out[p] = x[p; dim <- index[p]] over out's shape. index_dense holds every
// index value (for the range check); index_iter lays them over out's shape.
void run_gather(const char* op, const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index_iter,
                const Tensor& index_dense) {
  Tensor xr = restride(x, out.shape(), dim);
  gather_stub(x.device().type)(index_args(op, out, xr, index_iter, x, dim, index_dense));
}

// target[p; dim <- index[p]] += src[p] over src's shape.
void run_scatter_add(const char* op, const Tensor& target, int64_t dim, const Tensor& index_iter,
                     const Tensor& index_dense, const Tensor& src) {
  Tensor tr = restride(target, src.shape(), dim);
  scatter_add_stub(target.device().type)(index_args(op, tr, src, index_iter, target, dim, index_dense));
}

// out = the slices of x along dim that a dense 1-D index picks; no history.
void gather_rows(const char* op, const Tensor& out, const Tensor& x, int64_t dim, const Tensor& index) {
  run_gather(op, out, x, dim, spread(index, out.shape(), dim), index);
}

Tensor index_select_1d(const Tensor& x, int64_t dim, const Tensor& index);

// zeros(shape) with row i of src (along dim) added at row index[i]:
// index_select's adjoint. Differentiable in src.
Tensor index_add_into_zeros(const Shape& shape, int64_t dim, const Tensor& index, const Tensor& src) {
  Tensor out = zeros(shape, src.dtype(), src.device());
  run_scatter_add("index_add", out, dim, spread(index, src.shape(), dim), index, src);
  if (needs_grad(src)) {
    SavedTensor saved(index);
    record("IndexAddBackward", {&out}, {src}, [saved, dim](const TensorList& g) {
      return TensorList{index_select_1d(g[0], dim, saved.unpack("IndexAddBackward"))};
    });
  }
  return out;
}

// index_select with a dense 1-D index and a wrapped dim.
Tensor index_select_1d(const Tensor& x, int64_t dim, const Tensor& index) {
  Shape shape = x.shape();
  shape[dim] = index.numel();
  Tensor out = empty(shape, x.dtype(), x.device());
  gather_rows("index_select", out, x, dim, index);
  if (needs_grad(x)) {
    SavedTensor saved(index);
    Shape in_shape = x.shape();
    record("IndexSelectBackward", {&out}, {x}, [saved, dim, in_shape](const TensorList& g) {
      return TensorList{index_add_into_zeros(in_shape, dim, saved.unpack("IndexSelectBackward"), g[0])};
    });
  }
  return out;
}

// embedding's weight gradient: zeros(weight_shape) with row p of rows (the
// output's gradient, (index.numel(), dim), any strides) added into row
// index[p], in increasing p (embedding_kernels.h: the same bits on every
// run and device). Differentiable in rows, whose gradient is embedding's
// forward of the incoming one.
Tensor embedding_weight_grad(const Shape& weight_shape, const Tensor& index, const Tensor& rows) {
  Tensor out = empty(weight_shape, rows.dtype(), rows.device());
  EmbeddingBackwardArgs a;
  a.device = rows.device().index;
  a.grad_weight = out.data_ptr();
  a.grad_out = rows.data_ptr();
  a.grad_out_row_stride = rows.stride(0);
  a.grad_out_col_stride = rows.stride(1);
  a.indices = index.data_ptr();
  a.num_indices = index.numel();
  a.num_embeddings = weight_shape[0];
  a.dim = weight_shape[1];
  a.dtype = rows.dtype();
  a.index_dtype = index.dtype();
  embedding_backward_stub(rows.device().type)(a);
  if (needs_grad(rows)) {
    SavedTensor saved(index);
    record("EmbeddingBackwardBackward", {&out}, {rows}, [saved](const TensorList& g) {
      return TensorList{embedding(g[0], saved.unpack("EmbeddingBackwardBackward"))};
    });
  }
  return out;
}

// t padded with zeros at the end of each dim up to shape (of t's rank).
Tensor pad_to(const Tensor& t, const Shape& shape) {
  Tensor r = t;
  for (int64_t d = 0; d < r.dim(); ++d) {
    if (r.size(d) == shape[d]) continue;
    Shape fill = r.shape();
    fill[d] = shape[d] - r.size(d);
    r = cat({r, zeros(fill, r.dtype(), r.device())}, d);
  }
  return r;
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index("index_select", index, x);
  EMBER_CHECK(index.dim() <= 1, "index_select: the index must be 0-D or 1-D, got shape " << shape_str(index.shape())
                                                                                         << "; flatten it first");
  Tensor flat = index.reshape({-1}).contiguous();
  if (x.dim() == 0) {
    wrap_dim("index_select", dim, 1, x.shape());
    EMBER_CHECK(index.numel() == 1, "index_select: a 0-dim input takes exactly one index, got "
                                        << index.numel() << " (index shape " << shape_str(index.shape()) << ")");
    return index_select_1d(x.reshape({1}), 0, flat).reshape({});
  }
  return index_select_1d(x, wrap_dim("index_select", dim, x.dim(), x.shape()), flat);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index("gather", index, x);
  Tensor xv = at_least_1d(x.detach()), iv = at_least_1d(index);
  int64_t d = wrap_dim("gather", dim, xv.dim(), x.shape());
  EMBER_CHECK(iv.dim() == xv.dim(), "gather: the index must have as many dims as the input, but the input has shape "
                                        << shape_str(x.shape()) << " and the index " << shape_str(index.shape()));
  for (int64_t k = 0; k < xv.dim(); ++k) {
    EMBER_CHECK(k == d || iv.size(k) <= xv.size(k),
                "gather: the index of shape " << shape_str(index.shape()) << " is larger than the input of shape "
                                              << shape_str(x.shape()) << " at dim " << k << " (" << iv.size(k) << " > "
                                              << xv.size(k) << "); only dim " << d << " may differ");
  }
  Tensor idx = iv.contiguous();
  Tensor out = empty(index.shape(), x.dtype(), x.device());
  run_gather("gather", at_least_1d(out), xv, d, idx, idx);
  if (needs_grad(x)) {
    SavedTensor saved(index);
    Shape in_shape = x.shape();
    record("GatherBackward", {&out}, {x}, [saved, d, in_shape](const TensorList& g) {
      Tensor zero = zeros(in_shape, g[0].dtype(), g[0].device());
      return TensorList{scatter_add(zero, d, saved.unpack("GatherBackward"), g[0])};
    });
  }
  return out;
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index("scatter_add", index, x);
  EMBER_CHECK(src.defined(), "scatter_add: src is undefined");
  EMBER_CHECK(src.device() == x.device() && src.dtype() == x.dtype(),
              "scatter_add: expected src of the input's dtype and device, but the input is "
                  << describe(x) << " and src " << describe(src) << "; convert src with .to(device, dtype)");
  Tensor xv = at_least_1d(x.detach()), iv = at_least_1d(index), sv = at_least_1d(src.detach());
  int64_t d = wrap_dim("scatter_add", dim, xv.dim(), x.shape());
  EMBER_CHECK(iv.dim() == xv.dim() && sv.dim() == xv.dim(),
              "scatter_add: the input, index and src must have the same number of dims, but got shapes "
                  << shape_str(x.shape()) << ", " << shape_str(index.shape()) << " and " << shape_str(src.shape()));
  for (int64_t k = 0; k < xv.dim(); ++k) {
    EMBER_CHECK(iv.size(k) <= sv.size(k), "scatter_add: the index of shape "
                                              << shape_str(index.shape()) << " is larger than src of shape "
                                              << shape_str(src.shape()) << " at dim " << k << " (" << iv.size(k)
                                              << " > " << sv.size(k) << ")");
    EMBER_CHECK(k == d || iv.size(k) <= xv.size(k),
                "scatter_add: the index of shape " << shape_str(index.shape()) << " is larger than the input of shape "
                                                   << shape_str(x.shape()) << " at dim " << k << " (" << iv.size(k)
                                                   << " > " << xv.size(k) << "); only dim " << d << " may differ");
  }
  Tensor out = empty(x.shape(), x.dtype(), x.device());
  {
    NoGradGuard no_grad;
    out.copy_(x);
  }
  Tensor idx = iv.contiguous();
  for (int64_t k = 0; k < sv.dim(); ++k) sv = sv.narrow(k, 0, idx.size(k));
  run_scatter_add("scatter_add", at_least_1d(out), d, idx, idx, sv);
  if (needs_grad(x, src)) {
    SavedTensor saved(index);
    Shape src_shape = src.shape();
    bool gx = x.requires_grad(), gsrc = src.requires_grad();
    record("ScatterAddBackward", {&out}, {x, src}, [saved, d, src_shape, gx, gsrc](const TensorList& g) {
      Tensor dsrc;
      if (gsrc) {
        Tensor picked = at_least_1d(gather(g[0], d, saved.unpack("ScatterAddBackward")));
        dsrc = pad_to(picked, src_shape.empty() ? Shape{1} : src_shape).reshape(src_shape);
      }
      return TensorList{gx ? g[0] : Tensor(), dsrc};
    });
  }
  return out;
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  EMBER_CHECK(!(weight.defined() && indices.defined() && is_integral(weight.dtype()) && is_floating(indices.dtype())),
              "embedding: expected (weight, indices) as torch.embedding, table first, but got weight "
                  << describe(weight) << " and indices " << describe(indices)
                  << "; swap the arguments, or call nn::functional::embedding(input, weight) for "
                     "torch.nn.functional.embedding's order");
  check_index("embedding", indices, weight);
  EMBER_CHECK(weight.dim() == 2,
              "embedding: the weight must be 2-D (num_embeddings, embedding_dim), got " << describe(weight));
  Tensor idx = indices.reshape({-1}).contiguous();
  Shape shape = indices.shape();
  shape.push_back(weight.size(1));
  Tensor out = empty(shape, weight.dtype(), weight.device());
  gather_rows("embedding", out.view({idx.numel(), weight.size(1)}), weight, 0, idx);
  if (needs_grad(weight)) {
    SavedTensor saved(idx);
    Shape wshape = weight.shape();
    record("EmbeddingBackward", {&out}, {weight}, [saved, wshape](const TensorList& g) {
      Tensor index = saved.unpack("EmbeddingBackward");
      return TensorList{embedding_weight_grad(wshape, index, g[0].reshape({index.numel(), wshape[1]}))};
    });
  }
  return out;
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  EMBER_CHECK(indices.defined(), "one_hot: the class tensor is undefined");
  EMBER_CHECK(is_integral(indices.dtype()),
              "one_hot: expected an int64 or int32 tensor of class values, got " << describe(indices));
  EMBER_CHECK(num_classes >= -1,
              "one_hot: num_classes must be -1 (meaning max + 1) or non-negative, got " << num_classes);
  std::vector<int64_t> values = to_vector<int64_t>(indices);
  for (int64_t v : values) {
    EMBER_CHECK(v >= 0, "one_hot: class values must be non-negative, got " << v << " (in a tensor of shape "
                                                                           << shape_str(indices.shape()) << ")");
  }
  if (num_classes == -1) {
    EMBER_CHECK(!values.empty(), "one_hot: cannot infer num_classes from an empty tensor (shape "
                                     << shape_str(indices.shape()) << "); pass num_classes");
    num_classes = *std::max_element(values.begin(), values.end()) + 1;
  }
  for (int64_t v : values) {
    EMBER_CHECK(v < num_classes, "one_hot: class value " << v << " is too large for num_classes " << num_classes
                                                         << " (classes must lie in [0, " << num_classes << "))");
  }
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  Tensor out = zeros(shape, DType::Int64, indices.device());
  Tensor idx = indices.unsqueeze(-1).contiguous();
  Tensor one = ones({1}, DType::Int64, indices.device()).expand(idx.shape());
  run_scatter_add("one_hot", out, out.dim() - 1, idx, idx, one);
  return out;
}

}  // namespace ember
