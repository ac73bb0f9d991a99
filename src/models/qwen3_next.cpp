// Qwen3-Next and Qwen3.5 family (multimodal Qwen3.5 folders serve their text path): layers of Gated
// DeltaNet linear attention or gated full attention (config layer_types), each followed by a dense MLP
// or a MoE with a sigmoid-gated shared expert; every RMSNorm outside the DeltaNet block is zero-centred
// (scales by 1 + weight).
#include <algorithm>

#include "base/error.h"
#include "formats/model_files.h"
#include "models/gated_deltanet.h"
#include "models/model.h"
#include "models/qwen3_next_attention.h"
#include "models/rope.h"

namespace tf {

namespace {

struct HybridLayer {
  WeightPtr input_norm, post_attn_norm;
  std::unique_ptr<DeltaNetBlock> delta;
  std::unique_ptr<GatedAttentionBlock> attn;
  std::unique_ptr<MlpBlock> mlp;
  std::unique_ptr<MoeBlock> moe;
};

class Qwen3NextModel : public Model {
 public:
  Qwen3NextModel(const HfConfig& cfg, Backend& backend, std::string family) : b_(backend) {
    config_ = cfg;
    family_ = std::move(family);
  }
  ~Qwen3NextModel() override { free_scratch(); }

  int n_kv_layers() const override { return n_attn_; }
  int64_t state_floats() const override { return state_floats_; }
  void reserve(int max_rows) override;
  using Model::forward;
  void forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits, std::vector<int32_t>& sampled) override;

  void load(const ModelFiles& files);

 private:
  void free_scratch();
  std::vector<Tensor*> scratch_tensors();

  Backend& b_;
  std::vector<std::unique_ptr<uint8_t[]>> owned_;  // reordered weight bytes the backend uses in place
  WeightPtr embed_, final_norm_, lm_head_;
  std::vector<HybridLayer> layers_;
  RopeParams rope_;
  int n_attn_ = 0;
  int64_t state_floats_ = 0;
  Scratch s_;
  DeltaNetScratch ds_;
  GatedAttentionScratch as_;
};

// Layer kinds: layer_types, or every full_attention_interval-th layer full attention.
std::vector<std::string> layer_kinds(const nlohmann::json& j, int64_t n) {
  std::vector<std::string> kinds;
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    TF_CHECK(j["layer_types"].is_array() && static_cast<int64_t>(j["layer_types"].size()) == n,
             "config: layer_types must list ", n, " layers");
    for (const auto& t : j["layer_types"]) {
      TF_CHECK(t == "linear_attention" || t == "full_attention", "config: layer type ", t.dump(),
               " is not supported (linear_attention, full_attention)");
      kinds.push_back(t.get<std::string>());
    }
    return kinds;
  }
  int64_t interval = 4;
  if (j.contains("full_attention_interval")) {
    TF_CHECK(j["full_attention_interval"].is_number_integer(), "config: full_attention_interval must be an integer");
    interval = j["full_attention_interval"].get<int64_t>();
    TF_CHECK(interval >= 1 && interval <= 4096, "config: full_attention_interval ", interval, " is out of range");
  }
  for (int64_t i = 0; i < n; ++i) kinds.push_back((i + 1) % interval ? "linear_attention" : "full_attention");
  return kinds;
}

// Multimodal Qwen3.5 folders (ConditionalGeneration) keep the language model under
// model.language_model.*; their vision tower and mtp tensors are never read. transformers' text
// classes load such a folder too by dropping the language_model part of the names.
std::string weight_prefix(const WeightSource& w, bool multimodal, bool qwen35) {
  if (multimodal) return "model.language_model.";
  if (qwen35 && w.find("model.embed_tokens.weight") == nullptr &&
      w.find("model.language_model.embed_tokens.weight") != nullptr)
    return "model.language_model.";
  return "model.";
}

