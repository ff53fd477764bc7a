// The op library: every op on tensors, as free functions in namespace ember.
//
// Contract for every op here:
// - Inputs may be any strided view (non-contiguous, broadcast, offset).
// - Binary ops broadcast as NumPy does and promote dtypes as PyTorch does
//   (result_type; a Scalar or a 0-dim tensor only lifts the category, see
//   ember/core/scalar.h).
// - All tensor inputs must be on one device; the output is on that device.
// - Floating-only ops (exp, log, softmax, ...) promote integral inputs to
//   float32, as PyTorch does.
// - Each differentiable op records a node for backward when grad mode is on
//   and an input requires grad; its name is the op's name + "Backward".
// - Under autocast (ember/parallel/amp/autocast.h) matmul, linear,
//   linear_gelu, linear_gelu_linear, conv2d and scaled_dot_product_attention
//   cast their inputs to the autocast dtype, and softmax, log_softmax,
//   layer_norm, sum, mean, var, std and logsumexp cast half inputs to
//   float32 (ember/core/autocast_state.h has the exact rules).
// - Errors are ember::Error naming the op, the shapes, dtypes and devices.
#pragma once

#include <array>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "ember/core/generator.h"
#include "ember/core/size2.h"
#include "ember/core/tensor.h"

namespace ember {

// ---------------- factories ----------------
Tensor zeros(const Shape& shape, DType dtype = kDefaultFloat, Device device = kCPU);
Tensor ones(const Shape& shape, DType dtype = kDefaultFloat, Device device = kCPU);
Tensor full(const Shape& shape, const Scalar& value, DType dtype = kDefaultFloat, Device device = kCPU);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor full_like(const Tensor& t, const Scalar& value);
// [start, end) in steps of step; int64 unless any argument is floating.
Tensor arange(const Scalar& end, DType dtype, Device device = kCPU);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1, std::optional<DType> dtype = {},
              Device device = kCPU);
// Uniform [0, 1) and standard normal, from the device's default generator
// unless one is given. The same seed gives the same values on CPU and CUDA.
Tensor rand(const Shape& shape, DType dtype = kDefaultFloat, Device device = kCPU, Generator* gen = nullptr);
Tensor randn(const Shape& shape, DType dtype = kDefaultFloat, Device device = kCPU, Generator* gen = nullptr);
Tensor rand_like(const Tensor& t, Generator* gen = nullptr);
Tensor randn_like(const Tensor& t, Generator* gen = nullptr);
// Uniform integers in [low, high).
Tensor randint(int64_t low, int64_t high, const Shape& shape, DType dtype = DType::Int64, Device device = kCPU,
               Generator* gen = nullptr);
Tensor randperm(int64_t n, Device device = kCPU, Generator* gen = nullptr);

// Copies values into a new CPU tensor (then moves it to device).
template <typename T>
Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = kCPU);
template <typename T>
Tensor from_vector(const std::vector<T>& values) {
  return from_vector(values, {int64_t(values.size())});
}
// Wraps memory the caller owns and keeps alive; no copy. Contiguous unless
// strides are given.
Tensor from_blob(void* data, const Shape& shape, DType dtype, Device device = kCPU, const Shape& strides = {});
// Reads a tensor back into a flat vector in row-major order (any device, any layout).
template <typename T>
std::vector<T> to_vector(const Tensor& t);

// ---------------- elementwise unary ----------------
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// torch.nn.functional.gelu(input, approximate='none'): approximate "none" is
// the exact form x * Phi(x) (erf), "tanh" is
// 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))); any other string is an
// ember::Error. gelu(x) is the exact form.
Tensor gelu(const Tensor& x);
Tensor gelu(const Tensor& x, std::string_view approximate);
// grad * gelu'(x) for gelu(x, approximate) (aten's gelu_backward(grad_output,
// self, approximate)): the gradient gelu's backward gives, for x and grad of
// one shape, dtype and device. Differentiable (composed of recorded ops)
// when grad mode is on; one fused kernel otherwise.
Tensor gelu_backward(const Tensor& grad, const Tensor& x, std::string_view approximate);
Tensor abs(const Tensor& x);
Tensor sign(const Tensor& x);
Tensor sin(const Tensor& x);
Tensor cos(const Tensor& x);
Tensor reciprocal(const Tensor& x);
Tensor erf(const Tensor& x);
Tensor square(const Tensor& x);
Tensor pow(const Tensor& x, const Scalar& exponent);
Tensor pow(const Tensor& x, const Tensor& exponent);
Tensor clamp(const Tensor& x, std::optional<Scalar> min = std::nullopt, std::optional<Scalar> max = std::nullopt);
Tensor logical_not(const Tensor& x);

