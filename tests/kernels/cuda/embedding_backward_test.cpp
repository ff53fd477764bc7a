// embedding's weight gradient on CUDA (ember/kernels/cuda/embedding_backward.cu)
// against the CPU kernel: the same bits for float32 and float64 with many
// repeated indices (GPT-2's vocabulary, and a handful of rows that every
// position hits), the same bits on a second run, the half types within a
// rounding, int32 and int64 indices, strided and broadcast gradients, every
// element written over NaN, no index at all, the op's gradients through
// autograd (second order included), and the kernel and the op's backward
// captured in a CUDA graph and replayed on new values.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "ember/core/ops/embedding_kernels.h"
#include "support/cuda_compare.h"

#ifdef EMBER_WITH_CUDA
#include "ember/core/cuda/graph.h"
#endif

namespace ember {
namespace {

using testing::cuda_matches_cpu;
using testing::random_values;
using testing::Tolerance;

const DType kIndexTypes[] = {DType::Int64, DType::Int32};

Tensor random_index(int64_t high, int64_t n, DType dtype, uint64_t seed) {
  Generator g(seed);
  return randint(0, high, {n}, dtype, kCPU, &g);
}

// The weight gradient (num_embeddings, dim) of grad_out (n, dim, any
// strides) and a dense index, from the kernel of grad_out's device, into a
// tensor filled with NaN first.
Tensor weight_grad(const Tensor& grad_out, const Tensor& index, int64_t num_embeddings) {
  Tensor out = full({num_embeddings, grad_out.size(1)}, std::nan(""), grad_out.dtype(), grad_out.device());
  EmbeddingBackwardArgs a;
  a.device = grad_out.device().index;
  a.grad_weight = out.data_ptr();
  a.grad_out = grad_out.data_ptr();
  a.grad_out_row_stride = grad_out.stride(0);
  a.grad_out_col_stride = grad_out.stride(1);
  a.indices = index.data_ptr();
  a.num_indices = index.numel();
  a.num_embeddings = num_embeddings;
  a.dim = grad_out.size(1);
  a.dtype = grad_out.dtype();
  a.index_dtype = index.dtype();
  embedding_backward_stub(grad_out.device().type)(a);
  return out;
}

// Same shape, dtype and bytes; the message names the first differing element.
::testing::AssertionResult same_bits(const Tensor& actual, const Tensor& expected) {
  Tensor x = actual.cpu().contiguous(), y = expected.cpu().contiguous();
  if (x.shape() != y.shape() || x.dtype() != y.dtype()) {
    return ::testing::AssertionFailure() << "got " << shape_str(x.shape()) << " " << dtype_name(x.dtype())
                                         << ", expected " << shape_str(y.shape()) << " " << dtype_name(y.dtype());
  }
  const size_t size = dtype_size(x.dtype());
  const auto* p = static_cast<const unsigned char*>(x.data_ptr());
  const auto* q = static_cast<const unsigned char*>(y.data_ptr());
  for (size_t i = 0; i < size_t(x.numel()) * size; ++i) {
    if (p[i] != q[i]) {
      const int64_t e = int64_t(i / size);
      return ::testing::AssertionFailure() << "element " << e << " (row " << e / x.size(1) << ") differs: got "
                                           << to_vector<double>(x.reshape({-1}).narrow(0, e, 1))[0] << ", expected "
                                           << to_vector<double>(y.reshape({-1}).narrow(0, e, 1))[0];
    }
  }
  return ::testing::AssertionSuccess();
}

std::string what(DType dt, DType it, int64_t rows, int64_t dim) {
  return std::string(dtype_name(dt)) + " index " + dtype_name(it) + ", " + std::to_string(rows) + " rows of " +
         std::to_string(dim);
}

// 16384 positions over GPT-2's 50257 rows (about a third used, some
// repeated) and over 7 rows (thousands of positions each).
TEST(CudaEmbeddingBackward, Float32AndFloat64MatchTheCpuBitForBitWithManyRepeats) {
  EMBER_REQUIRE_CUDA();
  const Device gpu = cuda_device(0);
  for (DType dt : {DType::Float32, DType::Float64}) {
    for (DType it : kIndexTypes) {
      for (int64_t rows : {50257, 7}) {
        for (int64_t dim : {1, 33, 96}) {
          Tensor grad = random_values({16384, dim}, dt, 1 + uint64_t(dim));
          Tensor idx = random_index(rows, 16384, it, 2 + uint64_t(rows));
          Tensor expected = weight_grad(grad, idx, rows);
          Tensor first = weight_grad(grad.to(gpu), idx.to(gpu), rows);
          EXPECT_TRUE(same_bits(first, expected)) << what(dt, it, rows, dim);
          EXPECT_TRUE(same_bits(weight_grad(grad.to(gpu), idx.to(gpu), rows), first))
              << what(dt, it, rows, dim) << ": a second run";
        }
      }
    }
  }
}

TEST(CudaEmbeddingBackward, HalfTypesWithinARoundingAndTheSameBitsTwice) {
  EMBER_REQUIRE_CUDA();
  const Device gpu = cuda_device(0);
  for (DType dt : {DType::Float16, DType::BFloat16}) {
    for (int64_t rows : {1000, 7}) {
      Tensor grad = random_values({4096, 64}, dt, 3);
      Tensor idx = random_index(rows, 4096, DType::Int32, 4);
      Tensor first = weight_grad(grad.to(gpu), idx.to(gpu), rows);
      EXPECT_TRUE(testing::tensors_close(first, weight_grad(grad, idx, rows))) << what(dt, DType::Int32, rows, 64);
      EXPECT_TRUE(same_bits(weight_grad(grad.to(gpu), idx.to(gpu), rows), first))
          << what(dt, DType::Int32, rows, 64) << ": a second run";
    }
  }
}

// A transposed gradient (column stride n), a broadcast one (row stride 0),
// one position, and none (every row zero over the NaN fill).
TEST(CudaEmbeddingBackward, StridedBroadcastAndEmptyGradients) {
  EMBER_REQUIRE_CUDA();
  const Device gpu = cuda_device(0);
  for (DType it : kIndexTypes) {
    Tensor idx = random_index(50, 300, it, 5);
    Tensor transposed = random_values({40, 300}, DType::Float32, 6).t();
    Tensor broadcast = random_values({1, 40}, DType::Float32, 7).expand({300, 40});
    EXPECT_TRUE(same_bits(weight_grad(transposed.to(gpu).t().contiguous().t(), idx.to(gpu), 50),
                          weight_grad(transposed, idx, 50)));
    Tensor broadcast_gpu = random_values({1, 40}, DType::Float32, 7).to(gpu).expand({300, 40});
    ASSERT_EQ(broadcast_gpu.stride(0), 0);
    EXPECT_TRUE(same_bits(weight_grad(broadcast_gpu, idx.to(gpu), 50), weight_grad(broadcast, idx, 50)));
    Tensor one = random_values({1, 40}, DType::Float32, 8);
    Tensor one_index = random_index(50, 1, it, 9);
    EXPECT_TRUE(same_bits(weight_grad(one.to(gpu), one_index.to(gpu), 50), weight_grad(one, one_index, 50)));
    Tensor none = zeros({0, 40}, DType::Float32, gpu);
    EXPECT_TRUE(same_bits(weight_grad(none, zeros({0}, it, gpu), 50), zeros({50, 40})));
  }
}

// Through embedding and autograd: the weight gradient (exact for float32),
// a non-contiguous weight and index, and second order (the weight gradient
// differentiated in the output's gradient).
TEST(CudaEmbeddingBackward, ThroughTheOpFirstAndSecondOrder) {
  EMBER_REQUIRE_CUDA();
  for (DType it : kIndexTypes) {
    Tensor w = random_values({300, 48}, DType::Float32, 10).set_requires_grad();
    Tensor idx = random_index(300, 8 * 512, it, 11).reshape({8, 512});
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          return TensorList{embedding(in[0], in[1]), embedding(in[0].narrow(1, 5, 40), in[1].t())};
        },
        {w, idx}, /*grads=*/true, Tolerance{0, 0}))
        << dtype_name(it);
    Tensor w64 = random_values({20, 6}, DType::Float64, 12).set_requires_grad();
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          Tensor y = embedding(in[0], in[1]);
          return TensorList{autograd::grad({(y * y * y).sum()}, {in[0]}, {}, true, true)[0]};
        },
        {w64, random_index(20, 64, it, 13).reshape({4, 16})}, /*grads=*/true))
        << dtype_name(it);
  }
}