void Qwen3NextModel::load(const ModelFiles& files) {
  const HfConfig& c = config_;
  const bool multimodal = c.raw.contains("text_config") && c.raw["text_config"].is_object() &&
                          !c.raw.contains("hidden_size");
  const nlohmann::json& raw = multimodal ? c.raw["text_config"] : c.raw;
  const auto mt = c.raw.find("model_type");
  const std::string outer_type = mt != c.raw.end() && mt->is_string() ? mt->get<std::string>() : "";
  const bool fused = c.model_type == "qwen3_next" || c.architecture == "Qwen3NextForCausalLM";
  const bool moe35 = c.model_type == "qwen3_5_moe_text" || c.architecture == "Qwen3_5MoeForCausalLM" ||
                     c.architecture == "Qwen3_5MoeForConditionalGeneration" || outer_type == "qwen3_5_moe";
  const bool dense35 = c.model_type == "qwen3_5_text" || c.architecture == "Qwen3_5ForCausalLM" ||
                       c.architecture == "Qwen3_5ForConditionalGeneration" || outer_type == "qwen3_5";
  const std::string pre = weight_prefix(*files.weights, multimodal, moe35 || dense35);
  // transformers' ConditionalGeneration ties the head by its outer tie_word_embeddings, false when absent.
  bool tie = c.tie_word_embeddings;
  if (multimodal && (!c.raw.contains("tie_word_embeddings") || c.raw["tie_word_embeddings"].is_null())) tie = false;
  WeightLoader L(*files.weights, b_);
  RowAssembler R(*files.weights, b_, owned_);
  embed_ = L.matrix(pre + "embed_tokens.weight", c.vocab_size, c.hidden_size);
  final_norm_ = L.vector(pre + "norm.weight", c.hidden_size);
  if (L.has("lm_head.weight") && !tie)
    lm_head_ = L.matrix("lm_head.weight", c.vocab_size, c.hidden_size);
  else
    TF_CHECK(tie, files.path, ": tensor lm_head.weight is missing and tie_word_embeddings is false");
  const auto kinds = layer_kinds(raw, c.num_hidden_layers);
  const float eps = static_cast<float>(c.rms_norm_eps);
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = cat(pre, "layers.", i, ".");
    HybridLayer layer;
    layer.input_norm = L.vector(p + "input_layernorm.weight", c.hidden_size);
    layer.post_attn_norm = L.vector(p + "post_attention_layernorm.weight", c.hidden_size);
    if (kinds[static_cast<size_t>(i)] == "linear_attention") {
      layer.delta = std::make_unique<DeltaNetBlock>(
          load_deltanet(L, R, p + "linear_attn.", raw, c.hidden_size, eps, fused));
      layer.delta->state_off = state_floats_;
      state_floats_ += layer.delta->state_floats();
    } else {
      layer.attn = std::make_unique<GatedAttentionBlock>(load_gated_attention(L, R, p + "self_attn.", c, n_attn_++));
    }
    // transformers: Qwen3-Next layers are sparse unless in mlp_only_layers, every decoder_sparse_step;
    // Qwen3.5-MoE layers are all sparse with renormalized top-k; Qwen3.5 is dense.
    const auto& only = c.mlp_only_layers;
    const bool sparse =
        !dense35 && c.num_experts > 0 &&
        (moe35 || (std::find(only.begin(), only.end(), i) == only.end() &&
                   (i + 1) % std::max<int64_t>(1, c.decoder_sparse_step) == 0));
    if (sparse) {
      layer.moe = std::make_unique<MoeBlock>(load_moe(L, p + "mlp.", c));
      if (moe35) layer.moe->norm_topk = true;
      TF_CHECK(layer.moe->shared_gate != nullptr || !layer.moe->shared, p, "mlp: shared expert without its gate");
    } else {
      layer.mlp = std::make_unique<MlpBlock>(load_mlp(L, p + "mlp.", c.hidden_size, c.intermediate_size, false));
    }
    layers_.push_back(std::move(layer));
  }
  TF_CHECK(n_attn_ > 0 || state_floats_ > 0, files.path, ": no layers");
  // Qwen3.5's interleaved mrope: text positions are equal in all three sections, which is plain
  // rope over the same frequencies.
  rope_ = make_rope_params(c, false);
  weight_bytes_ = L.bytes() + R.bytes();
}

std::vector<Tensor*> Qwen3NextModel::scratch_tensors() {
  return {&s_.x, &s_.h, &s_.o, &s_.gate, &s_.up, &s_.act, &s_.router, &s_.moe_in, &s_.moe_gate, &s_.moe_up,
          &s_.moe_act, &s_.moe_out, &s_.moe_acc, &s_.shared_gate, &s_.final_rows, &s_.logits, &ds_.qkv, &ds_.z,
          &ds_.ba, &ds_.conv, &ds_.y, &ds_.normed, &as_.q, &as_.gate, &as_.k, &as_.v, &as_.att};
}

