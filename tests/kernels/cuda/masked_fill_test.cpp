// masked_fill and masked_fill_ on CUDA (where's kernel) against the CPU:
// every dtype, Scalar and 0-dim tensor values (also a CPU value for a CUDA
// tensor), broadcast masks both ways, non-contiguous views, gradients of x
// and of the value.
#include <gtest/gtest.h>

#include "support/cuda_compare.h"
#include "support/error_message.h"

namespace ember {
namespace {

using testing::cuda_matches_cpu;
using testing::kAllDtypes;
using testing::random_values;

TEST(CudaMaskedFill, EveryDtypeAndBroadcast) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : kAllDtypes) {
    for (int64_t n : testing::odd_sizes()) {
      if (n > 1025) continue;
      Tensor x = random_values({3, n}, dt, uint64_t(n));
      Tensor mask = random_values({3, n}, DType::Bool, uint64_t(n) + 1);
      Tensor row = random_values({n}, DType::Bool, uint64_t(n) + 2);
      Tensor col = random_values({4, 3, 1}, DType::Bool, uint64_t(n) + 3);
      EXPECT_TRUE(cuda_matches_cpu(
          [](const TensorList& in) {
            return TensorList{masked_fill(in[0], in[1], 1), masked_fill(in[0], in[2], -2.5),
                              masked_fill(in[0], in[3], full({}, 3.0, DType::Float64))};
          },
          {x, mask, row, col}))
          << dtype_name(dt) << " n=" << n;
    }
  }
}

TEST(CudaMaskedFill, ViewsInPlaceAndACpuValue) {
  EMBER_REQUIRE_CUDA();
  Tensor x = random_values({17, 23}, DType::Float32, 5);
  Tensor mask = random_values({23, 17}, DType::Bool, 6);
  Tensor v = full({}, 4.0, DType::Float32);
  EXPECT_TRUE(cuda_matches_cpu(
      [cpu_value = v](const TensorList& in) {
        Tensor y = in[0].t().masked_fill(in[1], cpu_value);  // a CPU value for either device
        Tensor z = in[0].clone();
        z.t().masked_fill_(in[1], -1);
        Tensor w = in[0].narrow(1, 2, 11).clone();
        w.masked_fill_(in[1][0].narrow(0, 0, 11), in[2]);
        return TensorList{y, z, w};
      },
      {x, mask, v}));
}

TEST(CudaMaskedFill, GradientsMatchCpu) {
  EMBER_REQUIRE_CUDA();
  for (DType dt : {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}) {
    Tensor x = random_values({13, 7}, dt, 7).set_requires_grad();
    Tensor v = full({}, 0.5, DType::Float32).set_requires_grad();
    Tensor mask = random_values({7}, DType::Bool, 8);
    EXPECT_TRUE(cuda_matches_cpu(
        [](const TensorList& in) {
          Tensor y = in[0] * 2.0;
          y.masked_fill_(in[2], in[1]);
          return TensorList{masked_fill(in[0], in[2], in[1]), y};
        },
        {x, v, mask}, /*grads=*/true))
        << dtype_name(dt);
  }
}

TEST(CudaMaskedFill, TheMaskMustBeOnXsDevice) {
  EMBER_REQUIRE_CUDA();
  Tensor x = zeros({3}, DType::Float32, cuda_device(0));
  EXPECT_TRUE(testing::throws_with(
      [&] {
        x.masked_fill(from_vector<bool>({true, false, true}), 1);
      },
      {"masked_fill", "mask", "cpu", "cuda:0", ".to(device)"}));
}

}  // namespace
}  // namespace ember