// ---------------- elementwise binary (broadcasting) ----------------
// The dtype of a binary op on a and b (torch.result_type): promote_types,
// except that a 0-dim tensor only lifts the category of a dimensioned one,
// as a Scalar does (float16_tensor * float32_0dim_tensor is float16).
DType result_type(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);  // a + alpha * b
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // true division: ints give float32
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, const Scalar& b);
Tensor sub(const Tensor& a, const Scalar& b);
Tensor mul(const Tensor& a, const Scalar& b);
Tensor div(const Tensor& a, const Scalar& b);
Tensor rsub(const Tensor& a, const Scalar& b);  // b - a
Tensor rdiv(const Tensor& a, const Scalar& b);  // b / a

// Comparisons give bool tensors and are not differentiable.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);

// cond ? a : b, broadcasting all three; cond must be bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);

// torch.masked_fill: x with value wherever the bool mask is true; mask and x
// broadcast together (the result has their broadcast shape). value is a
// Scalar or a 0-dim tensor (on x's device or the CPU), cast to x's dtype:
// masked_fill never promotes. Gradients: x's is zero where masked, a value
// tensor's is the sum of the gradient over the masked positions.
// Tensor::masked_fill_ is the in-place form (mask must broadcast to x).
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Tensor& value);

// True when every element is close: |a - b| <= atol + rtol * |b|; NaNs are never close.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and values

// ---------------- reductions ----------------
// dims may be negative; an empty dims list reduces over every dim.
Tensor sum(const Tensor& x, const Shape& dims = {}, bool keepdim = false);  // ints sum to int64
Tensor mean(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, const Shape& dims = {}, bool keepdim = false);
std::pair<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);  // values, int64 indices
std::pair<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);  // over the flattened tensor
Tensor argmin(const Tensor& x);  // over the flattened tensor
// correction 1 is the unbiased estimator (PyTorch's default), 0 the population one.
Tensor var(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor std(const Tensor& x, const Shape& dims = {}, int64_t correction = 1, bool keepdim = false);
Tensor logsumexp(const Tensor& x, const Shape& dims, bool keepdim = false);
// Sums a broadcast result back to `shape` (the reverse of expand); used by backward.
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---------------- softmax ----------------
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---------------- attention ----------------
// torch.nn.functional.scaled_dot_product_attention:
//   softmax(query key^T * scale + mask) value
// over query (..., L, E), key (..., S, E), value (..., S, Ev); the leading
// dims broadcast as matmul's batch dims (and with the mask's); the result is
// (..., L, Ev).
// - attn_mask broadcasts to (..., L, S): a bool mask keeps the positions
//   where it is true (PyTorch's SDPA convention), a floating one is added
//   to the scores (use -inf to block).
// - is_causal blocks key positions j > i for query position i (top-left
//   aligned, as PyTorch); it combines with attn_mask.
// - scale defaults to 1 / sqrt(E).
// - dropout_p drops attention probabilities (pass 0 in eval, as PyTorch),
//   from gen or the device's default generator.
// - A row with every position blocked gives zeros, and zero gradients (as
//   PyTorch >= 2.5).
// Fused (flash attention, ember/core/ops/attention_kernels.h): no (L, S)
// matrix is stored, and strided views such as (B, L, H, E).transpose(1, 2)
// are read in place. Cases the fused kernels do not take (a floating mask
// that needs its gradient; on CUDA E != Ev or E > 256) run the composed
// form, nn::functional::scaled_dot_product_attention_with_weights's. The
// fused backward has no double backward. Under autocast query, key and
// value are cast to the autocast dtype.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt, Generator* gen = nullptr);

// ---------------- losses ----------------
// How a loss reduces its per-element values (nn::Reduction is this type).
enum class Reduction { None, Mean, Sum };
// Cross-entropy of logits (N, C) against class indices (N) (int64 or
// int32), fused (ember/core/ops/cross_entropy_kernels.h): log-softmax, the target's
// pick, label smoothing, ignore_index and the reduction in one forward pass
// and one backward pass, on any float dtype (under autocast the loss runs in
// float32, as every loss does: float16 and bfloat16 logits are read as they
// are, in float32 arithmetic, and the loss is float32; their gradient is of
// their dtype). The loss nn::functional::
// cross_entropy computes for such inputs; a target outside [0, C) other than
// ignore_index is an ember::Error naming it (on a GPU raised by the next call
// that waits for the device).
Tensor cross_entropy_loss(const Tensor& logits, const Tensor& target, int64_t ignore_index, double label_smoothing,
                          Reduction reduction);

// ---------------- dropout ----------------
// Zeroes each element with probability p and scales the rest by 1 / (1 - p)
// when training (identity otherwise). The mask is never stored: backward
// regenerates it from the Philox state the forward used, so element i of
// a given call gets the same keep/drop decision on CPU and CUDA.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);

// ---------------- normalization ----------------
// torch.nn.functional.layer_norm: normalizes x over its last
// normalized_shape.size() dims (which must equal normalized_shape) with the
// biased variance, then scales by weight and shifts by bias (each optional,
// of shape normalized_shape).
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = {}, const Tensor& bias = {},
                  double eps = 1e-5);
