// Joining and splitting: cat, stack, split, chunk.
//
// Contract (PyTorch's):
// - cat promotes dtypes over all its inputs, requires one device, the same
//   rank and equal sizes in every dim but `dim`. As in PyTorch's legacy
//   behaviour, a 1-D tensor of shape [0] is skipped whatever its rank, so
//   cat({empty({0}), x}) is x; it still counts for the result dtype and gets
//   an empty gradient. Values are written with copy_ (the cast kernel).
// - stack requires equal shapes and inserts a new dim at `dim`
//   (-(ndim + 1) .. ndim); it promotes as cat does.
// - split, chunk return views (narrow) sharing x's storage; one
//   SplitBackward/ChunkBackward node joins the pieces' gradients with cat
//   (zeros for pieces that got none), or returns them as one view when they
//   already are adjacent parts of one tensor laid out as x's pieces are.
// - chunk(x, n) follows torch.chunk exactly: pieces of ceil(size / n), so it
//   may return fewer than n pieces (size 5, n 4 gives [2, 2, 1]); a dim of
//   size 0 gives n empty pieces.
#include <algorithm>
#include <string>

#include "ember/core/autograd/function.h"
#include "ember/core/grad_mode.h"
#include "ember/core/memory_format.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"

namespace ember {

using autograd::needs_grad;
using autograd::record;

using detail::wrap_dim;

namespace {

std::string shapes_str(const TensorList& ts) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + shape_str(ts[i].shape());
  return s;
}

bool legacy_empty(const Tensor& t) { return t.dim() == 1 && t.size(0) == 0; }

struct CatPlan {
  Shape shape;
  DType dtype;
  Device device;
  int64_t dim;
};

// Checks the inputs of cat (op names the caller in errors) and lays out the result.
CatPlan plan_cat(const char* op, const TensorList& ts, int64_t dim) {
  EMBER_CHECK(!ts.empty(), op << ": expected a non-empty list of tensors");
  for (size_t i = 0; i < ts.size(); ++i) EMBER_CHECK(ts[i].defined(), op << ": tensor " << i << " is undefined");
  DType dtype = ts[0].dtype();
  Device device = ts[0].device();
  size_t ref = ts.size();  // the first tensor that is not skipped
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    dtype = promote_types(dtype, t.dtype());
    EMBER_CHECK(t.device() == device, op << ": expected all tensors to be on the same device, but tensor 0 is on "
                                         << device << " and tensor " << i << " on " << t.device()
                                         << "; move them to one device with .to(device)");
    EMBER_CHECK(t.dim() > 0, op << ": zero-dimensional tensor (at position " << i
                                << ") cannot be concatenated; unsqueeze it first, or use stack");
    if (ref == ts.size() && !legacy_empty(t)) ref = i;
  }
  if (ref == ts.size()) return {{0}, dtype, device, 0};
  const Tensor& r = ts[ref];
  dim = wrap_dim(op, dim, r.dim(), r.shape());
  Shape shape = r.shape();
  shape[dim] = 0;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (legacy_empty(t)) continue;
    EMBER_CHECK(t.dim() == r.dim(), op << ": tensors must have the same number of dims, but tensor " << i
                                       << " has shape " << shape_str(t.shape()) << " and tensor " << ref
                                       << " has shape " << shape_str(r.shape()) << " (all shapes: " << shapes_str(ts)
                                       << ")");
    for (int64_t d = 0; d < r.dim(); ++d) {
      EMBER_CHECK(d == dim || t.size(d) == r.size(d), op << ": sizes of tensors must match except in dim " << dim
                                                         << ", but tensor " << i << " has size " << t.size(d)
                                                         << " at dim " << d << " where tensor " << ref << " has size "
                                                         << r.size(d) << " (all shapes: " << shapes_str(ts) << ")");
    }
    shape[dim] += t.size(dim);
  }
  return {shape, dtype, device, dim};
}

