// Memory, weights, KV storage and the factory of the CUDA backend.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_factory.h"
#include "backend/cuda/cuda_graph.cuh"
#include "backend/cuda/cuda_profile.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

cudaStream_t stream() {
  static const cudaStream_t s = [] {
    cudaStream_t x = nullptr;
    TF_CUDA_CHECK(cudaStreamCreate(&x), "stream");
    return x;
  }();
  return s;
}

bool pdl_on() {
  static const bool on = [] {
    const char* e = std::getenv("TF_CUDA_PDL");
    if (e && std::string(e) == "0") return false;
    int dev = 0, major = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
           major >= 9;
  }();
  return on;
}

bool cluster_on() {
  static const bool on = [] {
    int dev = 0, yes = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
           cudaDeviceGetAttribute(&yes, cudaDevAttrClusterLaunch, dev) == cudaSuccess && yes != 0;
  }();
  return on;
}

namespace {

// Fills the block's shared memory with all-ones words; volatile, so no store is dropped as unread.
__global__ void poison_shared_kernel(int words) {
  extern __shared__ uint32_t poison_words[];
  volatile uint32_t* w = poison_words;
  for (int i = threadIdx.x; i < words; i += blockDim.x) w[i] = 0xffffffffu;
}

}  // namespace

bool poison_shared_on() {
  static const bool on = [] {
    const char* e = std::getenv("TF_CUDA_POISON_SHARED");
    return e && std::string(e) == "1";
  }();
  return on;
}

// One block of the most shared memory a block may take on each SM: at one block an SM, every SM
// runs one. Skipped while the stream is captured, so a graph holds only the backend's kernels.
void poison_shared() {
  static const int2 shape = [] {
    int dev = 0, bytes = 0, sms = 0;
    TF_CUDA_CHECK(cudaGetDevice(&dev), "poison_shared: device");
    TF_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
                  "poison_shared: shared memory per block");
    TF_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev),
                  "poison_shared: multiprocessor count");
    TF_CUDA_CHECK(cudaFuncSetAttribute(poison_shared_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
                  "poison_shared: shared memory of ", bytes, " bytes");
    return make_int2(bytes, sms);
  }();
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  TF_CUDA_CHECK(cudaStreamIsCapturing(stream(), &status), "poison_shared: capture status");
  if (status != cudaStreamCaptureStatusNone) return;
  poison_shared_kernel<<<shape.y, 1024, static_cast<size_t>(shape.x), stream()>>>(shape.x / 4);
}

namespace {

void* device_zeroed(uint64_t bytes, const char* what) {
  void* p = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&p, std::max<uint64_t>(bytes, 1)), what, ": allocating ", bytes, " bytes");
  note_write();
  const cudaError_t e = cudaMemset(p, 0, std::max<uint64_t>(bytes, 1));
  if (e != cudaSuccess) {
    cudaFree(p);
    fail(what, ": cudaMemset of ", bytes, " bytes failed: ", cudaGetErrorString(e));
  }
  return p;
}

// The stored element type's own name, for messages (no link to the cpu backend's table).
const char* type_name(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::Q8_0: return "Q8_0";
    default: return "non-float";
  }
}

float half_bits_to_f32(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}

}  // namespace

void check_launch(const char* op) {
  const cudaError_t e = cudaGetLastError();
  TF_CHECK(e == cudaSuccess, op, ": kernel launch failed: ", cudaGetErrorString(e));
}

const CudaWeight& as_cuda(const Weight& w, const char* op) {
  auto* cw = dynamic_cast<const CudaWeight*>(&w);
  TF_CHECK(cw != nullptr, op, ": weight ", w.name, " was not loaded by the cuda backend");
  return *cw;
}

const CudaKv& as_cuda_kv(const KvStorage& kv, const char* op) {
  auto* c = dynamic_cast<const CudaKv*>(&kv);
  TF_CHECK(c != nullptr, op, ": KV storage was not made by the cuda backend");
  return *c;
}

CudaWeight::CudaWeight(ByteCounter counter) : counter_(std::move(counter)) {
  static std::atomic<uint64_t> next{1};
  id = next.fetch_add(1);
}

CudaWeight::~CudaWeight() {
  cudaFree(data);
  cudaFree(scales);
  cudaFree(f32);
  counter_->fetch_sub(bytes);
}

