#include "backend/cpu/cpu_backend.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "base/error.h"

namespace tf::cpu {

namespace {


float* alloc_zeroed(uint64_t bytes, const char* what) {
  uint64_t padded = (std::max<uint64_t>(bytes, 1) + 63) & ~uint64_t{63};
  void* p = std::aligned_alloc(64, padded);
  TF_CHECK(p != nullptr, what, ": out of memory allocating ", padded, " bytes");
  std::memset(p, 0, padded);
  return static_cast<float*>(p);
}

float* map_zeroed(uint64_t bytes) {
  void* p = ::mmap(nullptr, std::max<uint64_t>(bytes, 1), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<float*>(p);
}

void unmap(void* p, uint64_t bytes) {
  if (p) ::munmap(p, std::max<uint64_t>(bytes, 1));
}

}  // namespace

const CpuWeight& as_cpu(const Weight& w, const char* op) {
  auto* cw = dynamic_cast<const CpuWeight*>(&w);
  TF_CHECK(cw != nullptr, op, ": weight ", w.name, " was not loaded by the cpu backend");
  return *cw;
}

CpuKv::CpuKv(int layers_, int pages_, int page_size_, int kv_heads_, int head_dim_, bool bf16,
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
  // Anonymous zero pages: the pool's memory is committed as pages are first written, which is
  // what the memory planner counts (each lane's pages on its first prompt, cache pages as kept).
  k_ = map_zeroed(elems_ * static_cast<uint64_t>(value_bytes));
  v_ = map_zeroed(elems_ * static_cast<uint64_t>(value_bytes));
  if (!k_ || !v_) {
    unmap(k_, elems_ * static_cast<uint64_t>(value_bytes));
    unmap(v_, elems_ * static_cast<uint64_t>(value_bytes));
    fail("alloc_kv: out of memory reserving ", bytes(), " bytes");
  }
  counter_->fetch_add(bytes());
}

CpuKv::~CpuKv() {
  unmap(k_, elems_ * static_cast<uint64_t>(value_bytes));
  unmap(v_, elems_ * static_cast<uint64_t>(value_bytes));
  counter_->fetch_sub(bytes());
}

void CpuKv::read_row(int layer, int page, int slot, bool v, int64_t col, int64_t n, float* out) const {
  const uint8_t* row = bytes_at(layer, page, slot, v) + col * value_bytes;
  if (!bf16()) {
    std::memcpy(out, row, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  const auto* src = reinterpret_cast<const uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(src[i]);
}

void CpuKv::write_row(int layer, int page, int slot, bool v, const float* in) const {
  const int64_t n = static_cast<int64_t>(kv_heads) * head_dim;
  uint8_t* row = bytes_at(layer, page, slot, v);
  if (!bf16()) {
    std::memcpy(row, in, static_cast<size_t>(n) * sizeof(float));
    return;
  }
  auto* dst = reinterpret_cast<uint16_t*>(row);
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_bf16(in[i]);
}

CpuBackend::CpuBackend(int n_threads, const CpuKernels& kernels)
    : kernels_(kernels),
      pool_(n_threads > 0 ? n_threads : default_thread_count()),
      blocks_() {}

CpuBackend::~CpuBackend() {
  blocks_.release_all([](float* p) { std::free(p); });
}

Tensor CpuBackend::alloc(int64_t rows, int64_t cols) {
  const uint64_t bytes = BlockTable::tensor_bytes(rows, cols);
  if (bytes == 0) return Tensor{nullptr, rows, cols};
  float* p = alloc_zeroed(bytes, "alloc");
  blocks_.add(p, bytes);
  return Tensor{p, rows, cols};
}

void CpuBackend::free(Tensor& t) {
  if (t.data == nullptr) return;
  blocks_.remove(t);
  std::free(t.data);
  t = Tensor{};
}

void CpuBackend::to_host(const Tensor& src, float* dst) {
  check_tensor(src, "to_host", "src");
  if (src.rows * src.cols == 0) return;
  TF_CHECK(dst != nullptr, "to_host: null destination");
  std::memcpy(dst, src.data, static_cast<size_t>(src.rows * src.cols) * sizeof(float));
}

void CpuBackend::sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                             const std::vector<PenaltyToken>& pens, int32_t* ids) {
  check_tensor(logits, "sample_rows", "logits");
  check_samples(logits, specs, pens);
  // Rows are independent: each spec's draw on its own thread.
  pool_.run_tasks(static_cast<int64_t>(specs.size()), [&](int64_t j) {
    const SampleSpec& s = specs[static_cast<size_t>(j)];
    ids[j] = sample_row(logits.row(s.row), static_cast<int32_t>(logits.cols), s, pens.data() + s.pen_begin);
  });
}

void CpuBackend::from_host(const float* src, Tensor dst) {
  check_tensor(dst, "from_host", "dst");
  if (dst.rows * dst.cols == 0) return;
  TF_CHECK(src != nullptr, "from_host: null source");
  std::memcpy(dst.data, src, static_cast<size_t>(dst.rows * dst.cols) * sizeof(float));
}

void CpuBackend::zero(Tensor dst) {
  check_tensor(dst, "zero", "dst");
  if (dst.rows * dst.cols == 0) return;
  std::memset(dst.data, 0, static_cast<size_t>(dst.rows * dst.cols) * sizeof(float));
}

std::unique_ptr<Weight> CpuBackend::load_weight(const TensorView& view) {
  const DType t = view.dtype;
  TF_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0,
           "load_weight: tensor ", view.name, " has dtype ", dtype_name(t),
           "; the cpu backend takes F32, F16, BF16 or Q8_0");
  TF_CHECK(view.shape.size() == 1 || view.shape.size() == 2, "load_weight: tensor ", view.name,
           " has ", view.shape.size(), " dims; expected 1 or 2");
  for (int64_t d : view.shape)
    TF_CHECK(d > 0 && d <= kMaxTensorElems, "load_weight: tensor ", view.name, " has bad dim ", d);
  const int64_t rows = view.shape.size() == 2 ? view.shape[0] : 1;
  const int64_t cols = view.shape.back();
  const uint64_t rb = dtype_row_bytes(t, static_cast<uint64_t>(cols));
  TF_CHECK(rb != 0, "load_weight: tensor ", view.name, " has ", cols, " columns, not a multiple of ",
           kQ8Block, " as ", dtype_name(t), " needs");
  TF_CHECK(static_cast<uint64_t>(rows) <= UINT64_MAX / rb &&
               static_cast<uint64_t>(rows) * rb == view.nbytes,
           "load_weight: tensor ", view.name, " holds ", view.nbytes, " bytes; shape [", rows,
           " x ", cols, "] of ", dtype_name(t), " needs ", static_cast<uint64_t>(rows) * rb);
  TF_CHECK(view.data != nullptr, "load_weight: tensor ", view.name, " has no data");
  auto w = std::make_unique<CpuWeight>();
  w->dtype = t;
  w->rows = rows;
  w->cols = cols;
  w->name = view.name;
  w->data = view.data;
  w->row_bytes = rb;
  return w;
}

void CpuBackend::kv_page_to_host(const KvStorage& kv, int page, void* dst) {
  auto* c = dynamic_cast<const CpuKv*>(&kv);
  TF_CHECK(c && page >= 0 && page < kv.pages && dst, "kv_page_to_host: bad storage or page ", page);
  const size_t n = static_cast<size_t>(kv.page_size) * kv.kv_heads * kv.head_dim * kv.value_bytes;
  auto* d = static_cast<uint8_t*>(dst);
  for (int l = 0; l < kv.layers; ++l, d += 2 * n) {
    std::memcpy(d, c->bytes_at(l, page, 0, false), n);
    std::memcpy(d + n, c->bytes_at(l, page, 0, true), n);
  }
}

void CpuBackend::kv_page_from_host(KvStorage& kv, int page, const void* src) {
  auto* c = dynamic_cast<CpuKv*>(&kv);
  TF_CHECK(c && page >= 0 && page < kv.pages && src, "kv_page_from_host: bad storage or page ", page);
  const size_t n = static_cast<size_t>(kv.page_size) * kv.kv_heads * kv.head_dim * kv.value_bytes;
  const auto* s = static_cast<const uint8_t*>(src);
  for (int l = 0; l < kv.layers; ++l, s += 2 * n) {
    std::memcpy(c->bytes_at(l, page, 0, false), s, n);
    std::memcpy(c->bytes_at(l, page, 0, true), s + n, n);
  }
}

std::unique_ptr<KvStorage> CpuBackend::alloc_kv(int layers, int pages, int page_size,
                                                int kv_heads, int head_dim) {
  return std::make_unique<CpuKv>(layers, pages, page_size, kv_heads, head_dim,
                                 matmul_input() == MatmulInput::BF16, blocks_.counter());
}

void CpuBackend::for_rows(int64_t n, int64_t work,
                          const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (pool_.size() == 1 || work < (int64_t{1} << 15) || n == 1) {
    fn(0, n);
    return;
  }
  pool_.parallel_for(n, [&](int, int64_t b, int64_t e) { fn(b, e); });
}

void CpuBackend::embed(const Weight& table, const int32_t* ids, int n, Tensor out) {
  const CpuWeight& t = as_cpu(table, "embed");
  check_tensor(out, "embed", "out");
  TF_CHECK(n >= 0 && out.rows == n && out.cols == t.cols, "embed: ", t.name, " [", t.rows, " x ",
           t.cols, "] with ", n, " ids into out [", out.rows, " x ", out.cols, "]");
  TF_CHECK(n == 0 || ids != nullptr, "embed: null ids");
  for (int i = 0; i < n; ++i)
    TF_CHECK(ids[i] >= 0 && ids[i] < t.rows, "embed: id ", ids[i], " at ", i,
             " is outside table ", t.name, " of ", t.rows, " rows");
  const WeightRows w = t.rows_view();
  for_rows(n, n * t.cols, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) decode_row(w, ids[i], 0, t.cols, out.row(i));
  });
}

