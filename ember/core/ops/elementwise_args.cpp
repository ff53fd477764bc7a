// Broadcasting and dimension coalescing for elementwise kernels.
#include "ember/core/ops/elementwise_args.h"

#include <algorithm>
#include <numeric>

#include "ember/core/memory_format.h"

namespace ember {

Shape broadcast_shapes(const char* op, const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t db = i < n - b.size() ? 1 : b[i - (n - b.size())];
    EMBER_CHECK(da == db || da == 1 || db == 1, op << ": shapes " << shape_str(a) << " and " << shape_str(b)
                                                   << " cannot be broadcast together "
                                                   << "(dim " << i << ": " << da << " vs " << db << ")");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

Tensor empty_elementwise_output(const Shape& shape, DType dtype, Device device,
                                std::initializer_list<const Tensor*> inputs) {
  auto broadcast = [](const Tensor& t) {
    for (int64_t d = 0; d < t.dim(); ++d) {
      if (t.sizes()[size_t(d)] > 1 && t.strides()[size_t(d)] == 0) return true;
    }
    return false;
  };
  for (const Tensor* t : inputs) {
    if (t->shape() != shape || broadcast(*t)) continue;
    if (t->is_contiguous()) break;
    return empty_strided(shape, preserved_strides(*t), dtype, device);
  }
  return empty(shape, dtype, device);
}

namespace {

// Dims are merged before the kernel sees them, so only the merged count is
// limited by kMaxElementwiseDims; this bound is for the scratch arrays.
constexpr int kMaxDims = 64;

// An elementwise problem's dims while they are simplified: the first n
// sizes and, per operand (0: the output), their strides in elements.
struct Dims {
  int n = 0;
  int noperands = 0;
  int64_t sizes[kMaxDims];
  int64_t strides[kMaxElementwiseOperands][kMaxDims];
};

// The output's dims with every operand's strides aligned to them (broadcast
// dims: 0); sets args.data.
Dims aligned_dims(const char* op, const Tensor& out, std::initializer_list<const Tensor*> inputs,
                  ElementwiseArgs& args) {
  const Shape& shape = out.shape();
  const int ndim = int(shape.size());
  Dims dims;
  dims.n = ndim;
  dims.noperands = args.noperands;
  for (int d = 0; d < ndim; ++d) dims.sizes[d] = shape[d];
  args.data[0] = static_cast<char*>(out.data_ptr());
  for (int d = 0; d < ndim; ++d) dims.strides[0][d] = out.strides()[d];
  int k = 1;
  for (const Tensor* t : inputs) {
    int tn = int(t->dim());
    EMBER_CHECK(tn <= ndim, op << ": input of shape " << shape_str(t->shape())
                               << " does not broadcast to the output shape " << shape_str(shape));
    for (int d = 0; d < ndim; ++d) {
      int td = d - (ndim - tn);
      if (td < 0) {
        dims.strides[k][d] = 0;
        continue;
      }
      int64_t s = t->shape()[td];
      EMBER_CHECK(s == shape[d] || s == 1, op << ": input of shape " << shape_str(t->shape())
                                              << " does not broadcast to the output shape " << shape_str(shape));
      dims.strides[k][d] = (s == 1 && shape[d] != 1) ? 0 : t->strides()[td];
    }
    args.data[k] = static_cast<char*>(t->data_ptr());
    ++k;
  }
  return dims;
}

// Drops the size-1 dims.
void drop_unit_dims(Dims& dims) {
  int n = 0;
  for (int d = 0; d < dims.n; ++d) {
    if (dims.sizes[d] == 1) continue;
    dims.sizes[n] = dims.sizes[d];
    for (int o = 0; o < dims.noperands; ++o) dims.strides[o][n] = dims.strides[o][d];
    ++n;
  }
  dims.n = n;
}

// Puts the dims in the output's memory order, outermost dim first (a stable
// sort: dims of equal strides keep their order). Left alone when some
// output stride is 0 (the index kernels iterate such outputs) or already
// row-major.
void order_as_output(Dims& dims) {
  const int n = dims.n;
  bool reorder = false;
  for (int d = 0; d < n; ++d) {
    if (dims.strides[0][d] == 0) {
      reorder = false;
      break;
    }
    if (d > 0 && dims.strides[0][d] > dims.strides[0][d - 1]) reorder = true;
  }
  if (!reorder) return;
  int order[kMaxDims];
  std::iota(order, order + n, 0);
  std::stable_sort(order, order + n, [&](int a, int b) { return dims.strides[0][a] > dims.strides[0][b]; });
  int64_t permuted[kMaxDims];
  for (int d = 0; d < n; ++d) permuted[d] = dims.sizes[order[d]];
  std::copy(permuted, permuted + n, dims.sizes);
  for (int o = 0; o < dims.noperands; ++o) {
    for (int d = 0; d < n; ++d) permuted[d] = dims.strides[o][order[d]];
    std::copy(permuted, permuted + n, dims.strides[o]);
  }
}

// Merges dim d into the one before it when every operand's stride allows it
// (stride[d - 1] == stride[d] * size[d]); no dims left becomes a single
// element of one dim.
void coalesce(Dims& dims) {
  int m = 0;  // coalesced dims written so far
  for (int d = 0; d < dims.n; ++d) {
    if (m > 0) {
      bool mergeable = true;
      for (int o = 0; o < dims.noperands; ++o) {
        if (dims.strides[o][m - 1] != dims.strides[o][d] * dims.sizes[d]) mergeable = false;
      }
      if (mergeable) {
        dims.sizes[m - 1] *= dims.sizes[d];
        for (int o = 0; o < dims.noperands; ++o) dims.strides[o][m - 1] = dims.strides[o][d];
        continue;
      }
    }
    dims.sizes[m] = dims.sizes[d];
    for (int o = 0; o < dims.noperands; ++o) dims.strides[o][m] = dims.strides[o][d];
    ++m;
  }
  if (m == 0) {  // a single element
    dims.sizes[0] = 1;
    for (int o = 0; o < dims.noperands; ++o) dims.strides[o][0] = 1;
    m = 1;
  }
  dims.n = m;
}

}  // namespace

ElementwiseArgs make_elementwise_args(const char* op, const Tensor& out, std::initializer_list<const Tensor*> inputs) {
  ElementwiseArgs args;
  const Shape& shape = out.shape();
  EMBER_CHECK(int(shape.size()) <= kMaxDims,
              op << ": tensors of more than " << kMaxDims << " dims are not supported, got shape " << shape_str(shape));
  EMBER_INTERNAL_ASSERT(inputs.size() + 1 <= size_t(kMaxElementwiseOperands),
                        op << ": " << inputs.size() << " inputs, more than ElementwiseArgs holds");
  args.noperands = int(inputs.size()) + 1;
  args.numel = out.numel();
  args.device = out.device().index;

  Dims dims = aligned_dims(op, out, inputs, args);
  drop_unit_dims(dims);
  order_as_output(dims);
  coalesce(dims);
  const int m = dims.n;
  EMBER_CHECK(m <= kMaxElementwiseDims, op << ": the layouts of the operands (output shape " << shape_str(shape)
                                           << ") leave " << m << " dims after merging, more than the "
                                           << kMaxElementwiseDims
                                           << " elementwise kernels support; call contiguous() "
                                              "on the inputs first");
  args.ndim = m;
  for (int d = 0; d < m; ++d) args.sizes[d] = dims.sizes[d];
  for (int o = 0; o < args.noperands; ++o) {
    for (int d = 0; d < m; ++d) args.strides[o][d] = dims.strides[o][d];
  }
  args.contiguous = m == 1;
  for (int o = 0; o < args.noperands && args.contiguous; ++o) args.contiguous = dims.strides[o][0] == 1;
  return args;
}

}  // namespace ember
