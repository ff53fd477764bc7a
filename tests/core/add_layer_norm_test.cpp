// add_layer_norm on the CPU: the composition (the CPU has no fused kernel)
// equals x + delta and layer_norm of it, float64 gradients included; the
// fused path's front-end (one node with two outputs, either output's
// gradient alone, delta's gradient in its own dtype, a declined backward
// falling back to layer_norm's) is driven on the CPU by a test kernel in the
// stubs; when it applies, and the composition otherwise.
// tests/kernels/cuda/layer_norm_test.cpp checks the CUDA kernels.
#include <gtest/gtest.h>

#include <optional>
#include <utility>
#include <vector>

#include "ember/core/ops/layer_norm_kernels.h"
#include "ember/ember.h"
#include "ember/parallel/amp/autocast.h"
#include "support/gradcheck.h"

namespace ember {
namespace {

// Residual-form CPU kernels for the test, built on the CPU layer-norm
// kernels: float32 and float64 x with a residual of x's dtype (or bfloat16
// beside float32, and then y and grad_y in float32 or bfloat16).
// `decline_backward` makes the backward decline.
struct FakeAddLayerNorm {
  static inline int forward_calls = 0, backward_calls = 0;
  static inline bool decline_backward = false;

  template <typename T>
  static void add_rows(const LayerNormArgs& a) {
    T* sum = static_cast<T*>(a.sum);
    const T* x = static_cast<const T*>(a.x);
    for (int64_t i = 0; i < a.rows * a.cols; ++i) {
      const double r = a.residual_dtype == DType::BFloat16 ? double(float(static_cast<const BFloat16*>(a.residual)[i]))
                                                           : double(static_cast<const T*>(a.residual)[i]);
      sum[i] = T(double(x[i]) + r);
    }
  }

  static bool forward(const LayerNormArgs& a) {
    ++forward_calls;
    if (a.dtype == DType::Float64) add_rows<double>(a);
    else if (a.dtype == DType::Float32) add_rows<float>(a);
    else return false;
    LayerNormArgs on_sum = a;
    on_sum.x = a.sum;
    if (a.y_dtype == a.dtype) {
      layer_norm_forward_stub(DeviceType::CPU)(on_sum);
      return true;
    }
    // A bfloat16 y beside float32: the float32 result rounded once.
    std::vector<float> y(size_t(a.rows * a.cols));
    on_sum.y = y.data();
    on_sum.y_dtype = a.dtype;
    layer_norm_forward_stub(DeviceType::CPU)(on_sum);
    for (size_t i = 0; i < y.size(); ++i) static_cast<BFloat16*>(a.y)[i] = BFloat16(y[i]);
    return true;
  }

  template <typename T>
  static void finish_backward(const LayerNormArgs& a) {
    T* gx = static_cast<T*>(a.grad_x);
    const T* gs = static_cast<const T*>(a.grad_sum);
    for (int64_t i = 0; i < a.rows * a.cols; ++i) {
      if (gs != nullptr) gx[i] += gs[i];
      if (a.grad_residual != nullptr) static_cast<BFloat16*>(a.grad_residual)[i] = BFloat16(float(gx[i]));
    }
  }

