#pragma once
// The CUDA backend: device memory for tensors, weights and paged f32 KV; one stream, in order.
// This header has no CUDA includes so plain C++ tests may use the classes.
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/block_table.h"

namespace tf::cuda {

struct OpProfile;
struct GraphState;

// A weight in device memory, kept in its stored type. Q8_0 is repacked on upload into
// int8 values [rows x cols] plus one f32 scale per block of 32 ([rows x cols / 32]).
class CudaWeight : public Weight {
 public:
  CudaWeight(ByteCounter counter);
  ~CudaWeight() override;
  uint64_t id = 0;           // unique per weight made, never reused (unlike addresses)
  void* data = nullptr;      // F32/F16/BF16: rows x cols of that type; Q8_0: int8 values
  float* scales = nullptr;   // Q8_0 only: f32 scale of each block of 32
  float* f32 = nullptr;      // 1-row weights only: the values decoded to f32
  uint64_t bytes = 0;

 private:
  ByteCounter counter_;
};

// Paged KV storage: per layer, K and V as [pages][page_size][kv_heads * head_dim] values, f32 or,
// made in bf16 mode, bf16 (value_bytes 2: the values rounded as attention's products take them).
class CudaKv : public KvStorage {
 public:
  CudaKv(int layers, int pages, int page_size, int kv_heads, int head_dim, bool bf16, ByteCounter counter);
  ~CudaKv() override;
  uint64_t bytes() const override { return 2 * elems_ * static_cast<uint64_t>(value_bytes); }
  bool bf16() const { return value_bytes == 2; }
  uint64_t layer_elems() const { return elems_ / static_cast<uint64_t>(layers); }
  void* k_layer(int layer) const { return k_ + layer_elems() * static_cast<uint64_t>(layer) * value_bytes; }
  void* v_layer(int layer) const { return v_ + layer_elems() * static_cast<uint64_t>(layer) * value_bytes; }

 private:
  uint64_t elems_ = 0;
  uint8_t* k_ = nullptr;
  uint8_t* v_ = nullptr;
  ByteCounter counter_;
};

// One expert's weight as the grouped matmul reads it.
struct ExpertPtr {
  const void* data = nullptr;
  const float* scales = nullptr;  // Q8_0 only
};

// The rows of a grouped (MoE) matmul, all in device memory: work item i is (expert, start, count)
// at items[3 i], count <= 16 rows: y row order[start + r] = x row order[start + r] / x_div times
// that expert's weight. Items past *n_items do nothing.
struct GroupedRows {
  const int32_t* items = nullptr;
  const int32_t* n_items = nullptr;
  const int32_t* order = nullptr;
  const ExpertPtr* w = nullptr;
  int max_items = 0;
  int rows_max = 16;  // most rows an item holds; a row picks an expert once, so at most m
  int64_t pairs = 0;  // rows of y
  int x_div = 1;
  // A second weight table run in the same launch (items max_items.. of the grid), into y2.
  const ExpertPtr* w2 = nullptr;
  float* y2 = nullptr;
  // act >= 0: x is act(x) * x2 (x2 set) or act(x), as act_mul / activate compute it.
  int act = -1;
  const float* x2 = nullptr;
  // The items were written before the kernel this launch waits on, so a block's first weight
  // loads go out before that wait.
  bool items_early = false;
};

// act_value's code of an activation (cuda_util.cuh): 0 SiLU, 1 GELU (tanh), 2 squared ReLU;
// TF_CUDA_SILU=exact gives SiLU's expf and IEEE division form (3), to time the rule against.
inline int act_code(Act act) {
  static const bool exact = [] {
    const char* e = std::getenv("TF_CUDA_SILU");
    return e && std::string(e) == "exact";
  }();
  if (act == Act::SiLU) return exact ? 3 : 0;
  return act == Act::GeluTanh ? 1 : 2;
}

// The owners of CudaBackend::buffer's slots: the MoE layer's eight, matmul's split x, sampling's
// ids, weights and penalized rows, rope's cos/sin table, the in-place conv's halo, the SSD scan's C.B,
// the gated delta's prepared chunks.
enum BufferSlot : int {
  kSlotMoe = 0,
  kSlotMoeCount = 8,
  kSlotSplitX = kSlotMoe + kSlotMoeCount,
  kSlotSample,
  kSlotSampleWeights,
  kSlotSamplePenalized,
  kSlotRope,
  kSlotConvHalo,
  kSlotSsm,
  kSlotDelta
};

class CudaBackend : public Backend {
 public:
  explicit CudaBackend(int device);
  ~CudaBackend() override;