// ember's fused form of a pre-LN residual step (PyTorch has no such op):
// {x + delta, layer_norm(x + delta, normalized_shape, weight, bias, eps)},
// those results, gradients (a half x's gradient rounded once, not twice)
// and autocast behaviour. With normed_dtype, the normalized result is
// converted to it, as .to(normed_dtype) after the composition (one
// rounding; its gradient converted back): under autocast, a float32
// residual stream whose normalized output feeds a matmul can get it in the
// autocast dtype without a cast kernel there and back. On CUDA, when x and
// delta have one shape, delta's dtype is x's (or float16/bfloat16 beside a
// float32 x, a residual stream under autocast), the sum is the dtype
// layer_norm computes in and normed_dtype is the sum's or delta's, one
// kernel reads x and delta once and writes both results, and the backward
// adds the sum's own gradient to the normalization's input gradient in the
// same pass (writing delta's gradient in its dtype there too). Otherwise it
// is the composition itself.
std::pair<Tensor, Tensor> add_layer_norm(const Tensor& x, const Tensor& delta, const Shape& normalized_shape,
                                         const Tensor& weight = {}, const Tensor& bias = {}, double eps = 1e-5,
                                         std::optional<DType> normed_dtype = std::nullopt);

// ---------------- convolution, pooling, batch norm (NCHW) ----------------
// Sizes are Size2 (ember/core/size2.h), as PyTorch's: one value (3 or {3}) means
// both dims, two ({3, 5}) mean (height, width).

// torch.nn.functional.conv2d: input (N, C_in, H, W), weight
// (C_out, C_in / groups, kH, kW), bias (C_out) or undefined.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, Size2 stride = 1, Size2 padding = 0,
              Size2 dilation = 1, int64_t groups = 1);
