// CPU kernels of linear's fused GEMMs (see ember/core/ops/gemm_kernels.h for the
// contracts).
//
// Bias epilogue: each row of C is first set to the bias, then the CPU GEMM
// adds the product with beta = 1. The 16-bit float GEMM adds beta * C to its
// float accumulator before it rounds, so the bias is added in float and the
// result rounded once, as cublasLt's epilogue does.
//
// Bias-gradient epilogue: the CPU GEMM writes C, and the row sums of op(A)
// are formed in its accumulation type in index order. A float32 C from
// 16-bit operands takes them widened to float (exactly) and multiplied by
// the float32 GEMM. Both epilogues split their rows over threads as the
// GEMM does (each row summed as on one thread).
#include <algorithm>
#include <cstring>
#include <vector>

#include "ember/core/ops/gemm_kernels.h"
#include "ember/core/parallel_for.h"
#include "ember/kernels/acc_type.h"

namespace ember::cpu {
namespace {

bool gemm_bias_kernel(const GemmArgs& g, const void* bias) {
  EMBER_CHECK(g.batch == 1 && g.beta == 0, "gemm_bias: takes one matrix with beta 0, but got a batch of "
                                               << g.batch << " with beta " << g.beta << " for " << gemm_str(g));
  const size_t row_bytes = size_t(g.n) * dtype_size(g.dtype);
  char* c = static_cast<char*>(g.c);
  for (int64_t i = 0; i < g.m; ++i) std::memcpy(c + size_t(i * g.ldc) * dtype_size(g.dtype), bias, row_bytes);
  GemmArgs with_c = g;
  with_c.beta = 1;
  gemm_stub(DeviceType::CPU)(with_c);
  return true;
}

// op(X) (rows x cols) as a dense row-major float matrix.
template <typename T>
std::vector<float> widened(bool trans, const void* p, int64_t rows, int64_t cols, int64_t ld) {
  const T* x = static_cast<const T*>(p);
  std::vector<float> out(size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < cols; ++j) out[size_t(i * cols + j)] = float(trans ? x[j * ld + i] : x[i * ld + j]);
  }
  return out;
}

// bias_grad[i] = sum_p op(A)(i, p), into O.
template <typename T, typename O>
void row_sums_of_op_a(const GemmArgs& g, void* bias_grad) {
  const T* a = static_cast<const T*>(g.a);
  O* out = static_cast<O*>(bias_grad);
  parallel_for(0, g.m, kCpuGrain / std::max<int64_t>(g.k, 1) + 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      acc_t<T> s = 0;
      for (int64_t p = 0; p < g.k; ++p) s += acc_t<T>(g.trans_a ? a[p * g.lda + i] : a[i * g.lda + p]);
      out[i] = O(s);
    }
  });
}

template <typename T>
void bias_grad_gemm(const GemmArgs& g, DType c_dtype, void* bias_grad) {
  if (c_dtype == g.dtype) {
    gemm_stub(DeviceType::CPU)(g);
    if (bias_grad) row_sums_of_op_a<T, T>(g, bias_grad);
    return;
  }
  const std::vector<float> a = widened<T>(g.trans_a, g.a, g.m, g.k, g.lda);
  const std::vector<float> b = widened<T>(g.trans_b, g.b, g.k, g.n, g.ldb);
  GemmArgs f = g;
  f.dtype = DType::Float32;
  f.trans_a = f.trans_b = false;
  f.a = a.data();
  f.lda = g.k;
  f.b = b.data();
  f.ldb = g.n;
  gemm_stub(DeviceType::CPU)(f);
  if (bias_grad) row_sums_of_op_a<T, float>(g, bias_grad);
}

bool gemm_bias_grad_kernel(const GemmArgs& g, DType c_dtype, void* bias_grad) {
  check_gemm_bias_grad(g, c_dtype);
  EMBER_DISPATCH_FLOAT(g.dtype, "gemm_bias_grad", [&]<typename T>() { bias_grad_gemm<T>(g, c_dtype, bias_grad); });
  return true;
}

}  // namespace

EMBER_REGISTER_KERNEL(gemm_bias_stub, DeviceType::CPU, gemm_bias_kernel);
EMBER_REGISTER_KERNEL(gemm_bias_grad_stub, DeviceType::CPU, gemm_bias_grad_kernel);

}  // namespace ember::cpu