void CpuBackend::matmul(const Tensor& x, const Weight& wt, const Weight* bias, Tensor y) {
  const CpuWeight& w = as_cpu(wt, "matmul");
  check_tensor(x, "matmul", "x");
  check_tensor(y, "matmul", "y");
  TF_CHECK(x.cols == w.cols && y.rows == x.rows && y.cols == w.rows, "matmul: x [", x.rows, " x ",
           x.cols, "] times ", w.name, " [", w.rows, " x ", w.cols, "]^T into y [", y.rows, " x ",
           y.cols, "]");
  std::vector<float> bias_f32;
  if (bias) {
    const CpuWeight& b = as_cpu(*bias, "matmul");
    TF_CHECK(b.rows == 1 && b.cols == w.rows, "matmul: bias ", b.name, " [", b.rows, " x ", b.cols,
             "] does not match ", w.name, " with ", w.rows, " outputs");
    bias_f32.resize(static_cast<size_t>(b.cols));
    decode_row(b.rows_view(), 0, 0, b.cols, bias_f32.data());
  }
  const int64_t m = x.rows, N = w.rows;
  if (m == 0 || N == 0) return;
  MatmulBlock blk{x.data, x.cols, nullptr, 0, w.rows_view(), bias ? bias_f32.data() : nullptr,
                  y.data, y.cols};
  // --matmul-input bf16: x rounded to bf16 as the GPU's tensor cores take it, element by element.
  std::vector<float> xr;
  if (matmul_input() == MatmulInput::BF16 && (w.dtype == DType::BF16 || w.dtype == DType::F16)) {
    xr.resize(static_cast<size_t>(m * x.cols));
    for_rows(m, m * x.cols, [&](int64_t b, int64_t e) {
      for (int64_t i = b * x.cols; i < e * x.cols; ++i) xr[i] = round_to_bf16(x.data[i]);
    });
    blk.x = xr.data();
  }
  // Q8_0: each activation row is quantized once, from that row alone, before any tile runs.
  std::vector<uint8_t> xq;
  if (w.dtype == DType::Q8_0) {
    blk.ldxq = x.cols / kQ8Block * kQ8ActBlockBytes;
    xq.resize(static_cast<size_t>(m * blk.ldxq));
    const auto quant = kernels_.quantize_q8;
    for_rows(m, m * x.cols * 4, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) quant(x.row(r), x.cols, xq.data() + r * blk.ldxq);
    });
    blk.xq = xq.data();
  }
  const auto fn = kernels_.matmul;
  const int T = pool_.size();
  if (T == 1 || m * N * w.cols < (int64_t{1} << 16)) {
    fn(blk, 0, m, 0, N);
    return;
  }
  // Split outputs only (columns, then rows); K is never split, so any split gives the same bits.
  const int64_t cb = m < kPackMinRows ? std::max<int64_t>(12, (N / (T * 4) + 11) / 12 * 12) : 96;
  const int64_t n_cblocks = (N + cb - 1) / cb;
  const int64_t rb = n_cblocks >= 2 * T ? m : std::max<int64_t>(kPackMinRows, 64);
  const int64_t n_rblocks = (m + rb - 1) / rb;
  pool_.run_tasks(n_cblocks * n_rblocks, [&](int64_t task) {
    const int64_t c = task % n_cblocks, r = task / n_cblocks;
    fn(blk, r * rb, std::min(m, (r + 1) * rb), c * cb, std::min(N, (c + 1) * cb));
  });
}

