#pragma once
// Shared blocks the model families are built from: weight loading with shape checks,
// attention, gated MLP and mixture-of-experts layers.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "formats/hf_config.h"
#include "formats/weight_source.h"
#include "models/model.h"

namespace tf {

using WeightPtr = std::unique_ptr<Weight>;

// Loads named tensors onto the backend, checking each one's shape against the config.
class WeightLoader {
 public:
  WeightLoader(const WeightSource& src, Backend& backend) : src_(src), backend_(backend) {}
  WeightPtr matrix(const std::string& name, int64_t rows, int64_t cols);
  WeightPtr vector(const std::string& name, int64_t n);
  WeightPtr optional_vector(const std::string& name, int64_t n);
  bool has(const std::string& name) const { return src_.find(name) != nullptr; }
  // Rows [row0, row0 + rows) of a [total_rows x cols] matrix (one part of a fused projection).
  WeightPtr row_slice(const std::string& name, int64_t total_rows, int64_t row0, int64_t rows, int64_t cols);
  // A tensor of rows * cols elements whose other dims are 1 (e.g. a [C x 1 x K] conv), as [rows x cols].
  WeightPtr squeezed(const std::string& name, int64_t rows, int64_t cols);
  // Rows [row0, row0 + rows) of expert e of a stacked [experts x R x cols] tensor.
  WeightPtr expert_slice(const std::string& name, int64_t experts, int64_t e, int64_t total_rows,
                         int64_t row0, int64_t rows, int64_t cols);
  uint64_t bytes() const { return bytes_; }

 private:
  WeightPtr load(const TensorView& view, int64_t rows, int64_t cols);
  const WeightSource& src_;
  Backend& backend_;
  uint64_t bytes_ = 0;
};

struct AttentionBlock {
  WeightPtr q, k, v, o;
  WeightPtr q_bias, k_bias, v_bias, o_bias;
  WeightPtr q_norm, k_norm;  // per-head RMSNorm (Qwen3)
  float norm_eps = 1e-6f;
  AttnParams params;
};

// gate null: a plain MLP, down(act(up x)) (Nemotron-H); else down(act(gate x) * up x).
struct MlpBlock {
  WeightPtr gate, up, down;
  Act act = Act::SiLU;
  int64_t inter = 0;
};

struct MoeBlock {
  WeightPtr router;
  std::vector<MlpBlock> experts;
  std::unique_ptr<MlpBlock> shared;
  WeightPtr shared_gate;  // sigmoid gate of the shared expert, [1 x hidden]
  int top_k = 0;
  bool norm_topk = false;
  int64_t inter = 0;
  // Sigmoid router (Nemotron-H, DeepSeek-V3): grouped top-k on score + bias, weights times scale.
  bool sigmoid = false;
  WeightPtr router_bias;
  int n_group = 1, topk_group = 1;
  float routed_scale = 1.0f;
  MoeExperts routed;  // the experts' weights as Backend::moe_experts takes them (index_experts)
};

// Fills m.routed from m.experts; loaders call it once the experts are in place.
void index_experts(MoeBlock& m);

// Causal attention over n_heads of head_dim sharing n_kv_heads, scaled by 1 / sqrt(head_dim).
AttnParams attention_params(int64_t n_heads, int64_t n_kv_heads, int64_t head_dim);
AttentionBlock load_attention(WeightLoader& L, const std::string& prefix, const HfConfig& cfg,
                              bool qk_norm);
MlpBlock load_mlp(WeightLoader& L, const std::string& prefix, int64_t hidden, int64_t inter, bool bias);
// Experts as separate tensors (experts.E.gate_proj) or stacked (experts.gate_up_proj).
MoeBlock load_moe(WeightLoader& L, const std::string& prefix, const HfConfig& cfg);

// Scratch for one round, sized once for the widest round.
struct Scratch {
  Tensor x, h, q, k, v, att, o, gate, up, act, down;
  Tensor router, moe_in, moe_gate, moe_up, moe_act, moe_out, moe_acc, shared_gate;
  Tensor final_rows, logits;
  int max_rows = 0;
  int max_logit_rows = 0;
  std::vector<int32_t> topk_idx;
  std::vector<float> topk_w;
};

// rope.rot_dim == 0 (a default RopeParams): no rotary embedding (Nemotron-H attention).
void attention_forward(Backend& b, const AttentionBlock& a, const RopeParams& rope, Tensor in,
                       Tensor out, Scratch& s, KvStorage& kv, int layer, const RowLayout& rows);
void mlp_forward(Backend& b, const MlpBlock& m, Tensor in, Tensor out, Tensor gate, Tensor up,
                 Tensor act);
void moe_forward(Backend& b, const MoeBlock& m, Tensor in, Tensor out, Scratch& s);

// Router and expert buffers of MoE layers with `experts` experts of width `inter` (gated experts
// also get moe_gate; a gated shared expert gets shared_gate).
void alloc_moe_scratch(Backend& b, Scratch& s, int64_t rows, int64_t hidden, int64_t experts, int64_t inter,
                       bool gated, bool shared_gate);
// Checks a round's rows and tokens against the reserved scratch and the vocabulary.
void check_round(const RoundInput& in, int max_rows, int32_t vocab);
// A model's final norm and head, and the vocabulary they give logits over.
struct LmHead {
  const Weight& norm;
  float eps;
  bool add_one;
  const Weight& head;
  int32_t vocab;
};
// A model's round: body (its layers, leaving the final hidden rows in x), then the final norm and
// head over the rows in in.logit_rows (s.max_logit_rows at a time), the draws and the logits the
// host asked for. The body and a head that fits one pass go through graph_round together.
void model_round(Backend& b, const RoundInput& in, const Tensor& x, const LmHead& lm, Scratch& s,
                 const std::function<void()>& body, std::vector<float>& logits, std::vector<int32_t>& sampled);
// Runs body, a round's launches, as the backend's replayed graph for key where it keeps one
// (Backend::graph_begin), else directly; a refused or missed replay runs body again directly.
void graph_round(Backend& b, int rows, uint64_t key, const std::function<void()>& body);
// A model's round through graph_round when it is a decode round (a logit row for every row; its
// shape recurs every step), keyed by its rows; a round with prompt chunks runs directly.
void graph_round(Backend& b, const RoundInput& in, const std::function<void()>& body);

}  // namespace tf