  std::string name() const override { return name_; }

  Tensor alloc(int64_t rows, int64_t cols) override;
  void free(Tensor& t) override;
  void to_host(const Tensor& src, float* dst) override;
  void from_host(const float* src, Tensor dst) override;
  void zero(Tensor dst) override;
  void sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs, const std::vector<PenaltyToken>& pens,
                   int32_t* ids) override;
  std::unique_ptr<Weight> load_weight(const TensorView& view) override;
  std::unique_ptr<KvStorage> alloc_kv(int layers, int pages, int page_size, int kv_heads,
                                      int head_dim) override;
  uint64_t device_bytes_in_use() const override { return blocks_.bytes_in_use(); }
  uint64_t device_memory_total() const override;
  uint64_t device_memory_free() const override;
  uint64_t round_growth_bound() const override;
  double device_wait_seconds() const override { return static_cast<double>(wait_ns_.load()) * 1e-9; }
  void pin_host(void* p, uint64_t bytes) override;
  void unpin_host(void* p) override;
  void kv_page_to_host(const KvStorage& kv, int page, void* dst) override;
  void kv_page_from_host(KvStorage& kv, int page, const void* src) override;

  void embed(const Weight& table, const int32_t* ids, int n, Tensor out) override;
  void matmul(const Tensor& x, const Weight& w, const Weight* bias, Tensor y) override;
  void matmul_many(const Tensor& x, const std::vector<MatmulOut>& outs) override;
  void rmsnorm(const Tensor& x, const Weight& g, float eps, bool add_one, Tensor y) override;
  void add_rmsnorm(Tensor x, const Tensor& a, const Weight& g, float eps, bool add_one, Tensor y) override;
  void rope(Tensor x, int n_heads, const int32_t* pos, const RopeParams& p) override;
  void act_mul(Act act, const Tensor& gate, const Tensor& up, Tensor out) override;
  bool matmul_act_mul(Act act, const Tensor& x, const Weight& gate, const Weight& up, Tensor out) override;
  bool mlp_gated(Act act, const Tensor& x, const Weight& gate, const Weight& up, const Weight& down,
                 Tensor act_scratch, Tensor out) override;
  void add(Tensor y, const Tensor& x) override;
  void scale(Tensor x, float s) override;
  void kv_store(KvStorage& kv, int layer, const Tensor& k, const Tensor& v,
                const RowLayout& rows) override;
  void attention_prep(Tensor q, Tensor k, const Tensor& v, const QkNorm& norm, const RopeParams& rope,
                      const AttnParams& p, KvStorage& kv, int layer, const RowLayout& rows) override;
  void attention(const Tensor& q, Tensor out, const KvStorage& kv, int layer,
                 const RowLayout& rows, const AttnParams& p) override;
  void topk_softmax(const Tensor& logits, int k, bool norm, int32_t* idx_out,
                    float* w_out) override;
  void topk_sigmoid_grouped(const Tensor& logits, const Weight* bias, int n_group, int topk_group,
                            int k, bool norm, float scale, int32_t* idx_out, float* w_out) override;
  void activate(Act act, const Tensor& x, Tensor out) override;
  void mul_sigmoid(Tensor y, Cols gate) override;
  void mul_sigmoid_rows(Tensor y, const Tensor& g) override;
  void gated_rmsnorm(const Tensor& x, Cols z, const Weight& g, int group, float eps,
                     bool norm_first, Tensor y) override;
  void conv1d_causal(const Tensor& x, const Weight& w, const Weight* bias, bool silu,
                     const RowLayout& rows, const StateRefs& st, int64_t off, Tensor out) override;
  void ssm_scan(Cols x, Cols B, Cols C, Cols dt_raw, const Weight& A_log, const Weight& D,
                const Weight& dt_bias, const SsmParams& p, const RowLayout& rows,
                const StateRefs& st, int64_t off, Tensor y) override;
  void gated_delta(Cols q, Cols k, Cols v, Cols a, Cols b, const Weight& A_log,
                   const Weight& dt_bias, const DeltaParams& p, const RowLayout& rows,
                   const StateRefs& st, int64_t off, Tensor y) override;
  void copy(const Tensor& src, Tensor dst) override;
  void gather_rows(const Tensor& src, const int32_t* rows, int n, Tensor dst) override;
  void scatter_add_scaled(Tensor dst, const Tensor& src, const int32_t* rows, const float* w,
                          int n) override;

