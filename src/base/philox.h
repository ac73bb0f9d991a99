#pragma once
// Philox4x32-10 (Salmon et al. 2011), the counter-based RNG of sampling, for host and device.
#include <cstdint>

#ifdef __CUDACC__
#define TF_HD __host__ __device__
#else
#define TF_HD
#endif

namespace tf {

// 4 x 32 bits from a 128-bit counter and a 64-bit key.
TF_HD inline void philox4x32(const uint32_t counter[4], const uint32_t key[2], uint32_t out[4]) {
  uint32_t c0 = counter[0], c1 = counter[1], c2 = counter[2], c3 = counter[3];
  uint32_t k0 = key[0], k1 = key[1];
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(0xD2511F53u) * c0;
    const uint64_t p1 = static_cast<uint64_t>(0xCD9E8D57u) * c2;
    const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1 ^ k0;
    const uint32_t n1 = static_cast<uint32_t>(p1);
    const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3 ^ k1;
    const uint32_t n3 = static_cast<uint32_t>(p0);
    c0 = n0, c1 = n1, c2 = n2, c3 = n3;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  out[0] = c0, out[1] = c1, out[2] = c2, out[3] = c3;
}

// Uniform double in [0, 1) for (seed, position, stream).
TF_HD inline double philox_uniform(uint64_t seed, uint64_t position, uint32_t stream = 0) {
  const uint32_t ctr[4] = {static_cast<uint32_t>(position), static_cast<uint32_t>(position >> 32), stream, 0};
  const uint32_t key[2] = {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)};
  uint32_t out[4];
  philox4x32(ctr, key, out);
  const uint64_t bits = (static_cast<uint64_t>(out[0]) << 21) ^ (out[1] >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
}

}  // namespace tf