// Whether a CUDA convolution times cuDNN's candidate engines the first time
// it meets a configuration (shapes, dtype, memory format, direction, pointer
// alignments, the TF32 switch) on a thread and keeps the fastest for the
// rest of the process, counting the host's time to launch each as well as
// the device's (torch.backends.cudnn.benchmark, timed as a step sees it);
// off, it keeps cuDNN's heuristic first choice. On by default;
// EMBER_CONV_AUTOTUNE=0 in the environment turns it off at start. A
// configuration's choice is made once, so a switch changes new
// configurations only, and one first met inside a graph capture keeps the
// heuristic's choice. EMBER_CONV_AUTOTUNE_LOG=1 prints each timed choice on
// stderr: the configuration, each candidate engine's time, the one kept.
void set_conv_autotune(bool on);
bool conv_autotune();
// torch.nn.functional.max_pool2d and avg_pool2d: a stride left out ({} or
// std::nullopt, PyTorch's stride=None) equals kernel_size; padding is at most
// half the kernel. The output size is PyTorch's (floor, or ceil with
// ceil_mode).
Tensor max_pool2d(const Tensor& input, Size2 kernel_size, OptionalSize2 stride = {}, Size2 padding = 0,
                  Size2 dilation = 1, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& input, Size2 kernel_size, OptionalSize2 stride = {}, Size2 padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
// torch.nn.functional.adaptive_avg_pool2d: output_size 7 means (7, 7).
Tensor adaptive_avg_pool2d(const Tensor& input, Size2 output_size);
// torch.nn.functional.batch_norm over input (N, C, *): in training, batch
// statistics normalize and running_mean/running_var (if defined) are updated
// in place with momentum (unbiased variance, as PyTorch); in eval, the
// running statistics normalize. weight/bias (C) optional. weight, bias and
// the running statistics have the input's dtype, except that a float16 or
// bfloat16 input may come with float32 ones (mixed precision): the input is
// then normalized in float32 and the result has the input's dtype.
// num_batches_tracked, when defined (a () int64 tensor on the input's
// device), is incremented in place in training by the normalizing kernels
// (nn::BatchNorm's counter, with no launch of its own); ignored in eval.
// The defaults are PyTorch's: no weight or bias, training false.
Tensor batch_norm(const Tensor& input, const Tensor& running_mean, const Tensor& running_var, const Tensor& weight = {},
                  const Tensor& bias = {}, bool training = false, double momentum = 0.1, double eps = 1e-5,
                  const Tensor& num_batches_tracked = Tensor());

// ---------------- linear algebra ----------------
// torch.matmul: 1-D x 1-D dot, 2-D x 2-D, 1-D promoted and removed, and
// batched N-D with broadcasting batch dims.
Tensor matmul(const Tensor& a, const Tensor& b);
// Whether float32 matmul may use TF32 tensor cores on CUDA (off by default).
void set_allow_tf32(bool allow);
bool allow_tf32();
// Whether a CUDA matmul times cublasLt's candidate algorithms the first time
// it meets a problem (shapes, layouts, dtype) and keeps the fastest for the
// rest of the process; off, it keeps cublasLt's heuristic first choice. On
// by default; EMBER_GEMM_AUTOTUNE=0 in the environment turns it off at start.
// A problem's choice is made once, so a switch changes new problems only.
void set_gemm_autotune(bool on);
bool gemm_autotune();
// torch.nn.functional.linear: x @ weight^T + bias for x [..., in_features]
// (any rank >= 1), weight [out_features, in_features] and an optional bias
// [out_features]; the result is [..., out_features]. With a bias, on CUDA
// the bias is added in the GEMM's epilogue (cublasLt) when the layout of x
// allows it.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
// ember's fused form of gelu(linear(x, weight, bias), approximate), with
// exactly that result, gradients and autocast behaviour (PyTorch has no such
// function). On CUDA with a bias, approximate "tanh", a floating dtype and
// a layout linear's fused path takes, the bias and the GELU run in the
// GEMM's epilogue (cublasLt GELU_AUX_BIAS), which also writes the
// pre-activation that the backward saves; the backward is gelu_backward on
// it followed by linear's backward. Otherwise (the CPU, "none", no bias,
// sizes cublasLt declines: out_features not a multiple of 8) it is the
// composition itself.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias, std::string_view approximate = "tanh");
// ember's fused form of linear(gelu(linear(x, weight1, bias1), approximate),
// weight2, bias2), a transformer's MLP, with exactly that result, gradients
// (double backward included) and autocast behaviour (PyTorch has no such
// function). Where linear_gelu's epilogue runs (CUDA, bias1, "tanh"), the
// forward is that GEMM then the second linear, and one backward node
// computes the gelu' of its gradient in a GEMM's epilogue (cublasLt
// DGELU_BGRAD) instead of a separate gelu_backward kernel. Otherwise it is
// the composition itself.
Tensor linear_gelu_linear(const Tensor& x, const Tensor& weight1, const Tensor& bias1, const Tensor& weight2,
                          const Tensor& bias2, std::string_view approximate = "tanh");

// ---------------- joining and splitting ----------------
// cat promotes dtypes; sizes must match except along dim. As in PyTorch's
// legacy rule, a 1-D tensor of shape [0] is skipped whatever the others' rank.
Tensor cat(const TensorList& tensors, int64_t dim = 0);
Tensor stack(const TensorList& tensors, int64_t dim = 0);  // equal shapes; a new dim at dim
// split and chunk return views of x (narrow), sharing its storage.
TensorList split(const Tensor& x, int64_t split_size, int64_t dim = 0);
TensorList split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim = 0);
TensorList chunk(const Tensor& x, int64_t chunks, int64_t dim = 0);  // as torch.chunk

