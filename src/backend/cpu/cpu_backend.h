#pragma once
// The CPU backend: host memory, memory-mapped weights, paged f32 KV, static thread splits.
#include <memory>

#include "backend/backend.h"
#include "backend/block_table.h"
#include "backend/cpu/cpu_kernels.h"
#include "base/thread_pool.h"

namespace tf::cpu {

// A weight used in place from its (memory-mapped) storage.
class CpuWeight : public Weight {
 public:
  WeightRows rows_view() const { return WeightRows{data, dtype, cols, row_bytes}; }
  const uint8_t* data = nullptr;
  uint64_t row_bytes = 0;
};


// K and V of every layer and page. Made in bf16 mode (--matmul-input bf16), values are stored as
// bf16, rounded as attention's products take them there: the same bits at half the bytes.
class CpuKv : public KvStorage {
 public:
  CpuKv(int layers, int pages, int page_size, int kv_heads, int head_dim, bool bf16, ByteCounter counter);
  ~CpuKv() override;
  uint64_t bytes() const override { return 2 * elems_ * static_cast<uint64_t>(value_bytes); }
  bool bf16() const { return value_bytes == 2; }
  // The bytes of K (v false) or V from row (layer, page, slot) on: floats or bf16 bits.
  uint8_t* bytes_at(int layer, int page, int slot, bool v) const {
    return static_cast<uint8_t*>(v ? v_ : k_) + offset(layer, page, slot) * static_cast<uint64_t>(value_bytes);
  }
  // Start of the (layer, page, slot) row of kv_heads * head_dim floats (f32 storage).
  float* k_at(int layer, int page, int slot) const { return reinterpret_cast<float*>(bytes_at(layer, page, slot, false)); }
  float* v_at(int layer, int page, int slot) const { return reinterpret_cast<float*>(bytes_at(layer, page, slot, true)); }
  // n values from column col of row (layer, page, slot) of K (v false) or V, as floats.
  void read_row(int layer, int page, int slot, bool v, int64_t col, int64_t n, float* out) const;
  // Stores row (layer, page, slot) of K or V from its floats, rounded when bf16.
  void write_row(int layer, int page, int slot, bool v, const float* in) const;

 private:
  uint64_t offset(int layer, int page, int slot) const {
    return ((static_cast<uint64_t>(layer) * pages + page) * page_size + slot) *
           static_cast<uint64_t>(kv_heads) * head_dim;
  }
  uint64_t elems_ = 0;
  void* k_ = nullptr;
  void* v_ = nullptr;
  ByteCounter counter_;
};

class CpuBackend : public Backend {
 public:
  CpuBackend(int n_threads, const CpuKernels& kernels);
  ~CpuBackend() override;

  std::string name() const override { return std::string("cpu-") + kernels_.name; }
  int threads() const override { return pool_.size(); }

  Tensor alloc(int64_t rows, int64_t cols) override;
  void free(Tensor& t) override;
  void to_host(const Tensor& src, float* dst) override;
  void sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs, const std::vector<PenaltyToken>& pens,
                   int32_t* ids) override;
  void from_host(const float* src, Tensor dst) override;
  void zero(Tensor dst) override;
  std::unique_ptr<Weight> load_weight(const TensorView& view) override;
  void kv_page_to_host(const KvStorage& kv, int page, void* dst) override;
  void kv_page_from_host(KvStorage& kv, int page, const void* src) override;
  std::unique_ptr<KvStorage> alloc_kv(int layers, int pages, int page_size, int kv_heads,
                                      int head_dim) override;
  uint64_t device_bytes_in_use() const override { return blocks_.bytes_in_use(); }

  void embed(const Weight& table, const int32_t* ids, int n, Tensor out) override;
  void matmul(const Tensor& x, const Weight& w, const Weight* bias, Tensor y) override;
  void rmsnorm(const Tensor& x, const Weight& g, float eps, bool add_one, Tensor y) override;
  void rope(Tensor x, int n_heads, const int32_t* pos, const RopeParams& p) override;
  void act_mul(Act act, const Tensor& gate, const Tensor& up, Tensor out) override;
  void add(Tensor y, const Tensor& x) override;
  void scale(Tensor x, float s) override;
  void kv_store(KvStorage& kv, int layer, const Tensor& k, const Tensor& v,
                const RowLayout& rows) override;
  void attention(const Tensor& q, Tensor out, const KvStorage& kv, int layer,
                 const RowLayout& rows, const AttnParams& p) override;
  void topk_softmax(const Tensor& logits, int k, bool norm, int32_t* idx_out,
                    float* w_out) override;
  void topk_sigmoid_grouped(const Tensor& logits, const Weight* bias, int n_group, int topk_group, int k,
                            bool norm, float scale, int32_t* idx_out, float* w_out) override;
  void activate(Act act, const Tensor& x, Tensor out) override;
  void mul_sigmoid(Tensor y, Cols gate) override;
  void gated_rmsnorm(const Tensor& x, Cols z, const Weight& g, int group, float eps, bool norm_first,
                     Tensor y) override;
  void conv1d_causal(const Tensor& x, const Weight& w, const Weight* bias, bool silu, const RowLayout& rows,
                     const StateRefs& st, int64_t off, Tensor out) override;
  void ssm_scan(Cols x, Cols B, Cols C, Cols dt_raw, const Weight& A_log, const Weight& D, const Weight& dt_bias,
                const SsmParams& p, const RowLayout& rows, const StateRefs& st, int64_t off, Tensor y) override;
  void gated_delta(Cols q, Cols k, Cols v, Cols a, Cols b, const Weight& A_log, const Weight& dt_bias,
                   const DeltaParams& p, const RowLayout& rows, const StateRefs& st, int64_t off,
                   Tensor y) override;
  void copy(const Tensor& src, Tensor dst) override;
  void gather_rows(const Tensor& src, const int32_t* rows, int n, Tensor dst) override;
  void scatter_add_scaled(Tensor dst, const Tensor& src, const int32_t* rows, const float* w,
                          int n) override;

 private:
  // Runs fn(begin, end) over [0, n) in static ranges; serial when the work is small.
  void for_rows(int64_t n, int64_t work, const std::function<void(int64_t, int64_t)>& fn);

  const CpuKernels& kernels_;
  ThreadPool pool_;
  BlockTable blocks_;
};

// For tests and benchmarks: a backend on one given kernel table.
std::unique_ptr<Backend> make_cpu_backend_with(int n_threads, const CpuKernels& kernels);

// Throws unless w is a weight this backend made; names the op.
const CpuWeight& as_cpu(const Weight& w, const char* op);


}  // namespace tf::cpu