#ifdef EMBER_WITH_CUDA
// The kernel, and embedding's forward and backward, captured in a graph and
// replayed after new gradients and indices were copied into the captured
// inputs. Each runs once before the capture (cub's first use does setup).
TEST(CudaEmbeddingBackward, CapturedInAGraphAndReplayed) {
  EMBER_REQUIRE_CUDA();
  const Device gpu = cuda_device(0);
  const int64_t rows = 1000, n = 2048, dim = 64;
  Tensor grad = random_values({n, dim}, DType::Float32, 14).to(gpu);
  Tensor idx = random_index(rows, n, DType::Int64, 15).to(gpu);
  Tensor w = random_values({rows, dim}, DType::Float32, 16).to(gpu).set_requires_grad();
  Tensor kernel_out, op_grad;
  auto work = [&] {
    kernel_out = weight_grad(grad, idx, rows);
    op_grad = autograd::grad({embedding(w, idx)}, {w}, {grad})[0];
  };
  work();
  cuda::Graph graph;
  graph.capture(work);
  for (uint64_t replay = 0; replay < 2; ++replay) {
    Tensor new_grad = random_values({n, dim}, DType::Float32, 17 + replay);
    Tensor new_idx = random_index(rows, n, DType::Int64, 19 + replay);
    grad.copy_(new_grad.to(gpu));
    idx.copy_(new_idx.to(gpu));
    kernel_out.fill_(std::nan(""));
    op_grad.fill_(std::nan(""));
    graph.replay();
    Tensor expected = weight_grad(new_grad, new_idx, rows);
    EXPECT_TRUE(same_bits(kernel_out, expected)) << "replay " << replay;
    EXPECT_TRUE(same_bits(op_grad, expected)) << "replay " << replay;
  }
}
#endif

}  // namespace
}  // namespace ember
