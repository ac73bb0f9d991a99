// AVX-VNNI build of the Q8_0 tile (vpdpbusd; -mavxvnni from CMakeLists.txt); chosen at run time
// by matmul_q8_avx2.
#include "backend/cpu/q8_tile_avx2.h"

namespace tf::cpu {

void matmul_q8_vnni(const MatmulBlock& b, int64_t r0, int64_t r1, int64_t n0, int64_t n1) {
  q8_blocks<true>(b, r0, r1, n0, n1);
}

}  // namespace tf::cpu
