// Host-side 16-bit float types: Half (IEEE binary16) and BFloat16.
//
// Contract: these are storage types. Arithmetic converts to float, computes,
// and rounds back (round-to-nearest-even), which is what CUDA's __half and
// __nv_bfloat16 do too, so CPU and GPU results agree bit for bit on casts.
// The conversions are usable from CUDA device code as well.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define EMBER_HOST_DEVICE __host__ __device__
#else
#define EMBER_HOST_DEVICE
#endif

namespace ember {

namespace detail {
EMBER_HOST_DEVICE inline uint32_t float_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
EMBER_HOST_DEVICE inline float bits_float(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}
}  // namespace detail

struct Half {
  uint16_t bits = 0;
  Half() = default;
  EMBER_HOST_DEVICE Half(float f) : bits(from_float(f)) {}
  EMBER_HOST_DEVICE operator float() const { return to_float(bits); }
  EMBER_HOST_DEVICE static Half from_bits(uint16_t b) {
    Half h;
    h.bits = b;
    return h;
  }

  EMBER_HOST_DEVICE static uint16_t from_float(float f) {
    uint32_t x = detail::float_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t abs = x & 0x7fffffffu;
    if (abs >= 0x7f800000u) return uint16_t(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (abs < 0x38800000u) {                                  // subnormal or zero in half
      // Shift the float (with its implicit bit) down into half's subnormal range.
      uint32_t exp = abs >> 23;
      if (exp < 102) return uint16_t(sign);  // below half the smallest subnormal
      uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
      uint32_t shift = 126 - exp;  // 14 + (113 - exp) - 1
      uint32_t half_mant = mant >> shift;
      uint32_t rem = mant & ((1u << shift) - 1);
      uint32_t halfway = 1u << (shift - 1);
      if (rem > halfway || (rem == halfway && (half_mant & 1))) ++half_mant;
      return uint16_t(sign | half_mant);
    }
    uint32_t rounded = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even at bit 13
    return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
  }
  EMBER_HOST_DEVICE static float to_float(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    if (exp == 0x1f) return detail::bits_float(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
      if (mant == 0) return detail::bits_float(sign);
      // subnormal: value = mant * 2^-24
      float v = float(mant) * 5.9604644775390625e-8f;
      return sign ? -v : v;
    }
    return detail::bits_float(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  EMBER_HOST_DEVICE BFloat16(float f) : bits(from_float(f)) {}
  EMBER_HOST_DEVICE operator float() const { return detail::bits_float(uint32_t(bits) << 16); }
  EMBER_HOST_DEVICE static BFloat16 from_bits(uint16_t b) {
    BFloat16 h;
    h.bits = b;
    return h;
  }

  EMBER_HOST_DEVICE static uint16_t from_float(float f) {
    uint32_t x = detail::float_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x40u);  // quiet NaN
    x += 0x7fffu + ((x >> 16) & 1u);
    return uint16_t(x >> 16);
  }
};

}  // namespace ember