void CpuBackend::add(Tensor y, const Tensor& x) {
  check_tensor(y, "add", "y");
  check_tensor(x, "add", "x");
  TF_CHECK(y.rows == x.rows && y.cols == x.cols, "add: y [", y.rows, " x ", y.cols, "] += x [",
           x.rows, " x ", x.cols, "]");
  const int64_t n = y.rows * y.cols;
  for_rows(y.rows, n, [&](int64_t b, int64_t e) {
    for (int64_t i = b * y.cols; i < e * y.cols; ++i) y.data[i] += x.data[i];
  });
}

void CpuBackend::scale(Tensor x, float s) {
  check_tensor(x, "scale", "x");
  for_rows(x.rows, x.rows * x.cols, [&](int64_t b, int64_t e) {
    for (int64_t i = b * x.cols; i < e * x.cols; ++i) x.data[i] *= s;
  });
}

void CpuBackend::copy(const Tensor& src, Tensor dst) {
  check_copy(src, dst);
  std::memmove(dst.data, src.data, static_cast<size_t>(src.rows * src.cols) * sizeof(float));
}

void CpuBackend::gather_rows(const Tensor& src, const int32_t* rows, int n, Tensor dst) {
  check_gather(src, rows, n, dst);
  for (int i = 0; i < n; ++i)
    std::memmove(dst.row(i), src.row(rows[i]), static_cast<size_t>(src.cols) * sizeof(float));
}

void CpuBackend::scatter_add_scaled(Tensor dst, const Tensor& src, const int32_t* rows,
                                    const float* w, int n) {
  check_scatter(dst, src, rows, w, n);
  // Columns are independent, so splitting them keeps each element's i order.
  const int64_t C = dst.cols;
  for_rows(C, n * C, [&](int64_t b, int64_t e) {
    for (int i = 0; i < n; ++i) {
      float* d = dst.row(rows[i]);
      const float* s = src.row(i);
      for (int64_t c = b; c < e; ++c) d[c] += w[i] * s[c];
    }
  });
}

std::unique_ptr<Backend> make_cpu_backend_with(int n_threads, const CpuKernels& kernels) {
  return std::make_unique<CpuBackend>(n_threads, kernels);
}

}  // namespace tf::cpu

namespace tf {

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  return cpu::make_cpu_backend_with(n_threads, cpu::best_kernels());
}

}  // namespace tf