  bool moe_experts(const Tensor& x, const Tensor& logits, const MoeRoute& route,
                   const MoeExperts& ex, Tensor out, const MoeShared& shared) override;
  // y [pairs x N] of a grouped matmul (BF16, F16 or Q8_0 weights of K columns); every row's bits
  // equal matmul's for the same row and weight.
  void matmul_grouped(const float* x, int64_t K, const GroupedRows& gr, DType dt, int64_t N,
                      float* y);
  // A device buffer of at least n bytes kept for one use (slot, a BufferSlot) across calls.
  void* buffer(int slot, uint64_t n);
  // What kSlotSplitX holds, while one x's planes may serve several matmuls (matmul_many): split_x
  // then splits that x once.
  struct SplitOnce {
    const float* x = nullptr;  // set while armed: the x whose planes may be kept
    int64_t rows = 0, cols = 0, kp = 0;
    uint16_t* hi = nullptr;  // its planes, once split
  } split_once;
  // A bf16 plane [rows][cols] of x that the op writing x also wrote into kSlotSplitX (bf16 mode),
  // good while nothing has launched or written since: split_x takes it instead of splitting x.
  struct ReadyPlane {
    const float* x = nullptr;
    int64_t rows = 0, cols = 0;
    uint16_t* hi = nullptr;
    uint64_t at = 0;  // launch_count() just after the writer's launch
  } ready_plane;
  // Where the op about to write y also writes y's plane, or null: bf16 mode, rows that a matmul
  // splits, cols a multiple of 32 (a plane row without padding), TF_CUDA_PLANES not 0.
  uint16_t* plane_for(const Tensor& y);
  // Notes that the launch just made wrote y's plane at hi (a no-op for null hi).
  void plane_written(const Tensor& y, uint16_t* hi);

  // Device scratch of at least n bytes for one op's metadata; the next op reuses it, which
  // the single in-order stream makes safe.
  uint8_t* scratch(uint64_t n);
  // Synchronous host-to-device copy of n bytes (checked).
  void upload_bytes(void* dst, const void* src, uint64_t n);
  // Device copy of n bytes of per-round metadata for the next kernel: staged in pinned memory and
  // sent with cudaMemcpyAsync on the stream, or a recent identical upload reused (every layer of a
  // round sends the same positions and page lists). Valid until the next call.
  const void* meta(const void* src, uint64_t n);
  // rope's cos/sin table [rows][half cos, half sin] for these positions, made or kept.
  const float* rope_cs(const int32_t* pos, int64_t rows, const RopeParams& p);
  // Checks a kv_store of k and v and sends each row's pool slot (page * page_size + offset); null
  // for no rows.
  // Throws unless kv's values are those of the backend's mode (bf16 in bf16 mode, else f32).
  void check_kv_mode(const CudaKv& kv, const char* op) const;
  const int64_t* kv_slots(const CudaKv& kv, int layer, const Tensor& k, const Tensor& v,
                          const RowLayout& rows, const char* op);
  // Matmul split-K scratch: f32 partials of at least n floats, and per-tile arrival counters
  // (zero between launches: the last block of a tile resets its counter).
  float* matmul_partials(uint64_t n);
  unsigned* matmul_counters(uint64_t n);