void Qwen3NextModel::free_scratch() {
  for (Tensor* t : scratch_tensors())
    if (t->data) b_.free(*t);
  s_.max_rows = 0;
}

void Qwen3NextModel::reserve(int max_rows) {
  if (max_rows <= s_.max_rows) return;
  free_scratch();
  const auto& c = config_;
  const int64_t R = max_rows, H = c.hidden_size, hd = c.head_dim;
  const int64_t inter = std::max(c.intermediate_size, c.shared_expert_intermediate_size);
  s_.x = b_.alloc(R, H);
  s_.h = b_.alloc(R, H);
  s_.o = b_.alloc(R, H);
  s_.gate = b_.alloc(R, inter);
  s_.up = b_.alloc(R, inter);
  s_.act = b_.alloc(R, inter);
  if (c.num_experts > 0) alloc_moe_scratch(b_, s_, R, H, c.num_experts, c.moe_intermediate_size, true, true);
  for (const auto& l : layers_) {
    if (!l.delta || ds_.qkv.data) continue;
    const DeltaNetBlock& d = *l.delta;
    const int64_t vd = int64_t{d.p.v_heads} * d.p.v_dim;
    ds_.qkv = b_.alloc(R, d.conv_dim);
    ds_.conv = b_.alloc(R, d.conv_dim);
    ds_.z = b_.alloc(R, vd);
    ds_.y = b_.alloc(R, vd);
    ds_.normed = b_.alloc(R, vd);
    ds_.ba = b_.alloc(R, 2 * int64_t{d.p.v_heads});
  }
  if (n_attn_ > 0) {
    as_.q = b_.alloc(R, c.num_attention_heads * hd);
    as_.gate = b_.alloc(R, c.num_attention_heads * hd);
    as_.att = b_.alloc(R, c.num_attention_heads * hd);
    as_.k = b_.alloc(R, c.num_key_value_heads * hd);
    as_.v = b_.alloc(R, c.num_key_value_heads * hd);
  }
  s_.max_logit_rows = static_cast<int>(std::min<int64_t>(R, 64));
  s_.final_rows = b_.alloc(s_.max_logit_rows, H);
  s_.logits = b_.alloc(s_.max_logit_rows, c.vocab_size);
  s_.max_rows = max_rows;
}

void Qwen3NextModel::forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits,
                             std::vector<int32_t>& sampled) {
  const int m = static_cast<int>(in.tokens.size());
  check_round(in, s_.max_rows, vocab_size());
  TF_CHECK(state_floats_ == 0 || (!in.states.empty() && in.states.slot_floats == state_floats_), "forward: ",
           family_, " needs recurrent state slots of ", state_floats_, " floats (got ",
           in.states.empty() ? 0 : in.states.slot_floats, ")");
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Tensor x = s_.x.slice_rows(0, m), h = s_.h.slice_rows(0, m), o = s_.o.slice_rows(0, m);
  const LmHead lm{*final_norm_, eps, true, lm_head_ ? *lm_head_ : *embed_, vocab_size()};
  model_round(b_, in, x, lm, s_, [&] {
    b_.embed(*embed_, in.tokens.data(), m, x);
    // Each residual add runs with the norm after it (the next layer's input norm).
    if (!layers_.empty()) b_.rmsnorm(x, *layers_[0].input_norm, eps, true, h);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const HybridLayer& L = layers_[l];
      if (L.delta) deltanet_forward(b_, *L.delta, h, o, ds_, in.layout, in.states);
      else gated_attention_forward(b_, *L.attn, rope_, h, o, as_, kv, in.layout);
      b_.add_rmsnorm(x, o, *L.post_attn_norm, eps, true, h);
      if (L.moe) moe_forward(b_, *L.moe, h, o, s_);
      else mlp_forward(b_, *L.mlp, h, o, s_.gate, s_.up, s_.act);
      if (l + 1 < layers_.size()) b_.add_rmsnorm(x, o, *layers_[l + 1].input_norm, eps, true, h);
      else b_.add(x, o);
    }
  }, logits, sampled);
}

}  // namespace

std::unique_ptr<Model> build_qwen3_next(const ModelFiles& files, const HfConfig& cfg, Backend& backend) {
  auto m = std::make_unique<Qwen3NextModel>(cfg, backend, "qwen3_next");
  m->load(files);
  return m;
}

}  // namespace tf
