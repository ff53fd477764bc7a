// Philox4x32-10, the counter-based generator behind every random op.
//
// Contract: element i of a random op started at (seed, offset) uses counter
// block offset + i (words x and y; normal values use both for Box-Muller).
// The same function runs on CPU and CUDA, so a seed gives the same numbers
// on every device and any launch shape (normal values up to the rounding of
// log, sqrt and cos).
#pragma once

#include <cstdint>

#include "ember/core/half.h"

namespace ember::philox {

struct Uint4 {
  uint32_t x, y, z, w;
};

EMBER_HOST_DEVICE inline uint32_t mulhilo(uint32_t a, uint32_t b, uint32_t* hi) {
  uint64_t p = uint64_t(a) * uint64_t(b);
  *hi = uint32_t(p >> 32);
  return uint32_t(p);
}

// Four 32-bit random words for counter `block` under key `seed`.
EMBER_HOST_DEVICE inline Uint4 generate(uint64_t seed, uint64_t block) {
  uint32_t c0 = uint32_t(block), c1 = uint32_t(block >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, hi1;
    uint32_t lo0 = mulhilo(0xD2511F53u, c0, &hi0);
    uint32_t lo1 = mulhilo(0xCD9E8D57u, c2, &hi1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n1 = lo1, n2 = hi0 ^ c3 ^ k1, n3 = lo0;
    c0 = n0;
    c1 = n1;
    c2 = n2;
    c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

// Uniform in [0, 1) with 24 random bits (exactly representable in float).
EMBER_HOST_DEVICE inline float uniform(uint32_t bits) { return float(bits >> 8) * (1.0f / 16777216.0f); }
// Uniform in (0, 1], safe to take the log of.
EMBER_HOST_DEVICE inline float uniform_open0(uint32_t bits) { return float((bits >> 8) + 1) * (1.0f / 16777216.0f); }

}  // namespace ember::philox