CudaKv::CudaKv(int layers_, int pages_, int page_size_, int kv_heads_, int head_dim_, bool bf16,
               ByteCounter counter)
    : counter_(std::move(counter)) {
  TF_CHECK(layers_ > 0 && pages_ > 0 && page_size_ > 0 && kv_heads_ > 0 && head_dim_ > 0,
           "alloc_kv: bad shape layers=", layers_, " pages=", pages_, " page_size=", page_size_,
           " kv_heads=", kv_heads_, " head_dim=", head_dim_);
  layers = layers_, pages = pages_, page_size = page_size_, kv_heads = kv_heads_,
  head_dim = head_dim_;
  value_bytes = bf16 ? 2 : 4;
  elems_ = static_cast<uint64_t>(layers) * pages * page_size * kv_heads * head_dim;
  TF_CHECK(elems_ <= static_cast<uint64_t>(kMaxTensorElems), "alloc_kv: ", elems_,
           " elements is too many");
  k_ = static_cast<uint8_t*>(device_zeroed(elems_ * value_bytes, "alloc_kv"));
  try {
    v_ = static_cast<uint8_t*>(device_zeroed(elems_ * value_bytes, "alloc_kv"));
  } catch (...) {
    cudaFree(k_);
    throw;
  }
  counter_->fetch_add(bytes());
}

CudaKv::~CudaKv() {
  cudaFree(k_);
  cudaFree(v_);
  counter_->fetch_sub(bytes());
}

CudaBackend::CudaBackend(int device)
    : device_(device) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  TF_CHECK(e == cudaSuccess, "cuda backend: no usable CUDA driver or device (",
           cudaGetErrorString(e), ")");
  TF_CHECK(device >= 0 && device < n, "cuda backend: device ", device, " asked for; ", n,
           " present");
  TF_CUDA_CHECK(cudaSetDevice(device), "cuda backend: device ", device);
  cudaDeviceProp prop{};
  TF_CUDA_CHECK(cudaGetDeviceProperties(&prop, device), "cuda backend: device ", device);
  TF_CHECK(prop.major >= 8, "cuda backend: device ", device, " (", prop.name, ") has compute ",
           prop.major, ".", prop.minor, "; bf16 tensor cores need 8.0 or newer");
  name_ = cat("cuda-", prop.name);
  graph_ = std::make_unique<GraphState>();
  const char* graphs = std::getenv("TF_CUDA_GRAPHS");
  graph_->on = graphs && std::string(graphs) == "1";
  const char* env = std::getenv("TF_CUDA_PROFILE");
  if (env && *env && std::string(env) != "0") set_profiling(true), profile_at_exit_ = true;
}

CudaBackend::~CudaBackend() {
  // TF_CUDA_PROFILE: whatever ran (a server's whole life) leaves its per-op table at exit.
  if (prof_ && profile_at_exit_) std::fprintf(stderr, "profile (TF_CUDA_PROFILE):\n%s", profile_take().c_str());
  graph_.reset();
  blocks_.release_all([](float* p) { cudaFree(p); });
  cudaFree(scratch_);
  cudaFreeHost(meta_host_);
  cudaFree(meta_dev_);
  cudaFree(partials_);
  cudaFree(counters_);
  for (Buffer& b : buffers_) cudaFree(b.p);
  for (auto& [w, t] : expert_ptrs_) cudaFree(t.table);
}

Tensor CudaBackend::alloc(int64_t rows, int64_t cols) {
  graph_refuse();
  const uint64_t bytes = BlockTable::tensor_bytes(rows, cols);
  if (bytes == 0) return Tensor{nullptr, rows, cols};
  float* p = static_cast<float*>(device_zeroed(bytes, "alloc"));
  blocks_.add(p, bytes);
  return Tensor{p, rows, cols};
}

void CudaBackend::free(Tensor& t) {
  if (t.data == nullptr) return;
  graph_refuse();
  blocks_.remove(t);
  cudaFree(t.data);
  t = Tensor{};
}

void CudaBackend::to_host(const Tensor& src, float* dst) {
  graph_refuse();
  const ProfScope prof(*this, "to_host", nullptr, src.rows);
  check_tensor(src, "to_host", "src");
  if (src.rows * src.cols == 0) return;
  TF_CHECK(dst != nullptr, "to_host: null destination");
  const WaitScope wait(*this);
  TF_CUDA_CHECK(cudaMemcpy(dst, src.data, static_cast<size_t>(src.rows * src.cols) * sizeof(float),
                           cudaMemcpyDeviceToHost),
                "to_host [", src.rows, " x ", src.cols, "]");
}

