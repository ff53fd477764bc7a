// Tensor: a strided view of a Storage, with the autograd metadata that makes
// it a node of the dynamic graph.
//
// Contract:
// - A Tensor is a cheap handle (one shared_ptr). Copying it aliases; use
//   clone() for a copy of the data.
// - Shapes are row-major and PyTorch-ordered (N, C, H, W); strides are in
//   elements. View ops (view, transpose, permute, narrow, select, expand,
//   squeeze, unsqueeze, flatten of a contiguous tensor, detach) share storage:
//   writes through a view are seen by the base.
// - Every op checks its inputs and throws ember::Error naming the op, the
//   shapes, dtypes and devices; no op exits or returns garbage.
// - Ops record themselves for backward when grad mode is on (see
//   ember/core/grad_mode.h) and an input requires grad.
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/core/device.h"
#include "ember/core/dtype.h"
#include "ember/core/error.h"
#include "ember/core/scalar.h"
#include "ember/core/storage.h"

namespace ember {

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);  // "[2, 3]"

// How a tensor's elements lie in memory (ember/core/memory_format.h has the
// stride rules). Contiguous is row-major; ChannelsLast is a 4-D (N, C, H, W)
// tensor stored as (N, H, W, C), the layout of cuDNN's tensor-core
// convolutions; Preserve keeps a dense tensor's own strides (as PyTorch's
// torch.preserve_format).
enum class MemoryFormat : uint8_t { Contiguous, ChannelsLast, Preserve };
const char* memory_format_name(MemoryFormat format);

class Tensor;
class Node;
class Generator;
using TensorList = std::vector<Tensor>;

namespace autograd {
struct AutogradMeta;
}

class TensorImpl {
 public:
  TensorImpl(std::shared_ptr<Storage> storage, Shape sizes, Shape strides, int64_t offset, DType dtype);
  ~TensorImpl();

  std::shared_ptr<Storage> storage;
  Shape sizes;
  Shape strides;
  int64_t offset;  // in elements
  DType dtype;
  bool is_view = false;                              // made by a view op from another tensor
  std::unique_ptr<autograd::AutogradMeta> autograd;  // null until autograd touches it
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // ---- metadata ----
  DType dtype() const { return impl_->dtype; }
  Device device() const { return impl_->storage->device(); }
  const Shape& shape() const { return impl_->sizes; }
  const Shape& sizes() const { return impl_->sizes; }
  const Shape& strides() const { return impl_->strides; }
  int64_t dim() const { return int64_t(impl_->sizes.size()); }
  int64_t size(int64_t dim) const;  // negative dims count from the end
  int64_t stride(int64_t dim) const;
  int64_t numel() const;
  int64_t storage_offset() const { return impl_->offset; }
  size_t element_size() const { return dtype_size(impl_->dtype); }
  bool is_contiguous() const;
  // Whether the elements lie densely in `format`'s order (size-1 dims'
  // strides do not matter, as for is_contiguous()); Preserve is an error.
  bool is_contiguous(MemoryFormat format) const;
  // Every element at its own address and the addresses one dense block: a
  // permutation of a contiguous layout.
  bool is_non_overlapping_and_dense() const;
  // ChannelsLast for a 4-D tensor whose strides are ordered as
  // channels-last's (C innermost, then W, H, N; the strides of size-1 dims
  // count, so a one-channel tensor made channels-last says so), else
  // Contiguous: the format convolution, batch norm, pooling and dropout
  // compute in and give their outputs.
  MemoryFormat suggest_memory_format() const;
  bool is_cuda() const { return device().is_cuda(); }
  // Made under InferenceMode (ember/core/inference_mode.h), or a view of such a tensor.
  bool is_inference() const { return impl_->storage->is_inference(); }
  const std::shared_ptr<Storage>& storage() const { return impl_->storage; }

  // Pointer to the first element (storage + offset).
  void* data_ptr() const;
  // Typed pointer; an ember::Error if T does not match dtype().
  template <typename T>
  T* data() const;
  // The value of a one-element tensor, converted to T (copied from the GPU).
  template <typename T>
  T item() const;

  // "tensor([[1, 2], [3, 4]], dtype=float32, device=cpu, shape=[2, 2])"
  std::string str() const;

