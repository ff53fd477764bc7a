// The CUDA triu/tril kernel against the CPU one: every dtype, batch dims,
// diagonals inside and beyond the matrix, odd sizes, non-contiguous and
// broadcast views, gradients. (These sizes take the kernel's 32-bit index
// path; the 64-bit one needs more than 2^31 elements or offsets.)
#include <gtest/gtest.h>

#include "support/cuda_compare.h"

namespace ember {
namespace {

using testing::cuda_matches_cpu;
using testing::kAllDtypes;
using testing::random_values;

TEST(CudaTriangle, EveryDtypeShapeAndDiagonal) {
  EMBER_REQUIRE_CUDA();
  const Shape shapes[] = {{1, 1}, {7, 7}, {33, 65}, {65, 33}, {3, 2, 17, 19}, {1023, 5}, {1, 1025}};
  for (DType dt : kAllDtypes) {
    for (const Shape& s : shapes) {
      Tensor x = random_values(s, dt, uint64_t(s.back()));
      for (int64_t diagonal : {-1000, -5, -1, 0, 1, 7, 1000}) {
        EXPECT_TRUE(cuda_matches_cpu(
            [diagonal](const TensorList& in) {
              return TensorList{triu(in[0], diagonal), tril(in[0], diagonal)};
            },
            {x}))
            << dtype_name(dt) << " " << shape_str(s) << " diagonal " << diagonal;
      }
    }
  }
}

TEST(CudaTriangle, NonContiguousAndBroadcastViews) {
  EMBER_REQUIRE_CUDA();
  Tensor x = random_values({4, 19, 23}, DType::Float32, 3);
  EXPECT_TRUE(cuda_matches_cpu(
      [](const TensorList& in) {
        return TensorList{triu(in[0].transpose(1, 2), 2), tril(in[0].permute({2, 0, 1}), -3),
                          triu(in[0].narrow(2, 3, 11).narrow(1, 1, 9)), tril(in[0][1].expand({5, 19, 23}), 1)};
      },
      {x}));
}

TEST(CudaTriangle, GradientsMatchCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor x = random_values({3, 17, 13}, dt, 4).set_requires_grad();
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) { return TensorList{triu(in[0], 1) * 2.0 + tril(in[0].transpose(1, 2), -2).sum()}; },
        {x}, /*grads=*/true))
        << dtype_name(dt);
  }
}

}  // namespace
}  // namespace ember