void CudaBackend::from_host(const float* src, Tensor dst) {
  const ProfScope prof(*this, "from_host", nullptr, dst.rows);
  check_tensor(dst, "from_host", "dst");
  if (dst.rows * dst.cols == 0) return;
  TF_CHECK(src != nullptr, "from_host: null source");
  upload_bytes(dst.data, src, static_cast<uint64_t>(dst.rows * dst.cols) * sizeof(float));
}

void CudaBackend::zero(Tensor dst) {
  const ProfScope prof(*this, "zero", nullptr, dst.rows);
  check_tensor(dst, "zero", "dst");
  const auto n = static_cast<uint64_t>(dst.rows * dst.cols) * sizeof(float);
  note_write();
  graph_refuse();
  if (n == 0) return;
  TF_CUDA_CHECK(cudaMemsetAsync(dst.data, 0, n, stream()), "zero of ", n, " bytes");
}

void CudaBackend::upload_bytes(void* dst, const void* src, uint64_t n) {
  note_write();
  graph_refuse();
  if (n == 0) return;
  const WaitScope wait(*this);
  TF_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice), "upload of ", n, " bytes");
}

const void* CudaBackend::meta(const void* src, uint64_t n) {
  if (graph_->mode != GraphState::Mode::Off) return graph_meta(src, n);
  const uint64_t len = (std::max<uint64_t>(n, 1) + 15) / 16 * 16;
  for (auto it = meta_recent_.rbegin(); it != meta_recent_.rend(); ++it)
    if (it->n == n && std::memcmp(meta_host_ + it->off, src, n) == 0) return meta_dev_ + it->off;
  if (meta_used_ + len > meta_cap_) {
    // The stream must have sent every earlier upload before their staging bytes are reused.
    const WaitScope wait(*this);
    TF_CUDA_CHECK(cudaStreamSynchronize(stream()), "metadata upload of ", n, " bytes");
    meta_used_ = 0;
    meta_recent_.clear();
    if (len > meta_cap_) {
      const uint64_t cap = std::max<uint64_t>(len * 4, 1 << 20);
      uint8_t* d = static_cast<uint8_t*>(device_zeroed(cap, "metadata ring"));
      uint8_t* h = nullptr;
      const cudaError_t e = cudaHostAlloc(reinterpret_cast<void**>(&h), cap, cudaHostAllocDefault);
      if (e != cudaSuccess) {
        cudaFree(d);
        fail("metadata ring: pinned allocation of ", cap, " bytes failed: ", cudaGetErrorString(e));
      }
      cudaFreeHost(meta_host_);
      cudaFree(meta_dev_);
      blocks_.counter()->fetch_sub(meta_cap_);
      blocks_.counter()->fetch_add(cap);
      meta_host_ = h, meta_dev_ = d, meta_cap_ = cap;
    }
  }
  const uint64_t off = meta_used_;
  meta_used_ += len;
  if (n > 0) {
    std::memcpy(meta_host_ + off, src, n);
    TF_CUDA_CHECK(
        cudaMemcpyAsync(meta_dev_ + off, meta_host_ + off, n, cudaMemcpyHostToDevice, stream()),
        "metadata upload of ", n, " bytes");
  }
  if (meta_recent_.size() >= 16) meta_recent_.erase(meta_recent_.begin());
  meta_recent_.push_back({off, n});
  return meta_dev_ + off;
}

float* CudaBackend::matmul_partials(uint64_t n) {
  if (n <= partials_n_) return partials_;
  graph_refuse();
  const uint64_t want = std::max<uint64_t>(n, partials_n_ * 2);
  float* p = static_cast<float*>(device_zeroed(want * 4, "matmul partials"));
  cudaFree(partials_);
  blocks_.counter()->fetch_sub(partials_n_ * 4);
  blocks_.counter()->fetch_add(want * 4);
  partials_ = p, partials_n_ = want;
  return partials_;
}

