// CUDA sort, argsort, topk and searchsorted against the CPU kernels: the
// indices must be identical (ties, NaN, -0.0 included), for every dtype, row
// lengths from 1 to 65537, several dims and non-contiguous views, topk of
// 40 from 50257-wide rows; values' gradients through gather.
#include <gtest/gtest.h>

#include <limits>

#include "support/cuda_compare.h"

namespace ember {
namespace {

using testing::cuda_matches_cpu;

// Values with many ties (integers 0..9), some -0.0 and NaN for floats.
Tensor tied_values(const Shape& shape, DType dt, uint64_t seed) {
  Generator g(seed);
  Tensor v = randint(-5, 5, shape, DType::Int64, kCPU, &g).to(DType::Float64);
  if (!is_floating(dt)) return v.to(dt);
  Tensor u = rand(shape, DType::Float64, kCPU, &g);
  v = where(lt(u, 0.05), full({}, std::numeric_limits<double>::quiet_NaN(), DType::Float64), v);
  v = where(gt(u, 0.95), full({}, -0.0, DType::Float64), v);
  return v.to(dt);
}

TEST(CudaSort, IndicesMatchCpuEveryDtypeAndLength) {
  EMBER_REQUIRE_CUDA();
  for (DType dt :
       {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16, DType::Int32, DType::Int64, DType::Bool}) {
    for (int64_t n : {1, 7, 33, 1023, 1025, 4097, 65537}) {
      Tensor x = tied_values({n > 4096 ? 3 : 17, n}, dt, uint64_t(n));
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            auto [v, i] = sort(in[0]);
            auto [vd, id] = sort(in[0], -1, true);
            return TensorList{v, i, vd, id};
          },
          {x}))
          << dtype_name(dt) << " n=" << n;
    }
  }
}

TEST(CudaSort, DimsViewsAndTopk) {
  EMBER_REQUIRE_CUDA();
  Tensor x = tied_values({6, 129, 5}, DType::Float32, 1);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        return TensorList{argsort(in[0], 0),
                          argsort(in[0], 1, true),
                          argsort(in[0].transpose(0, 2), 2),
                          argsort(in[0].narrow(1, 3, 77), 1),
                          argsort(in[0].select(2, 1).unsqueeze(0).expand({3, 6, 129}), 2),
                          topk(in[0], 7, 1).second,
                          topk(in[0], 3, 0, false).first};
      },
      {x}));
  Generator g(2);
  Tensor logits = randn({3, 50257}, DType::Float32, kCPU, &g);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        auto [v, i] = topk(in[0], 40);
        return TensorList{v, i, topk(in[0].to(DType::BFloat16), 40).second};
      },
      {logits}));
}

TEST(CudaSort, GradientsOfValues) {
  EMBER_REQUIRE_CUDA();
  Generator g(3);
  Tensor x = randn({9, 301}, DType::Float32, kCPU, &g).set_requires_grad();
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        return TensorList{sort(in[0], 1).first, topk(in[0], 5, 0).first, sort(in[0].t(), 1, true).first};
      },
      {x}, true));
}

TEST(CudaSearchsorted, MatchesCpu) {
  EMBER_REQUIRE_CUDA();
  Generator g(4);
  Tensor seq = sort(randint(0, 50, {1025}, DType::Int64, kCPU, &g).to(DType::Float32)).first;
  Tensor rows = sort(randn({7, 33}, DType::Float64, kCPU, &g), 1).first;
  Tensor values = randint(-2, 52, {13, 9}, DType::Int64, kCPU, &g);
  Tensor row_values = randn({7, 65}, DType::Float64, kCPU, &g);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        return TensorList{searchsorted(in[0], in[2]), searchsorted(in[0], in[2].t(), true), searchsorted(in[1], in[3]),
                          searchsorted(in[1], in[3], true),
                          searchsorted(in[0].to(DType::Float16), in[2].to(DType::Float16))};
      },
      {seq, rows, values, row_values}));
}

}  // namespace
}  // namespace ember
