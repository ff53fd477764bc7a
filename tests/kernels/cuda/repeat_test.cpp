// repeat and tile on CUDA (copy_'s strided kernel) against the CPU: every
// dtype, new leading dims, zero counts, non-contiguous and broadcast
// inputs, gradients.
#include <gtest/gtest.h>

#include "support/cuda_compare.h"

namespace ember {
namespace {

using testing::cuda_matches_cpu;
using testing::kAllDtypes;
using testing::random_values;

TEST(CudaRepeat, EveryDtypeAndLayout) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kAllDtypes) {
    Tensor x = random_values({5, 7, 3}, dt, 1);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          return TensorList{in[0].repeat({2, 3, 1}),
                            in[0].permute({2, 0, 1}).repeat({2, 1, 1, 3}),
                            in[0].narrow(1, 1, 5).repeat({1, 0, 2}),
                            in[0][0].unsqueeze(0).expand({4, 7, 3}).repeat({1, 2, 1}),
                            tile(in[0], {3}),
                            tile(in[0].select(2, 1), {2, 2, 2})};
        },
        {x}))
        << dtype_name(dt);
  }
  Tensor big = random_values({1025}, DType::Float32, 2);
  EXPECT_TRUE(cuda_matches_cpu([](const TensorList& in) { return TensorList{in[0].repeat({65, 3})}; }, {big}));
}

TEST(CudaRepeat, GradientsMatchCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor x = random_values({6, 5}, dt, 3).set_requires_grad();
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          return TensorList{in[0].repeat({3, 1, 2}), tile(in[0].t(), {2, 3})};
        },
        {x},
        /*grads=*/true))
        << dtype_name(dt);
  }
}

}  // namespace
}  // namespace ember
