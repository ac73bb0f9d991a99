#pragma once
// The interface every compute backend (cpu, cuda) implements. Models call only this.
//
// Exactness contract: every op computes each output row from that row's own inputs with
// one fixed reduction order, so a row's result never depends on how many rows share the
// call or where a prompt's chunks ended.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/sampling.h"
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
  // Bytes of one K or V value: 4 (f32), or 2 where the storage was made in bf16 mode (values
  // rounded to bf16, as attention's products take them there).
  int value_bytes = 4;
  virtual uint64_t bytes() const = 0;
};

// Which sequence and position each row of a round is, and each sequence's pages in order.
struct RowLayout {
  std::vector<int32_t> pos;                     // absolute position of each row
  std::vector<int32_t> seq;                     // index into seq_pages for each row
  std::vector<std::vector<int32_t>> seq_pages;  // page ids of each sequence, position order
  int rows() const { return static_cast<int>(pos.size()); }
};

// Throws naming op unless row r's positions [first, pos] have valid pages of kv in its sequence.
void check_row(const RowLayout& rows, int r, int first, const KvStorage& kv, const char* op);
// Throws naming op unless the layout has m positions and m sequence ids.
void check_layout(const RowLayout& rows, int64_t m, const char* op);

struct RopeParams {
  int head_dim = 0;
  int rot_dim = 0;               // rotated leading dims of each head (partial rotary)
  bool neox = true;              // true: pairs (i, i + rot/2); false: pairs (2i, 2i + 1)
  std::vector<float> inv_freq;   // rot_dim / 2 frequencies, scaling already applied
  float mscale = 1.0f;           // multiplies cos and sin (YaRN attention factor)
};

