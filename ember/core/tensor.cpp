// Tensor metadata, views (with their backward) and printing.
#include "ember/core/tensor.h"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <numeric>
#include <ostream>
#include <sstream>

#include "ember/core/autograd/function.h"
#include "ember/core/memory_format.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

using autograd::needs_grad;
using autograd::record;

std::string shape_str(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

TensorImpl::TensorImpl(std::shared_ptr<Storage> st, Shape sz, Shape str, int64_t off, DType dt)
    : storage(std::move(st)), sizes(std::move(sz)), strides(std::move(str)), offset(off), dtype(dt) {}

TensorImpl::~TensorImpl() = default;

using detail::wrap_dim;

namespace {

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>(base.storage(), std::move(sizes), std::move(strides), offset, base.dtype());
  impl->is_view = true;
  return Tensor(std::move(impl));
}

// Infers one -1 in `shape` from numel; errors name the op and both shapes.
Shape infer_shape(const char* op, const Shape& shape, int64_t numel, const Shape& from) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      EMBER_CHECK(infer < 0, op << ": only one dimension can be -1, got " << shape_str(shape));
      infer = int64_t(i);
    } else {
      EMBER_CHECK(out[i] >= 0, op << ": invalid size " << out[i] << " in " << shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    EMBER_CHECK(known != 0 && numel % known == 0, op << ": shape " << shape_str(shape)
                                                     << " is invalid for input of shape " << shape_str(from) << " ("
                                                     << numel << " elements)");
    out[infer] = numel / known;
  }
  EMBER_CHECK(shape_numel(out) == numel, op << ": shape " << shape_str(shape) << " is invalid for input of shape "
                                            << shape_str(from) << " (" << numel << " elements)");
  return out;
}