unsigned* CudaBackend::matmul_counters(uint64_t n) {
  if (n <= counters_n_) return counters_;
  graph_refuse();
  const uint64_t want = std::max<uint64_t>(n, std::max<uint64_t>(counters_n_ * 2, 4096));
  auto* p = static_cast<unsigned*>(device_zeroed(want * 4, "matmul counters"));
  cudaFree(counters_);
  blocks_.counter()->fetch_sub(counters_n_ * 4);
  blocks_.counter()->fetch_add(want * 4);
  counters_ = p, counters_n_ = want;
  return counters_;
}

uint8_t* CudaBackend::scratch(uint64_t n) {
  if (n <= scratch_bytes_) return scratch_;
  graph_refuse();
  const uint64_t want = std::max<uint64_t>(n, std::max<uint64_t>(scratch_bytes_ * 2, 1 << 16));
  uint8_t* p = static_cast<uint8_t*>(device_zeroed(want, "scratch"));
  if (scratch_) {
    cudaFree(scratch_);
    blocks_.counter()->fetch_sub(scratch_bytes_);
  }
  scratch_ = p;
  scratch_bytes_ = want;
  blocks_.counter()->fetch_add(want);
  return scratch_;
}

std::unique_ptr<Weight> CudaBackend::load_weight(const TensorView& view) {
  const DType t = view.dtype;
  TF_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0,
           "load_weight: tensor ", view.name, " has dtype ", type_name(t),
           "; the cuda backend takes F32, F16, BF16 or Q8_0");
  TF_CHECK(view.shape.size() == 1 || view.shape.size() == 2, "load_weight: tensor ", view.name,
           " has ", view.shape.size(), " dims; expected 1 or 2");
  for (int64_t d : view.shape)
    TF_CHECK(d > 0 && d <= kMaxTensorElems, "load_weight: tensor ", view.name, " has bad dim ", d);
  const int64_t rows = view.shape.size() == 2 ? view.shape[0] : 1;
  const int64_t cols = view.shape.back();
  TF_CHECK(t != DType::Q8_0 || cols % kQ8Block == 0, "load_weight: tensor ", view.name, " has ",
           cols, " columns, not a multiple of ", kQ8Block, " as Q8_0 needs");
  const uint64_t rb = t == DType::F32 ? cols * 4ull
                      : t == DType::Q8_0 ? cols / kQ8Block * kQ8BlockBytes
                                         : cols * 2ull;
  TF_CHECK(static_cast<uint64_t>(rows) <= UINT64_MAX / rb &&
               static_cast<uint64_t>(rows) * rb == view.nbytes,
           "load_weight: tensor ", view.name, " holds ", view.nbytes, " bytes; shape [", rows,
           " x ", cols, "] of ", type_name(t), " needs ", static_cast<uint64_t>(rows) * rb);
  TF_CHECK(view.data != nullptr, "load_weight: tensor ", view.name, " has no data");
  auto w = std::make_unique<CudaWeight>(blocks_.counter());
  w->dtype = t;
  w->rows = rows;
  w->cols = cols;
  w->name = view.name;
  const uint64_t n = static_cast<uint64_t>(rows) * cols;
  std::vector<float> dec;  // host f32 values of a 1-row weight
  if (t == DType::Q8_0) {
    // Repack blocks into planar int8 values and f32 scales so tiles load 16-byte aligned.
    std::vector<int8_t> q(n);
    std::vector<float> sc(n / kQ8Block);
    for (uint64_t b = 0; b < n / kQ8Block; ++b) {
      const uint8_t* blk = view.data + b * kQ8BlockBytes;
      uint16_t h;
      std::memcpy(&h, blk, 2);
      sc[b] = half_bits_to_f32(h);
      std::memcpy(q.data() + b * kQ8Block, blk + 2, kQ8Block);
    }
    w->data = device_zeroed(n, "load_weight");
    w->bytes += n;
    blocks_.counter()->fetch_add(n);
    w->scales = static_cast<float*>(device_zeroed(sc.size() * 4, "load_weight"));
    w->bytes += sc.size() * 4;
    blocks_.counter()->fetch_add(sc.size() * 4);
    upload_bytes(w->data, q.data(), n);
    upload_bytes(w->scales, sc.data(), sc.size() * 4);
    if (rows == 1)
      for (uint64_t i = 0; i < n; ++i) dec.push_back(sc[i / kQ8Block] * static_cast<float>(q[i]));
  } else {
    w->data = device_zeroed(view.nbytes, "load_weight");
    w->bytes += view.nbytes;
    blocks_.counter()->fetch_add(view.nbytes);
    upload_bytes(w->data, view.data, view.nbytes);
    if (rows == 1) {
      dec.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        uint16_t h = 0;
        if (t == DType::F32) std::memcpy(&dec[i], view.data + i * 4, 4);
        else std::memcpy(&h, view.data + i * 2, 2);
        if (t == DType::BF16) dec[i] = bf16_to_f32(h);
        if (t == DType::F16) dec[i] = half_bits_to_f32(h);
      }
    }
  }
  if (rows == 1) {
    w->f32 = static_cast<float*>(device_zeroed(n * 4, "load_weight"));
    w->bytes += n * 4;
    blocks_.counter()->fetch_add(n * 4);
    upload_bytes(w->f32, dec.data(), n * 4);
  }
  return w;
}