  static bool backward(const LayerNormArgs& a) {
    ++backward_calls;
    if (decline_backward || (a.dtype != DType::Float64 && a.dtype != DType::Float32)) return false;
    std::vector<float> gy;
    LayerNormArgs on = a;
    if (a.y_dtype != a.dtype) {  // a bfloat16 grad_y beside float32
      for (int64_t i = 0; i < a.rows * a.cols; ++i) gy.push_back(float(static_cast<const BFloat16*>(a.grad_y)[i]));
      on.grad_y = gy.data();
      on.y_dtype = a.dtype;
    }
    layer_norm_backward_stub(DeviceType::CPU)(on);
    if (a.dtype == DType::Float64) finish_backward<double>(a);
    else finish_backward<float>(a);
    return true;
  }
};

class FakeAddLayerNormScope {
 public:
  FakeAddLayerNormScope() {
    FakeAddLayerNorm::forward_calls = FakeAddLayerNorm::backward_calls = 0;
    FakeAddLayerNorm::decline_backward = false;
    add_layer_norm_forward_stub.set(DeviceType::CPU, &FakeAddLayerNorm::forward);
    add_layer_norm_backward_stub.set(DeviceType::CPU, &FakeAddLayerNorm::backward);
  }
  ~FakeAddLayerNormScope() {
    add_layer_norm_forward_stub.set(DeviceType::CPU, nullptr);
    add_layer_norm_backward_stub.set(DeviceType::CPU, nullptr);
  }
  FakeAddLayerNormScope(const FakeAddLayerNormScope&) = delete;
  FakeAddLayerNormScope& operator=(const FakeAddLayerNormScope&) = delete;
};

Tensor random(const Shape& shape, uint64_t seed, DType dtype = DType::Float64) {
  Generator g(seed);
  return randn(shape, DType::Float64, kCPU, &g).to(dtype);
}

// The gradients of x, delta, weight and bias after sending gs and gy back
// from the sum and the normalized output (either may be undefined: not
// used) of fn(x, delta, weight, bias).
using SumAndNorm = std::function<std::pair<Tensor, Tensor>(const TensorList&)>;
TensorList grads_of(const SumAndNorm& fn, const TensorList& inputs, const Tensor& gs, const Tensor& gy) {
  TensorList leaves;
  for (const Tensor& t : inputs) leaves.push_back(t.detach().set_requires_grad());
  const auto [sum, normed] = fn(leaves);
  Tensor loss = zeros({}, DType::Float64);
  if (gs.defined()) loss = loss + (sum.to(DType::Float64) * gs).sum();
  if (gy.defined()) loss = loss + (normed.to(DType::Float64) * gy).sum();
  loss.backward();
  TensorList grads;
  for (const Tensor& t : leaves) grads.push_back(t.grad());
  return grads;
}

std::pair<Tensor, Tensor> composition(const TensorList& in) {
  Tensor sum = in[0] + in[1];
  return {sum, layer_norm(sum, {6}, in[2], in[3])};
}

std::pair<Tensor, Tensor> fused(const TensorList& in) { return add_layer_norm(in[0], in[1], {6}, in[2], in[3]); }

TEST(AddLayerNorm, TheCompositionWithFloat64Gradients) {
  const TensorList in = {random({3, 4, 6}, 1), random({3, 4, 6}, 2), random({6}, 3), random({6}, 4)};
  const auto [sum, normed] = fused(in);
  const auto [ref_sum, ref_normed] = composition(in);
  EXPECT_TRUE(equal(sum, ref_sum));
  EXPECT_TRUE(equal(normed, ref_normed));
  TensorList leaves;
  for (const Tensor& t : in) leaves.push_back(t.detach().set_requires_grad());
  EXPECT_TRUE(testing::gradcheck(
      [](const TensorList& x) {
        const auto [s, n] = add_layer_norm(x[0], x[1], {6}, x[2], x[3]);
        return s * 0.5 + n;
      },
      leaves));
}

TEST(AddLayerNorm, TheFusedPathKeepsTheCompositionsValuesAndGradients) {
  FakeAddLayerNormScope fake;
  const TensorList in = {random({3, 4, 6}, 1), random({3, 4, 6}, 2), random({6}, 3), random({6}, 4)};
  const Tensor gs = random({3, 4, 6}, 5), gy = random({3, 4, 6}, 6);
  TensorList leaves;
  for (const Tensor& t : in) leaves.push_back(t.detach().set_requires_grad());
  const auto [sum, normed] = fused(leaves);
  EXPECT_EQ(FakeAddLayerNorm::forward_calls, 1);
  ASSERT_NE(sum.grad_fn(), nullptr);
  EXPECT_EQ(sum.grad_fn()->name(), "AddLayerNormBackward");
  EXPECT_EQ(normed.grad_fn(), sum.grad_fn());
  const auto [ref_sum, ref_normed] = composition(in);
  EXPECT_TRUE(allclose(sum, ref_sum, 1e-15, 1e-15));
  EXPECT_TRUE(allclose(normed, ref_normed, 1e-14, 1e-14));
  // Both outputs' gradients, the normalized one's alone, the sum's alone.
  for (const auto& [s, y] : {std::pair{gs, gy}, std::pair{Tensor(), gy}, std::pair{gs, Tensor()}}) {
    const TensorList got = grads_of(fused, in, s, y), want = grads_of(composition, in, s, y);
    for (size_t i = 0; i < in.size(); ++i) {
      ASSERT_EQ(got[i].defined(), want[i].defined()) << "input " << i;
      if (want[i].defined()) EXPECT_TRUE(allclose(got[i], want[i], 1e-12, 1e-12)) << "input " << i;
    }
  }
  EXPECT_EQ(FakeAddLayerNorm::backward_calls, 2);  // not for the sum's gradient alone
  // A declined backward: layer_norm's backward, then the add's.
  FakeAddLayerNorm::decline_backward = true;
  const TensorList got = grads_of(fused, in, gs, gy), want = grads_of(composition, in, gs, gy);
  for (size_t i = 0; i < in.size(); ++i) EXPECT_TRUE(allclose(got[i], want[i], 1e-12, 1e-12)) << "input " << i;
}

// A bfloat16 delta beside a float32 x (a residual stream under autocast):
// the float32 sum and normalization, delta's gradient in bfloat16, as the
// composition under autocast gives.
TEST(AddLayerNorm, AHalfDeltaBesideAFloatStreamUnderAutocast) {
  FakeAddLayerNormScope fake;
  const TensorList in = {random({5, 6}, 1, DType::Float32), random({5, 6}, 2, DType::BFloat16),
                         random({6}, 3, DType::Float32), random({6}, 4, DType::Float32)};
  const Tensor gs = random({5, 6}, 5), gy = random({5, 6}, 6);
  amp::autocast guard(DType::BFloat16);
  const auto [sum, normed] = fused(in);
  EXPECT_EQ(FakeAddLayerNorm::forward_calls, 1);
  EXPECT_EQ(sum.dtype(), DType::Float32);
  EXPECT_EQ(normed.dtype(), DType::Float32);
  const auto [ref_sum, ref_normed] = composition(in);
  EXPECT_TRUE(allclose(sum, ref_sum, 1e-6, 1e-6));
  EXPECT_TRUE(allclose(normed, ref_normed, 1e-5, 1e-5));
  const TensorList got = grads_of(fused, in, gs, gy), want = grads_of(composition, in, gs, gy);
  ASSERT_EQ(got[1].dtype(), DType::BFloat16);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_TRUE(allclose(got[i].to(DType::Float64), want[i].to(DType::Float64), 1e-2, 1e-4))
        << "input " << i << ": " << (got[i].to(DType::Float64) - want[i].to(DType::Float64)).abs().max().item<double>();
  }
}

// normed_dtype bfloat16 beside a float32 stream under autocast: the
// normalized output is the composition's converted once (bitwise), its
// gradient the composition's through that conversion, whether the fused
// path runs, its backward declines, or there is no fused kernel at all.
TEST(AddLayerNorm, ANormedDtypeConvertsTheNormalizedOutputOnce) {
  const TensorList in = {random({5, 6}, 1, DType::Float32), random({5, 6}, 2, DType::BFloat16),
                         random({6}, 3, DType::Float32), random({6}, 4, DType::Float32)};
  const Tensor gs = random({5, 6}, 5), gy = random({5, 6}, 6);
  amp::autocast guard(DType::BFloat16);
  const SumAndNorm to_bf16 = [](const TensorList& x) {
    return add_layer_norm(x[0], x[1], {6}, x[2], x[3], 1e-5, DType::BFloat16);
  };
  const SumAndNorm reference = [](const TensorList& x) {
    const auto [sum, normed] = composition(x);
    return std::pair{sum, normed.to(DType::BFloat16)};
  };
  const auto [ref_sum, ref_normed] = reference(in);
  for (int mode = 0; mode < 3; ++mode) {
    SCOPED_TRACE(mode == 0 ? "fused" : mode == 1 ? "fused, backward declined" : "composed");
    std::optional<FakeAddLayerNormScope> fake;
    if (mode < 2) fake.emplace();
    FakeAddLayerNorm::decline_backward = mode == 1;
    const auto [sum, normed] = to_bf16(in);
    if (mode < 2) EXPECT_EQ(FakeAddLayerNorm::forward_calls, 1);
    EXPECT_EQ(normed.dtype(), DType::BFloat16);
    EXPECT_TRUE(equal(sum, ref_sum));
    EXPECT_TRUE(equal(normed, ref_normed));
    const TensorList got = grads_of(to_bf16, in, gs, gy), want = grads_of(reference, in, gs, gy);
    for (size_t i = 0; i < in.size(); ++i) {
      EXPECT_EQ(got[i].dtype(), want[i].dtype()) << "input " << i;
      EXPECT_TRUE(allclose(got[i].to(DType::Float64), want[i].to(DType::Float64), 1e-5, 1e-6)) << "input " << i;
    }
  }
  FakeAddLayerNormScope fake;
  (void)add_layer_norm(in[0], in[1], {6}, in[2], in[3], 1e-5, DType::Float16);  // neither x's nor delta's dtype
  EXPECT_EQ(FakeAddLayerNorm::forward_calls, 0);
}

// Where the kernels cannot take the call, the composition runs: shapes that
// broadcast, a float32 delta beside a bfloat16 x (the sum is float32), a
// bfloat16 stream under autocast (layer_norm computes in float32 there).
TEST(AddLayerNorm, ComposesWhereTheKernelsDoNotApply) {
  FakeAddLayerNormScope fake;
  const Tensor x = random({4, 6}, 1), w = random({6}, 3), b = random({6}, 4);
  const auto [s1, n1] = add_layer_norm(x, random({1, 6}, 2), {6}, w, b);
  EXPECT_EQ(s1.shape(), (Shape{4, 6}));
  const auto [s2, n2] = add_layer_norm(x.to(DType::BFloat16), random({4, 6}, 2, DType::Float32), {6});
  EXPECT_EQ(s2.dtype(), DType::Float32);
  {
    amp::autocast guard(DType::BFloat16);
    (void)add_layer_norm(x.to(DType::BFloat16), x.to(DType::BFloat16), {6});
  }
  EXPECT_EQ(FakeAddLayerNorm::forward_calls, 0);
}

}  // namespace
}  // namespace ember
