// dtype sizes, names, promotion and the 16-bit float conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ember/core/dtype.h"
#include "ember/core/scalar.h"

namespace ember {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::Float32), 4u);
  EXPECT_EQ(dtype_size(DType::BFloat16), 2u);
  EXPECT_EQ(dtype_size(DType::Bool), 1u);
  EXPECT_STREQ(dtype_name(DType::Int64), "int64");
}

TEST(DType, PromotionFollowsPyTorch) {
  EXPECT_EQ(promote_types(DType::Int32, DType::Float16), DType::Float16);
  EXPECT_EQ(promote_types(DType::Float16, DType::BFloat16), DType::Float32);
  EXPECT_EQ(promote_types(DType::Int32, DType::Int64), DType::Int64);
  EXPECT_EQ(promote_types(DType::Bool, DType::Int32), DType::Int32);
  EXPECT_EQ(promote_types(DType::Float32, DType::Float64), DType::Float64);
  EXPECT_EQ(promote_with_scalar(DType::Int32, Scalar(2.5)), DType::Float32);
  EXPECT_EQ(promote_with_scalar(DType::Int32, Scalar(2)), DType::Int32);
  EXPECT_EQ(promote_with_scalar(DType::Float16, Scalar(2.5)), DType::Float16);
  EXPECT_EQ(promote_with_scalar(DType::Bool, Scalar(3)), DType::Int64);
}

TEST(Half, RoundTripsAndRoundsToNearestEven) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f, 0.333251953125f}) {
    EXPECT_EQ(float(Half(f)), f) << f;
  }
  EXPECT_TRUE(std::isinf(float(Half(70000.0f))));
  EXPECT_TRUE(std::isnan(float(Half(std::numeric_limits<float>::quiet_NaN()))));
  // 1 + 2^-11 is halfway between 1 and the next half (1 + 2^-10): ties to even gives 1.
  EXPECT_EQ(float(Half(1.0f + 0.00048828125f)), 1.0f);
  EXPECT_EQ(float(Half(1.0f + 0.00048828125f * 3)), 1.0f + 0.001953125f);
  // Every half bit pattern survives float and back.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    Half h = Half::from_bits(uint16_t(b));
    float f = float(h);
    if (std::isnan(f)) continue;
    EXPECT_EQ(Half(f).bits, h.bits) << b;
  }
}

TEST(BFloat16, RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(float(BFloat16(1.0f)), 1.0f);
  EXPECT_EQ(float(BFloat16(3.140625f)), 3.140625f);
  EXPECT_EQ(float(BFloat16(1.0f + 1.0f / 256)), 1.0f);  // tie, to even
  EXPECT_TRUE(std::isnan(float(BFloat16(std::numeric_limits<float>::quiet_NaN()))));
}

}  // namespace
}  // namespace ember
