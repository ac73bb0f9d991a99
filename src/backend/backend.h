#pragma once
// The interface every compute backend (cpu, cuda) implements. Models call only this.
//
// Exactness contract: every op computes each output row from that row's own inputs with
// one fixed reduction order, so a row's result never depends on how many rows share the
// call or where a prompt's chunks ended.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"

namespace tf {

// Row-major f32 activations [rows x cols] in backend memory (host for cpu, device for cuda).
struct Tensor {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;

  float* row(int64_t r) const { return data + r * cols; }
  // The same memory seen as [rows * cols / new_cols x new_cols].
  Tensor reshape(int64_t new_cols) const { return Tensor{data, rows * cols / new_cols, new_cols}; }
  // Rows [begin, begin + n).
  Tensor slice_rows(int64_t begin, int64_t n) const { return Tensor{data + begin * cols, n, cols}; }
};

// A weight prepared by the backend: [rows x cols] (out x in for matrices, 1 x n for vectors).
class Weight {
 public:
  virtual ~Weight() = default;
  DType dtype = DType::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  std::string name;
};

// Paged KV storage of one model: per layer, pages of page_size positions x kv_heads x head_dim.
class KvStorage {
 public:
  virtual ~KvStorage() = default;
  int layers = 0, pages = 0, page_size = 0, kv_heads = 0, head_dim = 0;
  virtual uint64_t bytes() const = 0;
};

// Which sequence and position each row of a round is, and each sequence's pages in order.
struct RowLayout {
  std::vector<int32_t> pos;                     // absolute position of each row
  std::vector<int32_t> seq;                     // index into seq_pages for each row
  std::vector<std::vector<int32_t>> seq_pages;  // page ids of each sequence, position order
  int rows() const { return static_cast<int>(pos.size()); }
};

struct RopeParams {
  int head_dim = 0;
  int rot_dim = 0;               // rotated leading dims of each head (partial rotary)
  bool neox = true;              // true: pairs (i, i + rot/2); false: pairs (2i, 2i + 1)
  std::vector<float> inv_freq;   // rot_dim / 2 frequencies, scaling already applied
  float mscale = 1.0f;           // multiplies cos and sin (YaRN attention factor)
};

struct AttnParams {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  float scale = 0.0f;
  int sliding_window = 0;  // 0: full causal; else attend to the last sliding_window positions
  float softcap = 0.0f;    // 0: none; else scores = softcap * tanh(scores / softcap)
};

enum class Act { SiLU, GeluTanh, Relu2 };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int threads() const { return 1; }

  // Memory. alloc returns zero-filled f32 storage owned by the backend.
  virtual Tensor alloc(int64_t rows, int64_t cols) = 0;
  virtual void free(Tensor& t) = 0;
  virtual void to_host(const Tensor& src, float* dst) = 0;
  virtual void from_host(const float* src, Tensor dst) = 0;
  virtual std::unique_ptr<Weight> load_weight(const TensorView& view) = 0;
  virtual std::unique_ptr<KvStorage> alloc_kv(int layers, int pages, int page_size, int kv_heads,
                                              int head_dim) = 0;
  virtual uint64_t device_bytes_in_use() const { return 0; }
  // Memory of the device this backend computes on; 0 when it computes in host memory.
  virtual uint64_t device_memory_total() const { return 0; }
  // One page of every layer's K and V, as kv_page_floats() floats in host memory (prompt cache tier).
  static uint64_t kv_page_floats(const KvStorage& kv) {
    return 2ull * kv.layers * kv.page_size * kv.kv_heads * kv.head_dim;
  }
  virtual void kv_page_to_host(const KvStorage& kv, int page, float* dst) = 0;
  virtual void kv_page_from_host(KvStorage& kv, int page, const float* src) = 0;
  // Copies one page's K and V in every layer (siblings that share a prompt's last partial page).
  virtual void kv_page_copy(KvStorage& kv, int src, int dst) {
    std::vector<float> buf(kv_page_floats(kv));
    kv_page_to_host(kv, src, buf.data());
    kv_page_from_host(kv, dst, buf.data());
  }

  // out[i] = table[ids[i]]
  virtual void embed(const Weight& table, const int32_t* ids, int n, Tensor out) = 0;
  // y = x * w^T (+ bias): x [m x K], w [N x K], y [m x N]
  virtual void matmul(const Tensor& x, const Weight& w, const Weight* bias, Tensor y) = 0;
  // y = x / rms(x) * (g + add_one): per row of x
  virtual void rmsnorm(const Tensor& x, const Weight& g, float eps, bool add_one, Tensor y) = 0;
  // In place on x [m x n_heads*head_dim], row r at position pos[r].
  virtual void rope(Tensor x, int n_heads, const int32_t* pos, const RopeParams& p) = 0;
  // out = act(gate) * up
  virtual void act_mul(Act act, const Tensor& gate, const Tensor& up, Tensor out) = 0;
  // y += x
  virtual void add(Tensor y, const Tensor& x) = 0;
  // x *= s
  virtual void scale(Tensor x, float s) = 0;
  // Stores rows of k and v [m x kv_heads*head_dim] into the pages of their positions.
  virtual void kv_store(KvStorage& kv, int layer, const Tensor& k, const Tensor& v,
                        const RowLayout& rows) = 0;
  // Causal attention of each row of q [m x n_heads*head_dim] over its sequence's stored
  // keys at positions [0, pos] (or the sliding window), out [m x n_heads*head_dim].
  virtual void attention(const Tensor& q, Tensor out, const KvStorage& kv, int layer,
                         const RowLayout& rows, const AttnParams& p) = 0;
  // Router: softmax over each row's logits then the k largest (ties: lower index), weights
  // renormalized to sum 1 when norm. Results in host memory [m x k], ranked by weight.
  virtual void topk_softmax(const Tensor& logits, int k, bool norm, int32_t* idx_out,
                            float* w_out) = 0;
  // dst[i] = src[rows[i]]
  virtual void gather_rows(const Tensor& src, const int32_t* rows, int n, Tensor dst) = 0;
  // dst[rows[i]] += w[i] * src[i], applied in i order
  virtual void scatter_add_scaled(Tensor dst, const Tensor& src, const int32_t* rows,
                                  const float* w, int n) = 0;
};

std::unique_ptr<Backend> make_cpu_backend(int n_threads);

// device: "cpu"; "cuda" or "cuda:N" (builds with TF_CUDA only); "auto" = cuda:0 when a GPU is
// present, else cpu. threads is the cpu backend's thread count (0: all cores).
std::unique_ptr<Backend> make_backend(const std::string& device, int threads);

}  // namespace tf
