// Paged KV writes on the GPU: kv_store, and the pool slots attention_prep writes.
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

template <class E>
__global__ void kv_store_kernel(E* k_layer, E* v_layer, const float* k, const float* v,
                                const int64_t* dst_row, int64_t width, int64_t total) {
  grid_wait();
  grid_launch_next();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= total) return;
  const int64_t r = i / width, c = i % width;
  kv_put(k_layer + dst_row[r] * width + c, k[i]);
  kv_put(v_layer + dst_row[r] * width + c, v[i]);
}

}  // namespace

void CudaBackend::check_kv_mode(const CudaKv& kv, const char* op) const {
  const bool bf16 = matmul_input() == MatmulInput::BF16;
  TF_CHECK(kv.bf16() == bf16, op, ": the KV cache holds ", kv.bf16() ? "bf16" : "f32", " values but the backend is in ",
           matmul_input_name(matmul_input()), " mode (a cache is made in the mode that reads it)");
}

const int64_t* CudaBackend::kv_slots(const CudaKv& kv, int layer, const Tensor& k, const Tensor& v,
                                      const RowLayout& rows, const char* op) {
  check_tensor(k, op, "k");
  check_tensor(v, op, "v");
  const int64_t width = static_cast<int64_t>(kv.kv_heads) * kv.head_dim;
  TF_CHECK(k.cols == width && v.cols == width && k.rows == v.rows, op, ": k [", k.rows, " x ",
           k.cols, "] and v [", v.rows, " x ", v.cols, "] for ", kv.kv_heads, " heads of ",
           kv.head_dim);
  TF_CHECK(layer >= 0 && layer < kv.layers, op, ": layer ", layer, " of ", kv.layers);
  check_kv_mode(kv, op);
  check_layout(rows, k.rows, op);
  for (int r = 0; r < k.rows; ++r) check_row(rows, r, rows.pos[static_cast<size_t>(r)], kv, op);
  if (k.rows == 0) return nullptr;
  std::vector<int64_t> dst(static_cast<size_t>(k.rows));
  for (int r = 0; r < k.rows; ++r) {
    const int32_t pos = rows.pos[static_cast<size_t>(r)];
    const int32_t page = rows.seq_pages[static_cast<size_t>(rows.seq[static_cast<size_t>(r)])]
                                       [static_cast<size_t>(pos / kv.page_size)];
    dst[static_cast<size_t>(r)] = static_cast<int64_t>(page) * kv.page_size + pos % kv.page_size;
  }
  return static_cast<const int64_t*>(meta(dst.data(), dst.size() * 8));
}

void CudaBackend::kv_store(KvStorage& kvs, int layer, const Tensor& k, const Tensor& v,
                           const RowLayout& rows) {
  const ProfScope prof(*this, "kv_store", nullptr, k.rows);
  const CudaKv& kv = as_cuda_kv(kvs, "kv_store");
  const int64_t* d_dst = kv_slots(kv, layer, k, v, rows, "kv_store");
  if (k.rows == 0) return;
  const int64_t width = k.cols, total = k.rows * width;
  if (kv.bf16())
    launch_kernel(kv_store_kernel<uint16_t>, grid_for(total, 256), 256, 0, static_cast<uint16_t*>(kv.k_layer(layer)),
                  static_cast<uint16_t*>(kv.v_layer(layer)), k.data, v.data, d_dst, width, total);
  else
    launch_kernel(kv_store_kernel<float>, grid_for(total, 256), 256, 0, static_cast<float*>(kv.k_layer(layer)),
                  static_cast<float*>(kv.v_layer(layer)), k.data, v.data, d_dst, width, total);
  check_launch("kv_store");
  kv_written_at_ = launch_count();
}

}  // namespace tf::cuda