// Per-head RMS norms of q and k before rope (null: none); add_one multiplies by 1 + weight.
struct QkNorm {
  const Weight* q = nullptr;
  const Weight* k = nullptr;
  float eps = 0.0f;
  bool add_one = false;
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

// Columns [col, col + width) of every row of t: one part of a fused projection's output.
struct Cols {
  Tensor t;
  int64_t col = 0;
  float* at(int64_t r) const { return t.row(r) + col; }
};

// Recurrent state of the sequences of one round (RowLayout seq indices), in a pool of slots of
// slot_floats floats each (backend memory). Sequence s reads its state from slot src[s] and writes
// the advanced state to slot dst[s] (src != dst, so a failed round leaves the old state intact).
// step[s] = 1 runs the recurrent step form row by row (decode, verify), 0 the chunked form
// (prefill). keep[s], when not empty, holds rows(s) - 1 slots of keep_pool that get the state after
// each of the sequence's rows but the last (what a verify rollback needs). A sequence's rows are
// contiguous and in position order. Each layer owns the part of a slot that starts at its offset.
struct StateRefs {
  float* pool = nullptr;
  int64_t slot_floats = 0;
  int32_t slots = 0, keep_slots = 0;  // slots in pool and keep_pool (0: not checked)
  std::vector<int32_t> src, dst;
  std::vector<uint8_t> step;
  float* keep_pool = nullptr;
  std::vector<std::vector<int32_t>> keep;
  bool empty() const { return src.empty(); }
};

// Mamba2 (SSD) sizes: heads x head_dim channels, B and C of `groups` groups of state_size; the
// chunked form clamps dt to [dt_min, dt_max] after softplus and the step form does not, as Mamba2's
// reference does; chunk is the SSD chunk length of the chunked form.
struct SsmParams {
  int heads = 0, head_dim = 0, groups = 0, state_size = 0, chunk = 256;
  float dt_min = 0.0f, dt_max = 0.0f;  // dt_max 0: no upper clamp
};

// Gated DeltaNet sizes: k_heads of k_dim for q and k, v_heads of v_dim for v (k heads repeat to
// v heads); chunk is the chunk length of the chunked form.
struct DeltaParams {
  int k_heads = 0, v_heads = 0, k_dim = 0, v_dim = 0, chunk = 64;
};

// Routing of an MoE layer (see topk_softmax and topk_sigmoid_grouped for each rule).
struct MoeRoute {
  int k = 1;
  bool norm = false;
  bool sigmoid = false;  // false: softmax top-k; true: grouped sigmoid top-k
  const Weight* bias = nullptr;
  int n_group = 1, topk_group = 1;
  float scale = 1.0f;
};

// The routed experts of one MoE layer, all of one dtype and shape: gate may be empty (then an
// expert is down(act(up x)), else down(act(gate x) * up x)).
struct MoeExperts {
  std::vector<const Weight*> gate, up, down;
  Act act = Act::SiLU;
};

// A shared expert's output folded into an MoE layer's routed sum (Backend::moe_experts).
struct MoeShared {
  const Tensor* y = nullptr;     // [m x hidden]
  const Tensor* gate = nullptr;  // [m x 1], optional
};

// Counts of a backend's replayed rounds (see Backend::graph_begin).
struct GraphStats {
  int64_t captures = 0;  // rounds recorded as a graph
  int64_t replays = 0;   // rounds that ran as a recorded graph
  int64_t misses = 0;    // rounds whose launches differed from their graph's, run again directly
  int64_t refusals = 0;  // rounds that did what a graph cannot hold (a copy back, an allocation)
  int64_t updates = 0;   // launches of replayed rounds whose arguments were patched into the graph
};

// Thrown by a backend inside a graphed round for work a graph cannot hold; graph_round catches it.
struct GraphRefused {};

// How f32 activations enter a matmul with BF16 or F16 weights. F32: whole (on tensor cores as a
// bf16 high part plus a bf16 low part, two products a step). BF16: rounded to bf16 (nearest even)
// first, as engines that keep activations in bf16 do, for half the tensor-core work. Both are the
// same for every row of every batch; Q8_0 weights always take x rounded to bf16 on the GPU and
// F32 weights always take x whole.
enum class MatmulInput { F32, BF16 };

// "f32" or "bf16"; throws on anything else.
MatmulInput parse_matmul_input(const std::string& s);
const char* matmul_input_name(MatmulInput m);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual int threads() const { return 1; }
  // Set once, before the first matmul (a graphed round keeps the launches it recorded).
  void set_matmul_input(MatmulInput m) { matmul_input_ = m; }
  MatmulInput matmul_input() const { return matmul_input_; }
  // Per-op device time for benchmarks: set_profiling(true) starts counting, profile_take()
  // returns the table since the last take (empty where the backend does not time its ops).
  virtual void set_profiling(bool) {}
  virtual std::string profile_take() { return {}; }
  // Graph replay of a round's launches (CUDA with TF_CUDA_GRAPHS=1): graph_begin(rows, key) says
  // whether the launches up to graph_end() are recorded or replayed for key instead of run one by
  // one; graph_end() false means they were not run, and the caller runs them again directly. A
  // GraphRefused thrown between them is answered with graph_abort() and a direct run. Launches
  // only: nothing between them may read device results on the host.
  virtual bool graph_begin(int /*rows*/, uint64_t /*key*/) { return false; }
  virtual bool graph_end() { return true; }
  virtual void graph_abort() {}
  virtual GraphStats graph_stats() const { return {}; }

