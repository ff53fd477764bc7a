// The 16-bit float conversions (ember/core/half.h), checked exhaustively: every
// midpoint between two neighbouring values rounds to the even one, a hair
// off the midpoint rounds to the nearer one, and the edges (subnormals,
// overflow, NaN, signed zero) behave as IEEE round-to-nearest-even.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ember/core/half.h"

namespace ember {
namespace {

float next_up(float f) { return std::nextafter(f, std::numeric_limits<float>::infinity()); }
float next_down(float f) { return std::nextafter(f, -std::numeric_limits<float>::infinity()); }

// For each pair of neighbouring finite positive values lo < hi of the 16-bit
// type (bits b and b + 1), the exact midpoint is a float; check the rounding
// there and one float ulp to either side, for both signs.
template <typename H>
void check_all_midpoints(uint32_t last_finite_bits) {
  int bad = 0;
  for (uint32_t b = 0; b < last_finite_bits && bad < 5; ++b) {
    float lo = float(H::from_bits(uint16_t(b))), hi = float(H::from_bits(uint16_t(b + 1)));
    float mid = lo + (hi - lo) / 2;  // exact: the 16-bit types have far fewer bits than float
    uint16_t even = (b & 1) ? uint16_t(b + 1) : uint16_t(b);
    for (float sign : {1.0f, -1.0f}) {
      uint16_t s = sign < 0 ? 0x8000 : 0;
      auto expect = [&](float f, uint16_t want, const char* what) {
        uint16_t got = H(sign * f).bits;
        if (got != uint16_t(want | s) && ++bad <= 5) {
          ADD_FAILURE() << what << " of bits " << b << " (" << sign * f << "): got " << got << ", want " << (want | s);
        }
      };
      expect(lo, uint16_t(b), "exact");
      expect(mid, even, "midpoint");
      expect(next_down(mid), uint16_t(b), "below midpoint");
      expect(next_up(mid), uint16_t(b + 1), "above midpoint");
    }
  }
}

TEST(Half, EveryMidpointRoundsToNearestEven) { check_all_midpoints<Half>(0x7bff); }

TEST(BFloat16, EveryMidpointRoundsToNearestEven) { check_all_midpoints<BFloat16>(0x7f7f); }

TEST(Half, Edges) {
  EXPECT_EQ(Half(1.0f).bits, 0x3c00);
  EXPECT_EQ(Half(-2.0f).bits, 0xc000);
  EXPECT_EQ(Half(0.1f).bits, 0x2e66);
  EXPECT_EQ(Half(65504.0f).bits, 0x7bff);             // the largest half
  EXPECT_EQ(Half(next_down(65520.0f)).bits, 0x7bff);  // just below the overflow midpoint
  EXPECT_EQ(Half(65520.0f).bits, 0x7c00);             // the midpoint to "65536" rounds to inf
  EXPECT_EQ(Half(-1e10f).bits, 0xfc00);
  EXPECT_EQ(Half(std::numeric_limits<float>::infinity()).bits, 0x7c00);
  EXPECT_EQ(Half(5.9604644775390625e-8f).bits, 0x0001);   // 2^-24, the smallest subnormal
  EXPECT_EQ(Half(2.98023223876953125e-8f).bits, 0x0000);  // 2^-25: a tie, to even (zero)
  EXPECT_EQ(Half(next_up(2.98023223876953125e-8f)).bits, 0x0001);
  EXPECT_EQ(Half(1e-30f).bits, 0x0000);
  EXPECT_EQ(Half(-0.0f).bits, 0x8000);
  EXPECT_EQ(Half(6.103515625e-05f).bits, 0x0400);             // 2^-14, the smallest normal
  EXPECT_EQ(Half(next_down(6.103515625e-05f)).bits, 0x0400);  // rounds up out of the subnormals
  uint16_t nan = Half(std::numeric_limits<float>::quiet_NaN()).bits;
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  EXPECT_TRUE(std::isnan(float(Half::from_bits(0x7c01))));
  EXPECT_TRUE(std::isinf(float(Half::from_bits(0xfc00))));
  EXPECT_EQ(float(Half::from_bits(0x8001)), -5.9604644775390625e-8f);
}

TEST(BFloat16, Edges) {
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(BFloat16(-0.0f).bits, 0x8000);
  EXPECT_EQ(BFloat16(3.3895313892515355e38f).bits, 0x7f7f);             // the largest bfloat16
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::max()).bits, 0x7f80);  // rounds up to inf
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::infinity()).bits, 0x7f80);
  EXPECT_EQ(BFloat16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);  // tie with 0: to even
  uint16_t nan = BFloat16(std::numeric_limits<float>::quiet_NaN()).bits;
  EXPECT_EQ(nan & 0x7f80, 0x7f80);
  EXPECT_NE(nan & 0x007f, 0);
  // A signalling NaN whose payload sits only in the low bits must stay a NaN.
  uint32_t snan_bits = 0x7f800001;
  float snan;
  std::memcpy(&snan, &snan_bits, 4);
  EXPECT_TRUE(std::isnan(float(BFloat16(snan))));
  // Every bfloat16 is a float with the low 16 bits zero: all round-trip.
  for (uint32_t b = 0; b < 0x10000; ++b) {
    BFloat16 h = BFloat16::from_bits(uint16_t(b));
    if (std::isnan(float(h))) continue;
    ASSERT_EQ(BFloat16(float(h)).bits, h.bits) << b;
  }
}

}  // namespace
}  // namespace ember
