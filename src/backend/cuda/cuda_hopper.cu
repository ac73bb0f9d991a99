// TMA descriptors (cuda_hopper.cuh), encoded through the driver's entry point.
#include "backend/cuda/cuda_hopper.cuh"

#include <cuda_runtime.h>
#include <cudaTypedefs.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <unordered_map>

#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

// cuTensorMapEncodeTiled, from the driver through the runtime; null where the driver lacks it.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      f = nullptr;
    cudaGetLastError();
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// 1 in *out when this build holds the sm_90a code for the device it runs on.
__global__ void wgmma_probe(int* out) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  *out = 1;
#else
  *out = 0;
#endif
}

}  // namespace

bool wgmma_ready() {
  static const bool ready = [] {
    // TF_CUDA_WGMMA=0: the mma.sync kernels, for side-by-side timing.
    const char* e = std::getenv("TF_CUDA_WGMMA");
    if (e && std::string(e) == "0") return false;
    int* d = nullptr;
    int h = 0;
    if (cudaMalloc(&d, sizeof(int)) != cudaSuccess) return false;
    wgmma_probe<<<1, 1, 0, stream()>>>(d);
    const bool ok = cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(d);
    cudaGetLastError();  // a device without the code leaves a launch error behind
    return ok && h == 1;
  }();
  return ready;
}

bool tma_ready() { return tensor_map_encoder() != nullptr; }

// Descriptors hold only the address and shape, so each is encoded once and kept.
CUtensorMap box_map(const void* p, int64_t cols, int64_t rows, int64_t stride, int box_rows) {
  struct Key {
    const void* p;
    int64_t cols, rows, stride;
    int box;
    bool operator==(const Key& o) const {
      return p == o.p && cols == o.cols && rows == o.rows && stride == o.stride && box == o.box;
    }
  };
  struct Hash {
    size_t operator()(const Key& k) const {
      uint64_t h = reinterpret_cast<uintptr_t>(k.p);
      for (const uint64_t v : {static_cast<uint64_t>(k.cols), static_cast<uint64_t>(k.rows),
                               static_cast<uint64_t>(k.stride), static_cast<uint64_t>(k.box)})
        h = (h ^ v) * 0x100000001b3ull;
      return static_cast<size_t>(h);
    }
  };
  thread_local std::unordered_map<Key, CUtensorMap, Hash> kept;
  const Key key{p, cols, rows, stride, box_rows};
  if (const auto it = kept.find(key); it != kept.end()) return it->second;
  if (kept.size() >= 4096) kept.clear();  // a bound on the host memory kept
  CUtensorMap m;
  std::memset(&m, 0, sizeof m);  // the bytes a graphed round compares are all set
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride) * 2};
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};  // 64 k: one 128-byte swizzle row
  const cuuint32_t unit[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(&m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(p), dims, strides,
                                          box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                          CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    fail("matmul: TMA descriptor refused (CUresult " + std::to_string(static_cast<int>(r)) + ")");
  kept.emplace(key, m);
  return m;
}

}  // namespace tf::cuda