  // Memory. alloc returns zero-filled f32 storage owned by the backend.
  virtual Tensor alloc(int64_t rows, int64_t cols) = 0;
  virtual void free(Tensor& t) = 0;
  virtual void to_host(const Tensor& src, float* dst) = 0;
  virtual void from_host(const float* src, Tensor dst) = 0;
  // dst = 0, as a new sequence's recurrent state starts (a device fills it on its own stream, no
  // upload of host zeros).
  virtual void zero(Tensor dst) = 0;
  // ids[j] = the token sampling.h's rule draws from row specs[j].row of logits (penalized by its
  // tokens in pens), on the backend, so rows need not leave the device; a row may have several specs.
  virtual void sample_rows(const Tensor& logits, const std::vector<SampleSpec>& specs,
                           const std::vector<PenaltyToken>& pens, int32_t* ids);
  // Throws unless every spec names a row of logits and distinct in-vocabulary tokens of pens.
  static void check_samples(const Tensor& logits, const std::vector<SampleSpec>& specs,
                            const std::vector<PenaltyToken>& pens);
  virtual std::unique_ptr<Weight> load_weight(const TensorView& view) = 0;
  virtual std::unique_ptr<KvStorage> alloc_kv(int layers, int pages, int page_size, int kv_heads,
                                              int head_dim) = 0;
  // Bytes of one K or V value in the storage alloc_kv makes now (the memory planner's unit).
  int kv_value_bytes() const { return matmul_input_ == MatmulInput::BF16 ? 2 : 4; }
  virtual uint64_t device_bytes_in_use() const { return 0; }
  // Memory of the device this backend computes on; 0 when it computes in host memory.
  virtual uint64_t device_memory_total() const { return 0; }
  // What that device has free now, whoever holds the rest; 0 where not known or not a device.
  virtual uint64_t device_memory_free() const { return 0; }
  // Bytes the backend may still allocate during rounds once warm_up_rounds has run: buffers whose
  // size grows with the context a round reads rather than its rows (0 where none do).
  virtual uint64_t round_growth_bound() const { return 0; }
  // Seconds the host has spent blocked on the device (copies back, synchronous uploads, stream
  // syncs) since the backend was made; 0 for a backend without one.
  virtual double device_wait_seconds() const { return 0.0; }
  // One page of every layer's K and V in host memory (prompt cache tier): kv_page_bytes() bytes,
  // per layer the page's K rows then its V rows, each value as the storage holds it.
  static uint64_t kv_page_bytes(const KvStorage& kv) {
    return 2ull * kv.layers * kv.page_size * kv.kv_heads * kv.head_dim * static_cast<uint64_t>(kv.value_bytes);
  }
  // Page-locks [p, p + bytes) so to_host copies into it at full speed (the cpu: nothing); every
  // pinned range is unpinned before it is freed.
  virtual void pin_host(void* /*p*/, uint64_t /*bytes*/) {}
  virtual void unpin_host(void* /*p*/) {}
  virtual void kv_page_to_host(const KvStorage& kv, int page, void* dst) = 0;
  virtual void kv_page_from_host(KvStorage& kv, int page, const void* src) = 0;
  // Copies one page's K and V in every layer (siblings that share a prompt's last partial page).
  virtual void kv_page_copy(KvStorage& kv, int src, int dst) {
    std::vector<uint8_t> buf(kv_page_bytes(kv));
    kv_page_to_host(kv, src, buf.data());
    kv_page_from_host(kv, dst, buf.data());
  }