void CudaBackend::pin_host(void* p, uint64_t bytes) {
  if (p == nullptr || bytes == 0) return;
  // Pageable memory still works, only slower: a refusal (a locked-memory limit) is not an error.
  if (cudaHostRegister(p, bytes, cudaHostRegisterDefault) != cudaSuccess) cudaGetLastError();
}

void CudaBackend::unpin_host(void* p) {
  if (p != nullptr && cudaHostUnregister(p) != cudaSuccess) cudaGetLastError();
}

// Host layout as the cpu backend: per layer, the page's K rows then its V rows.
void CudaBackend::kv_page_to_host(const KvStorage& kvs, int page, void* dst) {
  graph_refuse();
  const CudaKv& kv = as_cuda_kv(kvs, "kv_page_to_host");
  TF_CHECK(page >= 0 && page < kv.pages && dst != nullptr, "kv_page_to_host: bad page ", page,
           " of ", kv.pages, " or null destination");
  const uint64_t n = static_cast<uint64_t>(kv.page_size) * kv.kv_heads * kv.head_dim * kv.value_bytes;
  auto* d = static_cast<uint8_t*>(dst);
  const WaitScope wait(*this);
  for (int l = 0; l < kv.layers; ++l, d += 2 * n) {
    TF_CUDA_CHECK(cudaMemcpy(d, static_cast<uint8_t*>(kv.k_layer(l)) + n * page, n, cudaMemcpyDeviceToHost),
                  "kv_page_to_host layer ", l);
    TF_CUDA_CHECK(cudaMemcpy(d + n, static_cast<uint8_t*>(kv.v_layer(l)) + n * page, n, cudaMemcpyDeviceToHost),
                  "kv_page_to_host layer ", l);
  }
}

void CudaBackend::kv_page_from_host(KvStorage& kvs, int page, const void* src) {
  graph_refuse();
  const CudaKv& kv = as_cuda_kv(kvs, "kv_page_from_host");
  TF_CHECK(page >= 0 && page < kv.pages && src != nullptr, "kv_page_from_host: bad page ", page,
           " of ", kv.pages, " or null source");
  const uint64_t n = static_cast<uint64_t>(kv.page_size) * kv.kv_heads * kv.head_dim * kv.value_bytes;
  const auto* s = static_cast<const uint8_t*>(src);
  for (int l = 0; l < kv.layers; ++l, s += 2 * n) {
    upload_bytes(static_cast<uint8_t*>(kv.k_layer(l)) + n * page, s, n);
    upload_bytes(static_cast<uint8_t*>(kv.v_layer(l)) + n * page, s + n, n);
  }
}

std::unique_ptr<KvStorage> CudaBackend::alloc_kv(int layers, int pages, int page_size,
                                                 int kv_heads, int head_dim) {
  return std::make_unique<CudaKv>(layers, pages, page_size, kv_heads, head_dim,
                                  matmul_input() == MatmulInput::BF16, blocks_.counter());
}

}  // namespace tf::cuda

namespace tf {

std::unique_ptr<Backend> make_cuda_backend(int device) {
  return std::make_unique<cuda::CudaBackend>(device);
}

int cuda_device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

uint64_t cuda::CudaBackend::device_memory_total() const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return static_cast<uint64_t>(total_b);
}

uint64_t cuda::CudaBackend::device_memory_free() const {
  size_t free_b = 0, total_b = 0;
  if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) return 0;
  return static_cast<uint64_t>(free_b);
}

}  // namespace tf