// Writes the inputs one after another along plan.dim; no history.
Tensor cat_values(const CatPlan& plan, const TensorList& ts) {
  Tensor out = empty(plan.shape, plan.dtype, plan.device);
  NoGradGuard no_grad;
  int64_t offset = 0;
  for (const Tensor& t : ts) {
    if (legacy_empty(t)) continue;
    int64_t n = t.size(plan.dim);
    if (n > 0) out.narrow(plan.dim, offset, n).copy_(t);
    offset += n;
  }
  return out;
}

// The pieces' gradients g as one tensor of x's shape and dtype without a
// copy, when they already are its adjacent parts along dim: one storage,
// the same strides, each at the offset its piece has in x's layout, the
// whole dense (the attention writes the gradients of a split packed
// projection so: attention.cpp). Undefined otherwise, and under
// create_graph (the join must then be a recorded cat).
Tensor joined_in_place(const TensorList& g, const std::vector<int64_t>& sizes, int64_t dim, const Shape& shape,
                       DType dtype) {
  if (GradMode::is_enabled() || g.empty()) return {};
  const Tensor& first = g[0];
  int64_t offset = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const Tensor& p = g[i];
    if (!p.defined() || p.dtype() != dtype || p.storage() != first.storage() || p.strides() != first.strides() ||
        p.dim() != int64_t(shape.size()) || p.size(dim) != sizes[i] ||
        p.storage_offset() != first.storage_offset() + offset * first.stride(dim)) {
      return {};
    }
    for (int64_t d = 0; d < p.dim(); ++d) {
      if (d != dim && p.size(d) != shape[size_t(d)]) return {};
    }
    offset += sizes[i];
  }
  if (!non_overlapping_and_dense(shape, first.strides())) return {};
  return first.as_strided(shape, first.strides(), first.storage_offset());
}

// Views of x along dim (already wrapped) with the given sizes, which sum
// to x.size(dim); one `node` joins their gradients (without a copy when
// they are already adjacent parts of one tensor: joined_in_place).
TensorList split_views(const char* node, const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  TensorList pieces;
  pieces.reserve(sizes.size());
  {
    NoGradGuard no_grad;
    int64_t offset = 0;
    for (int64_t s : sizes) {
      pieces.push_back(x.narrow(dim, offset, s));
      offset += s;
    }
  }
  if (needs_grad(x)) {
    std::vector<Tensor*> outputs;
    for (Tensor& p : pieces) outputs.push_back(&p);
    Shape shape = x.shape();
    DType dtype = x.dtype();
    Device device = x.device();
    record(node, outputs, {x}, [sizes, dim, shape, dtype, device](const TensorList& g) {
      if (Tensor joined = joined_in_place(g, sizes, dim, shape, dtype); joined.defined()) return TensorList{joined};
      TensorList parts;
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (g[i].defined()) {
          parts.push_back(g[i]);
          continue;
        }
        Shape s = shape;
        s[dim] = sizes[i];
        parts.push_back(zeros(s, dtype, device));
      }
      return TensorList{cat(parts, dim)};
    });
  }
  return pieces;
}

// Sizes of torch.split(x, split_size) along a dim of size n.
std::vector<int64_t> even_split_sizes(const char* op, int64_t split_size, int64_t n) {
  EMBER_CHECK(split_size >= 0, op << ": split_size must be non-negative, got " << split_size);
  EMBER_CHECK(split_size > 0 || n == 0,
              op << ": split_size can only be 0 if the dimension size is 0, but got dimension size " << n);
  if (split_size == 0) return {0};
  int64_t count = std::max<int64_t>((n + split_size - 1) / split_size, 1);
  std::vector<int64_t> sizes(size_t(count), split_size);
  sizes.back() = n - split_size * (count - 1);
  return sizes;
}

}  // namespace