// torch.Tensor.repeat: x tiled repeats[d] times along each dim; repeats
// has at least x.dim() entries (extra ones are new leading dims), each >= 0
// (0 gives an empty result). torch.tile: dims with fewer entries than
// x.dim() are padded with ones on the left, then as repeat. The gradient
// sums over the copies.
Tensor repeat(const Tensor& x, const Shape& repeats);
Tensor tile(const Tensor& x, const Shape& dims);

// torch.triu / torch.tril over the last two dims (any batch dims before
// them, any dtype): elements on and above (triu) or on and below (tril)
// the diagonal-th diagonal are kept, the others are zero (false for bool);
// diagonal 0 is the main one, > 0 above it, < 0 below it. x.dim() >= 2.
Tensor triu(const Tensor& x, int64_t diagonal = 0);
Tensor tril(const Tensor& x, int64_t diagonal = 0);

// ---------------- indexing ----------------
// Indices are int64 or int32 tensors with values in [0, size of the indexed
// dim); a bad value is an ember::Error naming the op, the value, the dim and
// its size.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// Returns a copy of x with src added at index along dim (out-of-place).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// torch.embedding, table first: rows of weight (num_embeddings, dim) picked
// by integer indices of any shape. nn::functional::embedding(input, weight)
// takes torch.nn.functional.embedding's order, indices first.
Tensor embedding(const Tensor& weight, const Tensor& indices);
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);  // int64 result

// ---------------- scans, sorting, sampling ----------------
// torch.cumsum: running sums along dim. Integral and bool inputs give int64
// unless dtype is given; with dtype the input is cast to it first. float16
// and bfloat16 accumulate in float32. Deterministic on every device.
Tensor cumsum(const Tensor& x, int64_t dim, std::optional<DType> dtype = {});
// torch.sort: (values, int64 indices) along dim. NaN sorts above every
// number (first when descending). The order is always stable (ties keep
// their input order, also when descending), so `stable` changes nothing and
// CPU and CUDA give the same indices. Values are differentiable.
std::pair<Tensor, Tensor> sort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argsort(const Tensor& x, int64_t dim = -1, bool descending = false, bool stable = false);
// torch.topk: the k largest (smallest) along dim, in sort's stable order;
// `sorted` = false returns them sorted too. Values are differentiable.
std::pair<Tensor, Tensor> topk(const Tensor& x, int64_t k, int64_t dim = -1, bool largest = true, bool sorted = true);
// torch.searchsorted: for each value the int64 index at which it would be
// inserted into sorted_sequence's innermost dim to keep it sorted (before
// equal entries, or after them with right). sorted_sequence is 1-D, or has
// the leading dims of values.
Tensor searchsorted(const Tensor& sorted_sequence, const Tensor& values, bool right = false);
// torch.multinomial: num_samples int64 category indices drawn from each row
// of probs (1-D or 2-D, non-negative weights, not necessarily normalized),
// with or without replacement. Checks the weights on the host, which waits
// for the device once. The same seed gives the same draws on CPU and CUDA.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false, Generator* generator = nullptr);

// ---------------- operators ----------------
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
inline Tensor operator+(const Scalar& a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Scalar& a, const Tensor& b) { return rsub(b, a); }
inline Tensor operator*(const Scalar& a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Scalar& a, const Tensor& b) { return rdiv(b, a); }
inline Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
inline Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
inline Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
inline Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
inline Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, b); }
inline Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }
inline Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, b); }
inline Tensor& operator+=(Tensor& a, const Tensor& b) { return a.add_(b); }
inline Tensor& operator-=(Tensor& a, const Tensor& b) { return a.sub_(b); }
inline Tensor& operator*=(Tensor& a, const Tensor& b) { return a.mul_(b); }
inline Tensor& operator/=(Tensor& a, const Tensor& b) { return a.div_(b); }
inline Tensor& operator+=(Tensor& a, const Scalar& b) { return a.add_(b); }
inline Tensor& operator-=(Tensor& a, const Scalar& b) { return a.sub_(b); }
inline Tensor& operator*=(Tensor& a, const Scalar& b) { return a.mul_(b); }
inline Tensor& operator/=(Tensor& a, const Scalar& b) { return a.div_(b); }

}  // namespace ember