// Strides that view `sizes` (old layout) as `new_sizes` without a copy, or
// an empty optional when the layout does not allow it (PyTorch's
// computeStride).
std::optional<Shape> view_strides(const Shape& sizes, const Shape& strides, const Shape& new_sizes) {
  if (sizes.empty()) return contiguous_strides(new_sizes);
  int64_t numel = shape_numel(sizes);
  if (numel == 0) return contiguous_strides(new_sizes);
  Shape out(new_sizes.size());
  int64_t view_d = int64_t(new_sizes.size()) - 1;
  int64_t chunk_base_stride = strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(sizes.size()) - 1; d >= 0; --d) {
    tensor_numel *= sizes[d];
    if (d == 0 || (sizes[d - 1] != 1 && strides[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (d > 0) {
        chunk_base_stride = strides[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return out;
}

// The gradient of slice: g written into zeros of the input's shape. Under
// create_graph it records its own backward, the same slice of the incoming
// gradient (writing g through a view would be an in-place op on a view).
Tensor slice_backward(const Tensor& g, const Shape& in_shape, int64_t d, int64_t start, int64_t end, int64_t step) {
  Tensor gi = zeros(in_shape, g.dtype(), g.device());
  {
    NoGradGuard no_grad;
    gi.slice(d, start, end, step).copy_(g);
  }
  if (needs_grad(g)) {
    record("SliceBackwardBackward", {&gi}, {g},
           [d, start, end, step](const TensorList& gg) { return TensorList{gg[0].slice(d, start, end, step)}; });
  }
  return gi;
}

}  // namespace

namespace {

// Storage for `shape`'s elements at `strides` (dense, so numel elements).
Tensor allocate(const Shape& shape, Shape strides, DType dtype, Device device) {
  int64_t extent = 1;  // the product of the sizes, which the strides reach
  for (int64_t s : shape) {
    EMBER_CHECK(s >= 0, "empty: negative size in shape " << shape_str(shape));
    EMBER_CHECK(!__builtin_mul_overflow(extent, std::max<int64_t>(s, 1), &extent),
                "empty: shape " << shape_str(shape) << " has more elements than int64 can index");
  }
  int64_t n = shape_numel(shape);
  auto storage = std::make_shared<Storage>(size_t(n) * dtype_size(dtype), device);
  return Tensor(std::make_shared<TensorImpl>(std::move(storage), shape, std::move(strides), 0, dtype));
}

}  // namespace

Tensor empty(const Shape& shape, DType dtype, Device device) {
  return allocate(shape, contiguous_strides(shape), dtype, device);
}

Tensor empty(const Shape& shape, DType dtype, Device device, MemoryFormat format) {
  return allocate(shape, format_strides("empty", shape, format), dtype, device);
}

Tensor empty_strided(const Shape& shape, const Shape& strides, DType dtype, Device device) {
  EMBER_CHECK(strides.size() == shape.size() && non_overlapping_and_dense(shape, strides),
              "empty_strided: strides " << shape_str(strides) << " are not a dense, non-overlapping layout of shape "
                                        << shape_str(shape));
  return allocate(shape, strides, dtype, device);
}

int64_t Tensor::size(int64_t d) const { return impl_->sizes[wrap_dim("size", d, dim(), shape())]; }
int64_t Tensor::stride(int64_t d) const { return impl_->strides[wrap_dim("stride", d, dim(), shape())]; }
int64_t Tensor::numel() const { return shape_numel(impl_->sizes); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    int64_t s = impl_->sizes[i];
    if (s == 0) return true;
    if (s != 1 && impl_->strides[i] != expected) return false;
    expected *= s;
  }
  return true;
}

bool Tensor::is_contiguous(MemoryFormat format) const { return strides_follow(impl_->sizes, impl_->strides, format); }

bool Tensor::is_non_overlapping_and_dense() const { return non_overlapping_and_dense(impl_->sizes, impl_->strides); }

MemoryFormat Tensor::suggest_memory_format() const {
  return strides_like_channels_last(impl_->sizes, impl_->strides) ? MemoryFormat::ChannelsLast
                                                                  : MemoryFormat::Contiguous;
}

void* Tensor::data_ptr() const {
  EMBER_CHECK(defined(), "data_ptr: called on an undefined tensor");
  return static_cast<char*>(impl_->storage->data()) + impl_->offset * int64_t(element_size());
}

// ---------------- views ----------------

Tensor Tensor::as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const {
  EMBER_CHECK(sizes.size() == strides.size(),
              "as_strided: sizes " << shape_str(sizes) << " and strides " << shape_str(strides) << " differ in length");
  EMBER_CHECK(!needs_grad(*this),
              "as_strided: not differentiable in ember; use view, narrow, permute or expand, "
              "which are");
  EMBER_CHECK(offset >= 0, "as_strided: negative storage offset " << offset << " for sizes " << shape_str(sizes));
  int64_t max_index = offset;
  for (size_t i = 0; i < sizes.size(); ++i) {
    EMBER_CHECK(sizes[i] >= 0 && strides[i] >= 0,
                "as_strided: negative size or stride in " << shape_str(sizes) << " / " << shape_str(strides));
    if (sizes[i] == 0) max_index = -1;
    if (max_index >= 0) max_index += (sizes[i] - 1) * strides[i];
  }
  EMBER_CHECK(max_index < 0 || size_t(max_index + 1) * element_size() <= storage()->nbytes(),
              "as_strided: sizes " << shape_str(sizes) << ", strides " << shape_str(strides) << " and offset " << offset
                                   << " reach past the storage of " << storage()->nbytes() << " bytes");
  return make_view(*this, sizes, strides, offset);
}

Tensor Tensor::view(const Shape& shape) const {
  Shape new_sizes = infer_shape("view", shape, numel(), sizes());
  auto st = view_strides(sizes(), strides(), new_sizes);
  EMBER_CHECK(st.has_value(), "view: shape " << shape_str(shape) << " is incompatible with the strides "
                                             << shape_str(strides()) << " of a tensor of shape " << shape_str(sizes())
                                             << " (at least one dimension spans two contiguous subspaces); use "
                                                "reshape(), which copies when it must");
  Tensor out = make_view(*this, new_sizes, *st, storage_offset());
  if (needs_grad(*this)) {
    Shape in_shape = sizes();
    record("ViewBackward", {&out}, {*this},
           [in_shape](const TensorList& g) { return TensorList{g[0].reshape(in_shape)}; });
  }
  return out;
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape new_sizes = infer_shape("reshape", shape, numel(), sizes());
  if (view_strides(sizes(), strides(), new_sizes)) return view(new_sizes);
  return contiguous().view(new_sizes);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  int64_t n = dim();
  if (n == 0) return *this;
  d0 = wrap_dim("transpose", d0, n, sizes());
  d1 = wrap_dim("transpose", d1, n, sizes());
  Shape sz = sizes(), st = strides();
  std::swap(sz[d0], sz[d1]);
  std::swap(st[d0], st[d1]);
  Tensor out = make_view(*this, sz, st, storage_offset());
  if (needs_grad(*this)) {
    record("TransposeBackward", {&out}, {*this},
           [d0, d1](const TensorList& g) { return TensorList{g[0].transpose(d0, d1)}; });
  }
  return out;
}

Tensor Tensor::t() const {
  EMBER_CHECK(dim() <= 2, "t: expects a tensor with <= 2 dimensions, but got shape " << shape_str(sizes()));
  return dim() < 2 ? *this : transpose(0, 1);
}

Tensor Tensor::permute(const Shape& dims) const {
  int64_t n = dim();
  EMBER_CHECK(int64_t(dims.size()) == n, "permute: number of dims " << shape_str(dims)
                                                                    << " does not match tensor of shape "
                                                                    << shape_str(sizes()));
  Shape sz(n), st(n), inverse(n);
  std::vector<bool> seen(n, false);
  for (int64_t i = 0; i < n; ++i) {
    int64_t d = wrap_dim("permute", dims[i], n, sizes());
    EMBER_CHECK(!seen[d], "permute: dim " << d << " repeats in " << shape_str(dims));
    seen[d] = true;
    sz[i] = sizes()[d];
    st[i] = strides()[d];
    inverse[d] = i;
  }
  Tensor out = make_view(*this, sz, st, storage_offset());
  if (needs_grad(*this)) {
    record("PermuteBackward", {&out}, {*this},
           [inverse](const TensorList& g) { return TensorList{g[0].permute(inverse)}; });
  }
  return out;
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  EMBER_CHECK(dim() > 0, "slice: cannot slice a 0-dim tensor");
  d = wrap_dim("slice", d, dim(), sizes());
  EMBER_CHECK(step > 0, "slice: step must be positive, got " << step);
  int64_t n = sizes()[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape sz = sizes(), st = strides();
  sz[d] = (end - start + step - 1) / step;
  st[d] *= step;
  Tensor out = make_view(*this, sz, st, storage_offset() + start * strides()[d]);
  if (needs_grad(*this)) {
    Shape in_shape = sizes();
    record("SliceBackward", {&out}, {*this}, [in_shape, d, start, end, step](const TensorList& g) {
      return TensorList{slice_backward(g[0], in_shape, d, start, end, step)};
    });
  }
  return out;
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  EMBER_CHECK(dim() > 0, "narrow: cannot narrow a 0-dim tensor");
  int64_t wd = wrap_dim("narrow", d, dim(), sizes());
  int64_t n = sizes()[wd];
  if (start < 0 && start >= -n) start += n;
  EMBER_CHECK(start >= 0 && length >= 0 && start + length <= n,
              "narrow: start " << start << " + length " << length << " exceeds dimension " << wd << " of size " << n
                               << " (shape " << shape_str(sizes()) << ")");
  return slice(wd, start, start + length, 1);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  EMBER_CHECK(dim() > 0, "select: cannot index a 0-dim tensor");
  d = wrap_dim("select", d, dim(), sizes());
  int64_t n = sizes()[d];
  EMBER_CHECK(index >= -n && index < n, "select: index " << index << " is out of bounds for dimension " << d
                                                         << " with size " << n << " (shape " << shape_str(sizes())
                                                         << ")");
  if (index < 0) index += n;
  return narrow(d, index, 1).squeeze(d);
}

Tensor Tensor::expand(const Shape& shape) const {
  int64_t n = int64_t(shape.size());
  EMBER_CHECK(n >= dim(), "expand: the number of sizes provided (" << n << ") must be >= the number of dims of shape "
                                                                   << shape_str(sizes()));
  Shape sz(n), st(n);
  for (int64_t i = n - 1; i >= 0; --i) {
    int64_t j = i - (n - dim());
    int64_t have = j >= 0 ? sizes()[j] : 1;
    int64_t want = shape[i] == -1 ? have : shape[i];
    EMBER_CHECK(j >= 0 || shape[i] != -1,
                "expand: -1 is not allowed for the new leading dim " << i << " in " << shape_str(shape));
    EMBER_CHECK(want >= 0, "expand: invalid size " << want << " at dim " << i << " of the target " << shape_str(shape)
                                                   << " (sizes are >= 0, or -1 to keep the tensor's size); tensor "
                                                   << shape_str(sizes()));
    EMBER_CHECK(have == want || have == 1, "expand: the expanded size " << want << " must match the existing size "
                                                                        << have << " at non-singleton dim " << i
                                                                        << "; target " << shape_str(shape)
                                                                        << ", tensor " << shape_str(sizes()));
    sz[i] = want;
    st[i] = (j >= 0 && have == want) ? strides()[j] : 0;
  }
  Tensor out = make_view(*this, sz, st, storage_offset());
  if (needs_grad(*this)) {
    Shape in_shape = sizes();
    record("ExpandBackward", {&out}, {*this},
           [in_shape](const TensorList& g) { return TensorList{sum_to(g[0], in_shape)}; });
  }
  return out;
}

Tensor Tensor::squeeze() const {
  Shape sz;
  for (int64_t s : sizes())
    if (s != 1) sz.push_back(s);
  return sz.size() == sizes().size() ? *this : reshape(sz);
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) return *this;
  d = wrap_dim("squeeze", d, dim(), sizes());
  if (sizes()[d] != 1) return *this;
  Shape sz = sizes(), st = strides();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  Tensor out = make_view(*this, sz, st, storage_offset());
  if (needs_grad(*this)) {
    record("SqueezeBackward", {&out}, {*this}, [d](const TensorList& g) { return TensorList{g[0].unsqueeze(d)}; });
  }
  return out;
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim("unsqueeze", d, dim() + 1, sizes());
  Shape sz = sizes(), st = strides();
  int64_t stride = d < dim() ? sizes()[d] * strides()[d] : 1;
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  Tensor out = make_view(*this, sz, st, storage_offset());
  if (needs_grad(*this)) {
    record("UnsqueezeBackward", {&out}, {*this}, [d](const TensorList& g) { return TensorList{g[0].squeeze(d)}; });
  }
  return out;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  start_dim = wrap_dim("flatten", start_dim, dim(), sizes());
  end_dim = wrap_dim("flatten", end_dim, dim(), sizes());
  EMBER_CHECK(start_dim <= end_dim, "flatten: start_dim " << start_dim << " must not come after end_dim " << end_dim);
  if (start_dim == end_dim) return *this;
  Shape sz(sizes().begin(), sizes().begin() + start_dim);
  int64_t flat = 1;
  for (int64_t i = start_dim; i <= end_dim; ++i) flat *= sizes()[i];
  sz.push_back(flat);
  sz.insert(sz.end(), sizes().begin() + end_dim + 1, sizes().end());
  return reshape(sz);
}

Tensor Tensor::unflatten(int64_t d, const Shape& new_sizes) const {
  d = wrap_dim("unflatten", d, dim(), sizes());
  Shape inner = infer_shape("unflatten", new_sizes, sizes()[d], {sizes()[d]});
  Shape sz(sizes().begin(), sizes().begin() + d);
  sz.insert(sz.end(), inner.begin(), inner.end());
  sz.insert(sz.end(), sizes().begin() + d + 1, sizes().end());
  return view(sz);
}

Tensor Tensor::detach() const {
  return Tensor(std::make_shared<TensorImpl>(storage(), sizes(), strides(), storage_offset(), dtype()));
}

// ---------------- copies ----------------

namespace {

// A copy of t laid out at `strides`, recorded as `name` (the gradient
// passes through unchanged).
Tensor copy_with_strides(const Tensor& t, const Shape& strides, const char* name) {
  Tensor out = empty_strided(t.sizes(), strides, t.dtype(), t.device());
  {
    NoGradGuard no_grad;
    out.copy_(t);
  }
  if (needs_grad(t)) record(name, {&out}, {t}, [](const TensorList& g) { return TensorList{g[0]}; });
  return out;
}

}  // namespace

Tensor Tensor::contiguous() const { return contiguous(MemoryFormat::Contiguous); }

Tensor Tensor::contiguous(MemoryFormat format) const {
  if (is_contiguous(format)) return *this;
  return copy_with_strides(*this, format_strides("contiguous", sizes(), format), "CloneBackward");
}

Tensor Tensor::clone() const { return copy_with_strides(*this, preserved_strides(*this), "CloneBackward"); }

Tensor Tensor::to(MemoryFormat format) const {
  if (format == MemoryFormat::Preserve || suggest_memory_format() == format) return *this;
  return copy_with_strides(*this, format_strides("to", sizes(), format), "ToCopyBackward");
}

Tensor Tensor::to(DType dt) const { return to(device(), dt); }
Tensor Tensor::to(Device dev) const { return to(dev, dtype()); }

Tensor Tensor::to(Device dev, DType dt) const {
  if (dev == device() && dt == dtype()) return *this;
  Tensor out = empty_strided(sizes(), preserved_strides(*this), dt, dev);
  {
    NoGradGuard no_grad;
    out.copy_(*this);
  }
  // A conversion to an integral dtype ends the graph, as in PyTorch.
  if (needs_grad(*this) && is_floating(dt)) {
    DType in_dt = dtype();
    Device in_dev = device();
    record("ToCopyBackward", {&out}, {*this},
           [in_dt, in_dev](const TensorList& g) { return TensorList{g[0].to(in_dev, in_dt)}; });
  }
  return out;
}

// ---------------- printing ----------------

namespace detail {
Scalar item_scalar(const Tensor& t) {
  EMBER_CHECK(t.defined(), "item: called on an undefined tensor");
  EMBER_CHECK(t.numel() == 1, "item: a Tensor with " << t.numel() << " elements (shape " << shape_str(t.shape())
                                                     << ") cannot be converted to a scalar");
  Tensor c = t.is_cuda() ? t.detach().to(kCPU) : t;
  return EMBER_DISPATCH_DTYPE(c.dtype(), "item",
                              [&]<typename T>() -> Scalar { return Scalar(*static_cast<T*>(c.data_ptr())); });
}
}  // namespace detail

namespace {
// A tensor's values in row-major order, kept exact for its dtype (int64
// beyond 2^53 too) and printed in the dtype's style.
struct PrintValues {
  explicit PrintValues(const Tensor& t) : dtype(t.dtype()) {
    if (is_floating(dtype)) floats = to_vector<double>(t);
    else ints = to_vector<int64_t>(t);
  }
  void print(std::ostream& os, int64_t i) const {
    if (dtype == DType::Bool) os << (ints[size_t(i)] ? "true" : "false");
    else if (is_floating(dtype)) os << floats[size_t(i)];
    else os << ints[size_t(i)];
  }
  DType dtype;
  std::vector<double> floats;
  std::vector<int64_t> ints;
};

// Prints dims [dim, ...) from element `index` on; a tensor of more than 1000
// elements shows the first and last 3 entries of each dim.
void print_values(std::ostream& os, const PrintValues& v, bool summarize_large, int64_t dim, int64_t& index,
                  const Shape& shape, int indent) {
  const int64_t edge = 3;
  if (shape.empty()) {
    v.print(os, 0);
    return;
  }
  os << "[";
  int64_t n = shape[dim];
  bool summarize = summarize_large && n > 2 * edge;
  bool innermost = dim + 1 == int64_t(shape.size());
  int64_t inner = 1;
  for (size_t i = dim + 1; i < shape.size(); ++i) inner *= shape[i];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && i == edge) {
      os << (innermost ? "..., " : "...,\n" + std::string(indent + 1, ' '));
      index += (n - 2 * edge) * inner;
      i = n - edge - 1;
      continue;
    }
    if (innermost) v.print(os, index++);
    else print_values(os, v, summarize_large, dim + 1, index, shape, indent + 1);
    if (i + 1 < n) os << (innermost ? ", " : ",\n" + std::string(indent + 1, ' '));
  }
  os << "]";
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream os;
  os << "tensor(";
  int64_t index = 0;
  os << std::setprecision(6);
  print_values(os, PrintValues(*this), numel() > 1000, 0, index, sizes(), 7);
  os << ", dtype=" << dtype_name(dtype()) << ", device=" << device() << ", shape=" << shape_str(sizes());
  if (requires_grad()) os << ", requires_grad=true";
  if (grad_fn()) os << ", grad_fn=" << grad_fn()->name();
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace ember