  // out[i] = table[ids[i]]
  virtual void embed(const Weight& table, const int32_t* ids, int n, Tensor out) = 0;
  // y = x * w^T (+ bias): x [m x K], w [N x K], y [m x N]
  virtual void matmul(const Tensor& x, const Weight& w, const Weight* bias, Tensor y) = 0;
  // Several matmuls of one x (a layer's q, k, v or gate and up): the same bits as one matmul each.
  struct MatmulOut {
    const Weight* w = nullptr;
    const Weight* bias = nullptr;
    Tensor y;
  };
  virtual void matmul_many(const Tensor& x, const std::vector<MatmulOut>& outs) {
    for (const MatmulOut& o : outs) matmul(x, *o.w, o.bias, o.y);
  }
  // y = x / rms(x) * (g + add_one): per row of x
  virtual void rmsnorm(const Tensor& x, const Weight& g, float eps, bool add_one, Tensor y) = 0;
  // x += a, then y = rmsnorm(x): the residual add and the next norm, with add's and rmsnorm's bits.
  virtual void add_rmsnorm(Tensor x, const Tensor& a, const Weight& g, float eps, bool add_one, Tensor y) {
    add(x, a);
    rmsnorm(x, g, eps, add_one, y);
  }
  // In place on x [m x n_heads*head_dim], row r at position pos[r].
  virtual void rope(Tensor x, int n_heads, const int32_t* pos, const RopeParams& p) = 0;
  // out = act(gate) * up
  virtual void act_mul(Act act, const Tensor& gate, const Tensor& up, Tensor out) = 0;
  // out = act(x gate^T) * (x up^T) with the bits of matmul_many and act_mul, without gate's and up's
  // products in memory. Returns false where the backend has no such path for this shape; the caller
  // then runs those ops itself.
  virtual bool matmul_act_mul(Act /*act*/, const Tensor& /*x*/, const Weight& /*gate*/, const Weight& /*up*/,
                              Tensor /*out*/) {
    return false;
  }
  // out = (act(x gate^T) * (x up^T)) down^T: a gated MLP with the bits of matmul_act_mul (or
  // matmul_many and act_mul) then matmul; act_scratch [m x inter] may be used and is left
  // unspecified. Returns false where matmul_act_mul is not taken; the caller then runs the ops.
  virtual bool mlp_gated(Act act, const Tensor& x, const Weight& gate, const Weight& up, const Weight& down,
                         Tensor act_scratch, Tensor out) {
    if (!matmul_act_mul(act, x, gate, up, act_scratch)) return false;
    matmul(act_scratch, down, nullptr, out);
    return true;
  }
  // y += x
  virtual void add(Tensor y, const Tensor& x) = 0;
  // x *= s
  virtual void scale(Tensor x, float s) = 0;
  // Stores rows of k and v [m x kv_heads*head_dim] into the pages of their positions.
  virtual void kv_store(KvStorage& kv, int layer, const Tensor& k, const Tensor& v,
                        const RowLayout& rows) = 0;
  // What comes between the q/k/v projections and attention: q and k normalized per head when
  // their norm is given, both rotated when rope.rot_dim > 0, then k and v stored. A backend may
  // fuse it; the bits are those of rmsnorm, rope and kv_store called in that order.
  virtual void attention_prep(Tensor q, Tensor k, const Tensor& v, const QkNorm& norm,
                              const RopeParams& rope, const AttnParams& p, KvStorage& kv, int layer,
                              const RowLayout& rows) {
    if (norm.q) rmsnorm(q.reshape(p.head_dim), *norm.q, norm.eps, norm.add_one, q.reshape(p.head_dim));
    if (norm.k) rmsnorm(k.reshape(p.head_dim), *norm.k, norm.eps, norm.add_one, k.reshape(p.head_dim));
    if (rope.rot_dim > 0) {
      this->rope(q, p.n_heads, rows.pos.data(), rope);
      this->rope(k, p.n_kv_heads, rows.pos.data(), rope);
    }
    kv_store(kv, layer, k, v, rows);
  }
  // Causal attention of each row of q [m x n_heads*head_dim] over its sequence's stored
  // keys at positions [0, pos] (or the sliding window), out [m x n_heads*head_dim].
  virtual void attention(const Tensor& q, Tensor out, const KvStorage& kv, int layer,
                         const RowLayout& rows, const AttnParams& p) = 0;
  // Router: softmax over each row's logits then the k largest (ties: lower index), weights
  // renormalized to sum 1 when norm. Results in host memory [m x k], ranked by weight.
  virtual void topk_softmax(const Tensor& logits, int k, bool norm, int32_t* idx_out,
                            float* w_out) = 0;
  // Sigmoid-score router (DeepSeek-V3, Nemotron-H): experts chosen by score + bias (bias may be
  // null) within the topk_group best of n_group groups (a group scores the sum of its two best);
  // weights are the unbiased scores, renormalized to sum 1 when norm, times scale. Ties: lower
  // index. Results in host memory [m x k], ranked by biased score.
  virtual void topk_sigmoid_grouped(const Tensor& logits, const Weight* bias, int n_group, int topk_group,
                                    int k, bool norm, float scale, int32_t* idx_out, float* w_out) = 0;
  // The routed part of an MoE layer with no host round trip: each row of logits [m x experts] is
  // routed as route says, then out[r] = sum over r's chosen experts in increasing expert index of
  // weight * expert(x[r]) (a sum from 0, each product rounded before it is added), which is what
  // topk + gather_rows + the expert's matmuls + scatter_add_scaled in expert order give. Returns
  // false when the backend has no such path; the caller then runs those ops itself. With
  // shared.y set, out[r] = shared.y[r] (times sigmoid(shared.gate[r]) when set, as
  // mul_sigmoid_rows rounds it) + that sum, as add rounds it; out may be shared.y.
  virtual bool moe_experts(const Tensor& /*x*/, const Tensor& /*logits*/, const MoeRoute& /*route*/,
                           const MoeExperts& /*ex*/, Tensor /*out*/, const MoeShared& /*shared*/) {
    return false;
  }
  // out = act(x)
  virtual void activate(Act act, const Tensor& x, Tensor out) = 0;
  // y *= sigmoid(gate), elementwise
  virtual void mul_sigmoid(Tensor y, Cols gate) = 0;
  // Each row of y times sigmoid(g[r]) = 1 / (1 + exp(-g[r])), g [m x 1] (a shared expert's gate).
  virtual void mul_sigmoid_rows(Tensor y, const Tensor& g) {
    std::vector<float> gh(static_cast<size_t>(g.rows)), yh(static_cast<size_t>(y.rows * y.cols));
    to_host(g, gh.data());
    to_host(y, yh.data());
    for (int64_t r = 0; r < y.rows; ++r) {
      const float sg = 1.0f / (1.0f + std::exp(-gh[static_cast<size_t>(r)]));
      for (int64_t c = 0; c < y.cols; ++c) yh[static_cast<size_t>(r * y.cols + c)] *= sg;
    }
    from_host(yh.data(), y);
  }
  // Per group of `group` columns of each row: norm_first ? rmsnorm(x) * g * silu(z)
  // : rmsnorm(x * silu(z)) * g (Gated DeltaNet's and Mamba2's gated norms). g has x.cols entries.
  virtual void gated_rmsnorm(const Tensor& x, Cols z, const Weight& g, int group, float eps,
                             bool norm_first, Tensor y) = 0;
  // Depthwise causal conv over each sequence's rows (x [m x C], w [C x K], out [m x C]), continuing
  // from its state (the last K - 1 inputs, [K - 1 x C] at offset off of the slot), then SiLU when
  // silu. The state written is the last K - 1 inputs after the sequence's rows.
  virtual void conv1d_causal(const Tensor& x, const Weight& w, const Weight* bias, bool silu,
                             const RowLayout& rows, const StateRefs& st, int64_t off, Tensor out) = 0;
  // Mamba2 scan (state [heads x head_dim x state_size] at off): dt = softplus(dt_raw + dt_bias)
  // (clamped in the chunked form), a = exp(-exp(A_log) dt); h = a h + dt x B^T; y = h C + D x per head, where a head
  // uses the B and C of its group (heads / groups heads per group). x [heads*head_dim], B and C
  // [groups*state_size], dt_raw [heads] per row; y [m x heads*head_dim].
  virtual void ssm_scan(Cols x, Cols B, Cols C, Cols dt_raw, const Weight& A_log, const Weight& D,
                        const Weight& dt_bias, const SsmParams& p, const RowLayout& rows,
                        const StateRefs& st, int64_t off, Tensor y) = 0;
  // Gated delta rule (state [v_heads x k_dim x v_dim] at off): q and k L2-normalized per head (eps
  // 1e-6), q scaled by 1/sqrt(k_dim); g = -exp(A_log) softplus(a + dt_bias), beta = sigmoid(b);
  // S = exp(g) S; S += k (beta (v - S^T k))^T; y = S^T q. q, k [k_heads*k_dim], v [v_heads*v_dim],
  // a and b [v_heads] per row; y [m x v_heads*v_dim].
  virtual void gated_delta(Cols q, Cols k, Cols v, Cols a, Cols b, const Weight& A_log,
                           const Weight& dt_bias, const DeltaParams& p, const RowLayout& rows,
                           const StateRefs& st, int64_t off, Tensor y) = 0;
  // dst rows = src rows, same shapes (recurrent state slots).
  virtual void copy(const Tensor& src, Tensor dst) = 0;
  // dst[i] = src[rows[i]]
  virtual void gather_rows(const Tensor& src, const int32_t* rows, int n, Tensor dst) = 0;
  // dst[rows[i]] += w[i] * src[i], applied in i order
  virtual void scatter_add_scaled(Tensor dst, const Tensor& src, const int32_t* rows,
                                  const float* w, int n) = 0;

 private:
  MatmulInput matmul_input_ = MatmulInput::F32;
};

std::unique_ptr<Backend> make_cpu_backend(int n_threads);

// device: "cpu"; "cuda" or "cuda:N" (builds with TF_CUDA only); "auto" = cuda:0 when a GPU is
// present, else cpu. threads is the cpu backend's thread count (0: all cores).
std::unique_ptr<Backend> make_backend(const std::string& device, int threads);

}  // namespace tf
