// scatter and gather with their backward nodes (see scatter_gather.h).
#include "ember/parallel/data_parallel/scatter_gather.h"

#include <algorithm>
#include <string>

#include "ember/core/autograd/function.h"
#include "ember/core/ops.h"
#include "ember/core/ops/op_utils.h"
#include "ember/parallel/data_parallel/warn_once.h"

namespace ember::parallel {
namespace {

using detail::describe;

std::string sizes_str(const std::vector<int64_t>& sizes) { return shape_str(sizes); }

void check_sizes(const std::vector<int64_t>& sizes, size_t devices, int64_t n, int64_t dim) {
  EMBER_CHECK(!sizes.empty(), "scatter: no chunk sizes to split " << n << " rows with");
  EMBER_CHECK(sizes.size() <= devices, "scatter: " << sizes.size() << " chunk sizes " << sizes_str(sizes) << " for "
                                                   << devices << " devices; give at most one size per device");
  int64_t total = 0;
  for (int64_t s : sizes) {
    EMBER_CHECK(s > 0, "scatter: chunk sizes must be positive, got " << sizes_str(sizes));
    total += s;
  }
  EMBER_CHECK(total == n, "scatter: the chunk sizes " << sizes_str(sizes) << " sum to " << total
                                                      << " but the inputs have " << n << " along dim " << dim);
}

std::vector<Value> split_value(const Value& v, const std::vector<Device>& devices, const std::vector<int64_t>& sizes,
                               int64_t dim) {
  const size_t m = sizes.size();
  if (v.is_none()) return std::vector<Value>(m);
  if (v.is_tensor()) {
    TensorList pieces = scatter_tensor(v.tensor(), devices, sizes, dim);
    return std::vector<Value>(pieces.begin(), pieces.end());
  }
  std::vector<std::vector<Value>> per_piece(m);
  for (const Value& item : v.items()) {
    std::vector<Value> split = split_value(item, devices, sizes, dim);
    for (size_t k = 0; k < m; ++k) per_piece[k].push_back(std::move(split[k]));
  }
  std::vector<Value> out;
  for (auto& items : per_piece) out.push_back(Value::list(std::move(items)));
  return out;
}

Value gather_value(const std::vector<Value>& outputs, Device destination, int64_t dim, const std::string& path) {
  const Value& first = outputs[0];
  for (size_t k = 1; k < outputs.size(); ++k) {
    const Value& o = outputs[k];
    bool same = first.is_none() == o.is_none() && first.is_tensor() == o.is_tensor() &&
                (!first.is_list() || first.size() == o.size());
    EMBER_CHECK(same, "gather: the replicas' outputs differ in structure: replica 0's output"
                          << path << " is " << first.str() << " but replica " << k << "'s is " << o.str()
                          << "; every replica must return the same structure");
  }
  if (first.is_none()) return Value();
  if (first.is_list()) {
    std::vector<Value> items;
    for (size_t i = 0; i < first.size(); ++i) {
      std::vector<Value> column;
      for (const Value& o : outputs) column.push_back(o[i]);
      items.push_back(gather_value(column, destination, dim, path + "[" + std::to_string(i) + "]"));
    }
    return Value::list(std::move(items));
  }
  TensorList parts;
  for (const Value& o : outputs) parts.push_back(o.tensor());
  size_t scalars = std::count_if(parts.begin(), parts.end(), [](const Tensor& t) { return t.dim() == 0; });
  if (parts.size() > 1 && scalars == parts.size()) {
    warn_once("parallel.gather.scalars",
              "gather: was asked to gather along dimension " + std::to_string(dim) +
                  ", but all input tensors were scalars; will instead unsqueeze and return a vector (one value per "
                  "replica)");
    for (Tensor& p : parts) p = p.unsqueeze(0);
    return gather_tensors(parts, destination, 0);
  }
  EMBER_CHECK(scalars == 0 || parts.size() == 1, "gather: the replicas' outputs"
                                                     << path << " mix 0-dim and dimensioned tensors (replica 0's is "
                                                     << first.str() << "); return the same shape from every replica");
  return gather_tensors(parts, destination, dim);
}

}  // namespace

std::vector<int64_t> chunk_sizes_for(int64_t n, size_t pieces) {
  EMBER_CHECK(pieces > 0, "chunk_sizes_for: the number of pieces must be positive");
  const int64_t each = (n + int64_t(pieces) - 1) / int64_t(pieces);
  std::vector<int64_t> sizes;
  for (int64_t left = n; left > 0; left -= each) sizes.push_back(std::min(each, left));
  return sizes;
}

TensorList scatter_tensor(const Tensor& input, const std::vector<Device>& devices, const std::vector<int64_t>& sizes,
                          int64_t dim) {
  EMBER_CHECK(input.defined(), "scatter: got an undefined tensor");
  EMBER_CHECK(input.dim() > 0, "scatter: cannot split the 0-dim tensor "
                                   << describe(input) << " along dim " << dim
                                   << "; give the replicas tensors with a batch dim");
  const int64_t d = detail::wrap_dim("scatter", dim, input.dim(), input.shape());
  check_sizes(sizes, devices.size(), input.size(d), dim);
  TensorList pieces;
  {
    NoGradGuard no_grad;
    Tensor base = input.detach();
    int64_t offset = 0;
    for (size_t k = 0; k < sizes.size(); ++k) {
      Tensor piece = base.narrow(d, offset, sizes[k]);
      if (piece.device() != devices[k]) piece = piece.to(devices[k]);
      pieces.push_back(piece);
      offset += sizes[k];
    }
  }
  if (autograd::needs_grad(input)) {
    std::vector<Tensor*> outs;
    for (Tensor& p : pieces) outs.push_back(&p);
    const Device source = input.device();
    const DType dtype = input.dtype();
    const Shape shape = input.shape();
    autograd::record("ScatterBackward", outs, {input}, [source, dtype, shape, sizes, d](const TensorList& g) {
      TensorList parts;
      for (size_t k = 0; k < sizes.size(); ++k) {
        Shape piece_shape = shape;
        piece_shape[size_t(d)] = sizes[k];
        parts.push_back(g[k].defined() ? g[k].to(source) : zeros(piece_shape, dtype, source));
      }
      return TensorList{parts.size() == 1 ? parts[0] : cat(parts, d)};
    });
  }
  return pieces;
}

Tensor gather_tensors(const TensorList& parts, Device destination, int64_t dim) {
  EMBER_CHECK(!parts.empty(), "gather: no tensors to gather");
  for (size_t k = 0; k < parts.size(); ++k) {
    EMBER_CHECK(parts[k].defined(), "gather: the output of replica " << k << " is undefined");
  }
  if (parts.size() == 1) return parts[0].to(destination);
  const Tensor& first = parts[0];
  EMBER_CHECK(first.dim() > 0, "gather: cannot concatenate 0-dim tensors along dim " << dim);
  const int64_t d = detail::wrap_dim("gather", dim, first.dim(), first.shape());
  Shape shape = first.shape();
  shape[size_t(d)] = 0;
  std::vector<int64_t> sizes;
  std::vector<Device> devices;
  for (size_t k = 0; k < parts.size(); ++k) {
    const Tensor& p = parts[k];
    bool fits = p.dim() == first.dim() && p.dtype() == first.dtype();
    for (int64_t i = 0; fits && i < p.dim(); ++i) fits = i == d || p.size(i) == first.size(i);
    EMBER_CHECK(fits, "gather: replica " << k << "'s output " << describe(p) << " does not match replica 0's "
                                         << describe(first) << " outside dim " << d
                                         << " (outputs are concatenated along dim " << d << ")");
    sizes.push_back(p.size(d));
    devices.push_back(p.device());
    shape[size_t(d)] += p.size(d);
  }
  Tensor out;
  {
    NoGradGuard no_grad;
    out = empty(shape, first.dtype(), destination);
    int64_t offset = 0;
    for (size_t k = 0; k < parts.size(); ++k) {
      out.narrow(d, offset, sizes[k]).copy_(parts[k].detach());
      offset += sizes[k];
    }
  }
  if (autograd::needs_grad(parts)) {
    autograd::record("GatherBackward", {&out}, parts, [devices, sizes, d](const TensorList& g) {
      TensorList grads;
      int64_t offset = 0;
      for (size_t k = 0; k < sizes.size(); ++k) {
        grads.push_back(g[0].narrow(d, offset, sizes[k]).to(devices[k]));
        offset += sizes[k];
      }
      return grads;
    });
  }
  return out;
}

std::vector<Value> scatter(const Value& inputs, const std::vector<Device>& devices, int64_t dim,
                           const std::vector<int64_t>& chunk_sizes) {
  EMBER_CHECK(!devices.empty(), "scatter: no devices to scatter to");
  const TensorList tensors = inputs.tensors();
  EMBER_CHECK(!tensors.empty(), "scatter: the inputs hold no tensor to split (" << inputs.str() << ")");
  int64_t n = -1;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    EMBER_CHECK(t.dim() > 0, "scatter: input tensor " << i << " (" << describe(t)
                                                      << ") is 0-dim and cannot be split along dim " << dim
                                                      << "; give the replicas tensors with a batch dim");
    const int64_t d = detail::wrap_dim("scatter", dim, t.dim(), t.shape());
    if (n < 0) n = t.size(d);
    EMBER_CHECK(t.size(d) == n, "scatter: input tensors 0 and " << i << " have " << n << " and " << t.size(d)
                                                                << " rows along dim " << dim << " ("
                                                                << describe(tensors[0]) << " and " << describe(t)
                                                                << "); every input is split into the same pieces, "
                                                                   "so their sizes along dim must agree");
  }
  EMBER_CHECK(n > 0, "scatter: the batch is empty (size 0 along dim " << dim
                                                                      << "); there is nothing to split across "
                                                                         "the devices");
  const std::vector<int64_t> sizes = chunk_sizes.empty() ? chunk_sizes_for(n, devices.size()) : chunk_sizes;
  check_sizes(sizes, devices.size(), n, dim);
  return split_value(inputs, devices, sizes, dim);
}

Value gather(const std::vector<Value>& outputs, Device destination, int64_t dim) {
  EMBER_CHECK(!outputs.empty(), "gather: no outputs to gather");
  return gather_value(outputs, destination, dim, "");
}

}  // namespace ember::parallel