  void set_profiling(bool on) override;
  std::string profile_take() override;
  bool graph_begin(int rows, uint64_t key) override;
  bool graph_end() override;
  void graph_abort() override;
  GraphStats graph_stats() const override;
  // Throws GraphRefused while a round is recorded or replayed as a graph: for work a graph cannot
  // hold (an allocation, a copy to or from the host, a synchronization).
  void graph_refuse() const;
  // Times one op between events on the stream when profiling is on; a no-op otherwise.
  class ProfScope {
   public:
    ProfScope(CudaBackend& be, const char* op, const std::string* name, int64_t rows);
    ~ProfScope();
    ProfScope(const ProfScope&) = delete;
    ProfScope& operator=(const ProfScope&) = delete;

   private:
    OpProfile* prof_;
    int key_ = 0;
    void* a_ = nullptr;
    std::chrono::steady_clock::time_point t0_;
  };

 private:
  // Adds the time of a call that blocks the host on the device to device_wait_seconds().
  class WaitScope {
   public:
    explicit WaitScope(CudaBackend& be) : be_(be), t0_(std::chrono::steady_clock::now()) {}
    ~WaitScope() {
      be_.wait_ns_ += std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0_).count();
    }
    WaitScope(const WaitScope&) = delete;
    WaitScope& operator=(const WaitScope&) = delete;

   private:
    CudaBackend& be_;
    std::chrono::steady_clock::time_point t0_;
  };

  struct MetaEntry {
    uint64_t off = 0, n = 0;
  };

  int device_ = 0;
  std::string name_;
  BlockTable blocks_;
  uint8_t* scratch_ = nullptr;
  uint64_t scratch_bytes_ = 0;
  uint8_t* meta_host_ = nullptr;  // pinned staging ring; byte i is sent to meta_dev_ + i
  uint8_t* meta_dev_ = nullptr;
  uint64_t meta_cap_ = 0, meta_used_ = 0;
  std::vector<MetaEntry> meta_recent_;  // uploads since the ring last wrapped, newest last
  // launch_count() just after the last KV store (attention_prep or kv_store), which waits on
  // every earlier kernel before it lets the next one start.
  uint64_t kv_written_at_ = ~0ull;
  std::vector<uint8_t> rope_blob_;      // the positions, frequencies and mscale rope_table_ holds
  const float* rope_table_ = nullptr;
  float* partials_ = nullptr;
  uint64_t partials_n_ = 0;
  unsigned* counters_ = nullptr;
  uint64_t counters_n_ = 0;
  std::unique_ptr<OpProfile> prof_;
  bool profile_at_exit_ = false;  // TF_CUDA_PROFILE set: the table goes to stderr at exit
  std::unique_ptr<GraphState> graph_;
  // meta() while a round is recorded or replayed: the round's arrays in the fixed graph arena.
  const void* graph_meta(const void* src, uint64_t n);
  std::atomic<int64_t> wait_ns_{0};
  struct Buffer {
    void* p = nullptr;
    uint64_t n = 0;
  };
  std::vector<Buffer> buffers_;
  struct ExpertTable {
    ExpertPtr* table = nullptr;
    uint64_t tag = 0;  // the first expert's up weight id when the table was made
    size_t experts = 0;
    uint64_t bytes = 0;
  };
  std::unordered_map<const Weight*, ExpertTable> expert_ptrs_;  // by the first expert's up weight
 public:
  // Device array of the experts' gate, up and down pointers (3 x E), made once per layer.
  const ExpertPtr* expert_ptrs(const MoeExperts& ex);
};

// Throws unless w is a weight this backend made; names the op.
const CudaWeight& as_cuda(const Weight& w, const char* op);
const CudaKv& as_cuda_kv(const KvStorage& kv, const char* op);
// Throws tf::Error naming op when the last launch or an earlier async op failed.
void check_launch(const char* op);

}  // namespace tf::cuda