  // ---- views (share storage) ----
  Tensor view(const Shape& shape) const;     // one dim may be -1
  Tensor reshape(const Shape& shape) const;  // a view when strides allow, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const Shape& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes dim
  Tensor operator[](int64_t index) const { return select(0, index); }
  Tensor expand(const Shape& shape) const;  // -1 keeps a size
  Tensor expand_as(const Tensor& other) const { return expand(other.shape()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor unflatten(int64_t dim, const Shape& sizes) const;
  Tensor as_strided(const Shape& sizes, const Shape& strides, int64_t offset) const;
  Tensor detach() const;  // same storage, no grad history

  // ---- copies and conversions ----
  Tensor contiguous() const;  // self if already contiguous
  // Self if is_contiguous(format), else a copy laid out in format.
  Tensor contiguous(MemoryFormat format) const;
  // A copy that keeps the layout (MemoryFormat::Preserve), differentiable.
  Tensor clone() const;
  // Self if suggest_memory_format() is format already, else a copy with
  // exactly format's strides (as PyTorch's x.to(memory_format=...)).
  Tensor to(MemoryFormat format) const;
  // Conversions keep the layout (MemoryFormat::Preserve).
  Tensor to(DType dtype) const;    // self if same dtype
  Tensor to(Device device) const;  // self if same device
  Tensor to(Device device, DType dtype) const;
  Tensor cpu() const { return to(kCPU); }
  Tensor cuda(int index = 0) const { return to(cuda_device(index)); }

  // ---- elementwise (see ember/core/ops.h for the full list) ----
  Tensor neg() const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor gelu() const;
  Tensor gelu(std::string_view approximate) const;  // "none" or "tanh"
  Tensor abs() const;
  Tensor pow(const Scalar& exponent) const;
  Tensor pow(const Tensor& exponent) const;

  // ---- in place: bump the version counter ----
  Tensor& add_(const Tensor& other, const Scalar& alpha = 1);
  Tensor& add_(const Scalar& other);
  Tensor& sub_(const Tensor& other);
  Tensor& sub_(const Scalar& other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(const Scalar& other);
  Tensor& div_(const Tensor& other);
  Tensor& div_(const Scalar& other);
  Tensor& zero_();
  Tensor& fill_(const Scalar& value);
  Tensor& copy_(const Tensor& src);  // broadcasts src, casts dtype, crosses devices
  // mask (bool) broadcasts to this tensor; value is cast to its dtype.
  Tensor& masked_fill_(const Tensor& mask, const Scalar& value);
  Tensor& masked_fill_(const Tensor& mask, const Tensor& value);  // value 0-dim

  // ---- reductions ----
  Tensor sum() const;
  Tensor sum(const Shape& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Shape& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  std::pair<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // values, indices
  std::pair<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor var(const Shape& dims, int64_t correction = 1, bool keepdim = false) const;
  Tensor std(const Shape& dims, int64_t correction = 1, bool keepdim = false) const;
  Tensor logsumexp(const Shape& dims, bool keepdim = false) const;

  // ---- masking, tiling, triangles (see ember/core/ops.h) ----
  Tensor masked_fill(const Tensor& mask, const Scalar& value) const;
  Tensor masked_fill(const Tensor& mask, const Tensor& value) const;
  Tensor repeat(const Shape& repeats) const;
  Tensor tile(const Shape& dims) const;
  Tensor triu(int64_t diagonal = 0) const;
  Tensor tril(int64_t diagonal = 0) const;

  Tensor matmul(const Tensor& other) const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor cumsum(int64_t dim, std::optional<DType> dtype = {}) const;
  std::pair<Tensor, Tensor> sort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  Tensor argsort(int64_t dim = -1, bool descending = false, bool stable = false) const;
  std::pair<Tensor, Tensor> topk(int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true) const;
  Tensor multinomial(int64_t num_samples, bool replacement = false, Generator* generator = nullptr) const;

  // ---- autograd ----
  bool requires_grad() const;
  // Only on leaves (tensors no op made); returns *this for chaining.
  Tensor& set_requires_grad(bool requires_grad = true);
  bool is_leaf() const;
  // The accumulated gradient of a leaf (or a tensor that called retain_grad);
  // undefined until a backward pass reached it.
  Tensor grad() const;
  void set_grad(const Tensor& grad);
  // The node that made this tensor, null for leaves.
  std::shared_ptr<Node> grad_fn() const;
  uint32_t output_nr() const;
  void retain_grad();
  uint32_t version() const { return impl_->storage->version(); }

  // Runs backward from this tensor. grad may be omitted only for a
  // one-element tensor (it is then 1). See ember/core/autograd/engine.h.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false, bool create_graph = false) const;

  // fn sees the gradient flowing into this tensor and may return a
  // replacement (or an undefined Tensor to keep it). For a leaf it runs before
  // the gradient is accumulated into grad(); for a non-leaf, before the
  // gradient flows on into grad_fn. Returns a handle for remove_hook.
  using GradHook = std::function<Tensor(const Tensor&)>;
  size_t register_hook(GradHook fn);
  void remove_hook(size_t handle);
  // Leaves only: fn(param) runs right after this leaf's grad() has been
  // updated with its complete gradient of this backward pass.
  using PostAccumulateGradHook = std::function<void(const Tensor&)>;
  size_t register_post_accumulate_grad_hook(PostAccumulateGradHook fn);

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// An uninitialized contiguous tensor.
Tensor empty(const Shape& shape, DType dtype = kDefaultFloat, Device device = kCPU);
// An uninitialized tensor laid out in format (Contiguous or ChannelsLast).
Tensor empty(const Shape& shape, DType dtype, Device device, MemoryFormat format);
// An uninitialized tensor with these strides, which must be dense and
// non-overlapping for the shape.
Tensor empty_strided(const Shape& shape, const Shape& strides, DType dtype, Device device);

// ---------------- inline template definitions ----------------

template <typename T>
T* Tensor::data() const {
  EMBER_CHECK(dtype_of<T>::value == dtype(), "Tensor::data<T>: tensor has dtype " << dtype_name(dtype()) << " but T is "
                                                                                  << dtype_name(dtype_of<T>::value));
  return static_cast<T*>(data_ptr());
}

namespace detail {
// Copies the single element of a one-element tensor to host as double/int64.
Scalar item_scalar(const Tensor& t);
}  // namespace detail

template <typename T>
T Tensor::item() const {
  return detail::item_scalar(*this).template to<T>();
}

}  // namespace ember