Tensor cat(const TensorList& tensors, int64_t dim) {
  CatPlan plan = plan_cat("cat", tensors, dim);
  Tensor out = cat_values(plan, tensors);
  if (needs_grad(tensors)) {
    std::vector<int64_t> offsets, lengths;
    std::vector<bool> skipped;
    int64_t offset = 0;
    for (const Tensor& t : tensors) {
      skipped.push_back(legacy_empty(t));
      int64_t n = skipped.back() ? 0 : t.size(plan.dim);
      offsets.push_back(offset);
      lengths.push_back(n);
      offset += n;
    }
    int64_t d = plan.dim;
    record("CatBackward", {&out}, tensors, [offsets, lengths, skipped, d](const TensorList& g) {
      TensorList grads;
      for (size_t i = 0; i < offsets.size(); ++i) {
        grads.push_back(skipped[i] ? zeros({0}, g[0].dtype(), g[0].device()) : g[0].narrow(d, offsets[i], lengths[i]));
      }
      return grads;
    });
  }
  return out;
}

Tensor stack(const TensorList& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].defined(), "stack: tensor " << i << " is undefined");
    EMBER_CHECK(tensors[i].shape() == tensors[0].shape(), "stack: expects each tensor to be equal size, but got "
                                                              << shape_str(tensors[0].shape()) << " at entry 0 and "
                                                              << shape_str(tensors[i].shape()) << " at entry " << i
                                                              << " (all shapes: " << shapes_str(tensors) << ")");
  }
  const Tensor& first = tensors[0];
  int64_t d = wrap_dim("stack", dim, first.dim() + 1, first.shape());
  TensorList parts;
  for (const Tensor& t : tensors) parts.push_back(t.detach().unsqueeze(d));
  Tensor out = cat_values(plan_cat("stack", parts, d), parts);
  if (needs_grad(tensors)) {
    int64_t n = int64_t(tensors.size());
    record("StackBackward", {&out}, tensors, [d, n](const TensorList& g) {
      TensorList grads;
      for (int64_t i = 0; i < n; ++i) grads.push_back(g[0].narrow(d, i, 1).squeeze(d));
      return grads;
    });
  }
  return out;
}

TensorList split(const Tensor& x, int64_t split_size, int64_t dim) {
  EMBER_CHECK(x.defined(), "split: got an undefined tensor");
  EMBER_CHECK(x.dim() > 0, "split: expects a tensor with at least one dim, got a 0-dim tensor");
  int64_t d = wrap_dim("split", dim, x.dim(), x.shape());
  return split_views("SplitBackward", x, even_split_sizes("split", split_size, x.size(d)), d);
}

TensorList split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  EMBER_CHECK(x.defined(), "split: got an undefined tensor");
  EMBER_CHECK(x.dim() > 0, "split: expects a tensor with at least one dim, got a 0-dim tensor");
  int64_t d = wrap_dim("split", dim, x.dim(), x.shape());
  int64_t total = 0;
  for (int64_t s : sizes) {
    EMBER_CHECK(s >= 0, "split: split sizes must be non-negative, got " << shape_str(sizes));
    total += s;
  }
  EMBER_CHECK(total == x.size(d), "split: split sizes " << shape_str(sizes) << " sum to " << total << ", but dim " << d
                                                        << " of the tensor of shape " << shape_str(x.shape())
                                                        << " has size " << x.size(d)
                                                        << "; the sizes must add up to it exactly");
  return split_views("SplitBackward", x, sizes, d);
}

TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  EMBER_CHECK(x.defined(), "chunk: got an undefined tensor");
  EMBER_CHECK(x.dim() > 0, "chunk: expects a tensor with at least one dim, got a 0-dim tensor");
  EMBER_CHECK(chunks > 0, "chunk: the number of chunks must be positive, got " << chunks);
  int64_t d = wrap_dim("chunk", dim, x.dim(), x.shape());
  int64_t n = x.size(d);
  std::vector<int64_t> sizes =
      n == 0 ? std::vector<int64_t>(size_t(chunks), 0) : even_split_sizes("chunk", (n + chunks - 1) / chunks, n);
  return split_views("ChunkBackward", x, sizes, d);
}

}  // namespace ember
