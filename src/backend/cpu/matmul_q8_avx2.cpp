// AVX2 Q8_0 kernels: activation quantization and int8 x int8 block dots (maddubs + madd).
#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <limits>

#include "backend/cpu/q8_tile_avx2.h"

namespace tf::cpu {

void quantize_q8_avx2(const float* x, int64_t K, uint8_t* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (int64_t b = 0; b < K / kQ8Block; ++b, x += kQ8Block, out += kQ8ActBlockBytes) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(x + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
      // Infinities and NaN both fail |x| <= FLT_MAX.
      bad = _mm256_or_ps(bad, _mm256_cmp_ps(_mm256_andnot_ps(sign, v[i]),
                                            _mm256_set1_ps(std::numeric_limits<float>::max()),
                                            _CMP_NLE_UQ));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
    const bool finite = _mm256_movemask_ps(bad) == 0;
    // A non-finite input makes the block's scale NaN, so every dot it enters is NaN.
    const float d = finite ? _mm_cvtss_f32(m) / 127.0f : std::numeric_limits<float>::quiet_NaN();
    const float id = finite && d != 0.0f ? 1.0f / d : 0.0f;
    std::memcpy(out, &d, 4);
    if (!finite) {
      std::memset(out + 4, 0, kQ8Block);
      continue;
    }
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i)
      q[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], idv),
                                                _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                         _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 4), _mm256_permutevar8x32_epi32(p, perm));
  }
}

void matmul_q8_avx2_plain(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  q8_blocks<false>(b, r0, r1, n0, n1);
}

// AVX-VNNI from CPUID leaf 7 subleaf 1, EAX bit 4 (not every compiler's __builtin_cpu_supports knows it).
static bool cpu_has_avxvnni() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 4)) != 0;
}

// Same lane sums either way: dpbusd adds the four byte products exactly, like maddubs + madd.
void matmul_q8_avx2(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  static const bool vnni = cpu_has_avxvnni();
  if (vnni)
    matmul_q8_vnni(b, r0, r1, n0, n1);
  else
    matmul_q8_avx2_plain(b, r0, r1, n0, n1);
}

}  // namespace tf::cpu
