// Nemotron-H family (transformers NemotronHForCausalLM): a stack of pre-norm residual layers, each
// one mixer: Mamba2, attention without rotary embedding, a relu2 MLP, or a MoE of relu2 experts
// with a grouped sigmoid router and a shared expert. Layer kinds come from layers_block_type (or
// the older hybrid_override_pattern string).
#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "formats/model_files.h"
#include "models/mamba2.h"
#include "models/model.h"

namespace tf {

namespace {

using json = nlohmann::json;

enum class Kind { Mamba, Attention, Mlp, Moe };

struct Layer {
  Kind kind = Kind::Mlp;
  WeightPtr norm;
  std::unique_ptr<Mamba2Block> mamba;
  AttentionBlock attn;
  std::unique_ptr<MlpBlock> mlp;
  std::unique_ptr<MoeBlock> moe;
  int kv_layer = -1;       // ordinal among attention layers
  int64_t state_off = 0;   // offset of a Mamba layer's part of a state slot
};

// The first of `keys` present (HF accepts older mamba_* names), an integer in [lo, hi].
int64_t raw_int(const json& j, std::initializer_list<const char*> keys, int64_t fallback, int64_t lo, int64_t hi,
                const std::string& src) {
  for (const char* k : keys) {
    if (!j.contains(k) || j[k].is_null()) continue;
    const json& v = j[k];
    TF_CHECK(v.is_number_integer() || v.is_number_unsigned(), src, ": field '", k, "' must be an integer, got ",
             v.dump());
    const double d = v.get<double>();
    TF_CHECK(d >= static_cast<double>(lo) && d <= static_cast<double>(hi), src, ": field '", k, "' = ", v.dump(),
             " is outside [", lo, ", ", hi, "]");
    return v.get<int64_t>();
  }
  return fallback;
}

double raw_num(const json& j, std::initializer_list<const char*> keys, double fallback, double lo, double hi,
               const std::string& src) {
  for (const char* k : keys) {
    if (!j.contains(k) || j[k].is_null()) continue;
    TF_CHECK(j[k].is_number(), src, ": field '", k, "' must be a number, got ", j[k].dump());
    const double d = j[k].get<double>();
    TF_CHECK(std::isfinite(d) && d >= lo && d <= hi, src, ": field '", k, "' = ", d, " is outside [", lo, ", ", hi,
             "]");
    return d;
  }
  return fallback;
}

bool raw_bool(const json& j, std::initializer_list<const char*> keys, bool fallback, const std::string& src) {
  for (const char* k : keys) {
    if (!j.contains(k) || j[k].is_null()) continue;
    TF_CHECK(j[k].is_boolean(), src, ": field '", k, "' must be true or false, got ", j[k].dump());
    return j[k].get<bool>();
  }
  return fallback;
}

std::string raw_str(const json& j, const char* k, const std::string& fallback, const std::string& src) {
  if (!j.contains(k) || j[k].is_null()) return fallback;
  TF_CHECK(j[k].is_string(), src, ": field '", k, "' must be a string, got ", j[k].dump());
  return j[k].get<std::string>();
}

// transformers: layers_block_type wins; else hybrid_override_pattern (M mamba, * attention, - mlp, E moe).
std::vector<Kind> layer_kinds(const json& j, const std::string& src) {
  std::vector<Kind> out;
  if (j.contains("layers_block_type") && !j["layers_block_type"].is_null()) {
    const json& a = j["layers_block_type"];
    TF_CHECK(a.is_array() && !a.empty(), src, ": field 'layers_block_type' must be a non-empty list");
    for (const auto& e : a) {
      TF_CHECK(e.is_string(), src, ": layers_block_type entry ", e.dump(), " is not a string");
      const std::string t = e.get<std::string>();
      if (t == "mamba" || t == "linear_attention") out.push_back(Kind::Mamba);
      else if (t == "attention" || t == "full_attention") out.push_back(Kind::Attention);
      else if (t == "mlp") out.push_back(Kind::Mlp);
      else if (t == "moe") out.push_back(Kind::Moe);
      else fail(src, ": layers_block_type entry '", t, "' is not mamba, attention, mlp or moe");
    }
  } else if (j.contains("hybrid_override_pattern") && j["hybrid_override_pattern"].is_string()) {
    for (char c : j["hybrid_override_pattern"].get<std::string>()) {
      if (c == 'M') out.push_back(Kind::Mamba);
      else if (c == '*') out.push_back(Kind::Attention);
      else if (c == '-') out.push_back(Kind::Mlp);
      else if (c == 'E') out.push_back(Kind::Moe);
      else fail(src, ": hybrid_override_pattern character '", std::string(1, c), "' is not one of M * - E");
    }
    TF_CHECK(!out.empty(), src, ": hybrid_override_pattern is empty");
  } else {
    fail(src, ": nemotron_h needs 'layers_block_type' or 'hybrid_override_pattern'");
  }
  TF_CHECK(out.size() <= 4096, src, ": ", out.size(), " layers is too many");
  if (j.contains("num_hidden_layers") && j["num_hidden_layers"].is_number())
    TF_CHECK(j["num_hidden_layers"].get<double>() == static_cast<double>(out.size()), src, ": num_hidden_layers ",
             j["num_hidden_layers"].dump(), " disagrees with the ", out.size(), " layers of the layer pattern");
  return out;
}

Act parse_act(const std::string& a, const std::string& src, const char* field) {
  if (a == "relu2") return Act::Relu2;
  if (a == "silu" || a == "swish") return Act::SiLU;
  if (a == "gelu_pytorch_tanh") return Act::GeluTanh;
  fail(src, ": ", field, " '", a, "' is not supported (relu2, silu, gelu_pytorch_tanh)");
}

MlpBlock plain_mlp(WeightLoader& L, const std::string& p, int64_t H, int64_t I, Act act) {
  MlpBlock m;
  m.up = L.matrix(p + "up_proj.weight", I, H);
  m.down = L.matrix(p + "down_proj.weight", H, I);
  TF_CHECK(!L.has(p + "up_proj.bias") && !L.has(p + "down_proj.bias"), p, ": mlp biases are not supported");
  m.act = act;
  m.inter = I;
  return m;
}

class NemotronHModel : public Model {
 public:
  NemotronHModel(const HfConfig& cfg, Backend& b) : b_(b) {
    config_ = cfg;
    family_ = "nemotron_h";
  }
  ~NemotronHModel() override { free_scratch(); }

  int n_kv_layers() const override { return n_attn_; }
  int64_t state_floats() const override { return state_floats_; }
  void reserve(int max_rows) override;
  using Model::forward;
  void forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits, std::vector<int32_t>& sampled) override;

  void load(const ModelFiles& files);

 private:
  void free_scratch();
  Backend& b_;
  WeightPtr embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  int n_attn_ = 0;
  int64_t state_floats_ = 0;
  int64_t shared_inter_ = 0;
  Scratch s_;
  Mamba2Scratch ms_;
};

void NemotronHModel::load(const ModelFiles& files) {
  const json& j = config_.raw;
  const std::string src = files.path + "/config.json";
  const std::vector<Kind> kinds = layer_kinds(j, src);
  config_.num_hidden_layers = static_cast<int64_t>(kinds.size());
  const int64_t H = config_.hidden_size;
  // transformers' NemotronHConfig: head_dim defaults to 128, not hidden_size / heads.
  if (!j.contains("head_dim") || j["head_dim"].is_null()) config_.head_dim = 128;
  WeightLoader L(*files.weights, b_);
  const std::string P = L.has("backbone.embeddings.weight") ? "backbone." : "model.";
  embed_ = L.matrix(P + "embeddings.weight", config_.vocab_size, H);
  final_norm_ = L.vector(P + "norm_f.weight", H);
  if (L.has("lm_head.weight") && !config_.tie_word_embeddings)
    lm_head_ = L.matrix("lm_head.weight", config_.vocab_size, H);
  else
    TF_CHECK(config_.tie_word_embeddings, src, ": tensor lm_head.weight is missing and tie_word_embeddings is false");

  Mamba2Sizes ms;
  ms.hidden = H;
  ms.p.heads = static_cast<int>(raw_int(j, {"mamba_num_heads"}, 128, 1, 1 << 16, src));
  ms.p.head_dim = static_cast<int>(raw_int(j, {"mamba_head_dim"}, 64, 1, 1 << 16, src));
  ms.p.groups = static_cast<int>(raw_int(j, {"mamba_n_groups", "n_groups"}, 8, 1, 1 << 16, src));
  ms.p.state_size = static_cast<int>(raw_int(j, {"ssm_state_size"}, 128, 1, 1 << 16, src));
  ms.p.chunk = static_cast<int>(raw_int(j, {"mamba_chunk_size", "chunk_size"}, 128, 1, 4096, src));
  // transformers' mixer clamps dt to [time_step_min, inf) whatever time_step_limit says.
  ms.p.dt_min = static_cast<float>(raw_num(j, {"mamba_dt_min", "time_step_min"}, 0.001, 0, 1e6, src));
  ms.p.dt_max = 0.0f;
  ms.conv_k = raw_int(j, {"mamba_d_conv", "conv_kernel"}, 4, 1, 1024, src);
  ms.conv_bias = raw_bool(j, {"mamba_conv_bias", "use_conv_bias"}, true, src);
  ms.eps = static_cast<float>(config_.rms_norm_eps);
  TF_CHECK(raw_str(j, "mamba_hidden_act", "silu", src) == "silu", src, ": mamba_hidden_act '",
           raw_str(j, "mamba_hidden_act", "silu", src), "' is not supported (silu)");
  TF_CHECK(ms.p.heads % ms.p.groups == 0, src, ": n_groups ", ms.p.groups, " does not divide mamba_num_heads ",
           ms.p.heads);
  const Act act = parse_act(raw_str(j, "mlp_hidden_act", "relu2", src), src, "mlp_hidden_act");
  const bool any_moe = std::count(kinds.begin(), kinds.end(), Kind::Moe) > 0;
  TF_CHECK(!any_moe || (!j.contains("moe_latent_size") || j["moe_latent_size"].is_null()), src,
           ": moe_latent_size (latent expert projections) is not supported");
  shared_inter_ = raw_int(j, {"moe_shared_expert_intermediate_size"}, 7688, 1, 1 << 24, src);

  for (size_t i = 0; i < kinds.size(); ++i) {
    const std::string p = cat(P, "layers.", i, ".");
    const std::string mp = p + "mixer.";
    Layer layer;
    layer.kind = kinds[i];
    layer.norm = L.vector(p + "norm.weight", H);
    switch (layer.kind) {
      case Kind::Mamba:
        layer.mamba = std::make_unique<Mamba2Block>(load_mamba2(L, mp, ms));
        layer.state_off = state_floats_;
        state_floats_ += layer.mamba->state_floats();
        break;
      case Kind::Attention:
        layer.attn = load_attention(L, mp, config_, /*qk_norm=*/false);
        layer.kv_layer = n_attn_++;
        break;
      case Kind::Mlp:
        TF_CHECK(config_.intermediate_size > 0, src, ": an mlp layer needs intermediate_size");
        layer.mlp = std::make_unique<MlpBlock>(plain_mlp(L, mp, H, config_.intermediate_size, act));
        break;
      case Kind::Moe: {
        const int64_t E = config_.num_experts, I = config_.moe_intermediate_size;
        TF_CHECK(E > 0 && I > 0 && config_.num_experts_per_tok > 0, src,
                 ": a moe layer needs n_routed_experts, moe_intermediate_size and num_experts_per_tok");
        auto m = std::make_unique<MoeBlock>();
        m->router = L.matrix(mp + "gate.weight", E, H);
        m->router_bias = L.optional_vector(mp + "gate.e_score_correction_bias", E);
        m->sigmoid = true;
        m->top_k = static_cast<int>(config_.num_experts_per_tok);
        m->norm_topk = raw_bool(j, {"norm_topk_prob"}, true, src);
        m->n_group = static_cast<int>(raw_int(j, {"n_group"}, 1, 1, E, src));
        m->topk_group = static_cast<int>(raw_int(j, {"topk_group"}, 1, 1, m->n_group, src));
        m->routed_scale = static_cast<float>(raw_num(j, {"routed_scaling_factor"}, 1.0, 0, 1e6, src));
        TF_CHECK(E % m->n_group == 0 && m->top_k <= m->topk_group * (E / m->n_group), src, ": ", E,
                 " experts in n_group ", m->n_group, " groups leave fewer than num_experts_per_tok ", m->top_k,
                 " in the best topk_group ", m->topk_group);
        m->inter = I;
        const bool stacked = L.has(mp + "experts.up_proj");
        for (int64_t e = 0; e < E; ++e) {
          if (stacked) {
            MlpBlock x;
            x.up = L.expert_slice(mp + "experts.up_proj", E, e, I, 0, I, H);
            x.down = L.expert_slice(mp + "experts.down_proj", E, e, H, 0, H, I);
            x.act = act;
            x.inter = I;
            m->experts.push_back(std::move(x));
          } else {
            m->experts.push_back(plain_mlp(L, cat(mp, "experts.", e, "."), H, I, act));
          }
        }
        m->shared = std::make_unique<MlpBlock>(plain_mlp(L, mp + "shared_experts.", H, shared_inter_, act));
        index_experts(*m);
        layer.moe = std::move(m);
        break;
      }
    }
    layers_.push_back(std::move(layer));
  }
  weight_bytes_ = L.bytes();
}

void NemotronHModel::free_scratch() {
  for (Tensor* t : {&s_.x, &s_.h, &s_.q, &s_.k, &s_.v, &s_.att, &s_.o, &s_.gate, &s_.up, &s_.act, &s_.down,
                    &s_.router, &s_.moe_in, &s_.moe_gate, &s_.moe_up, &s_.moe_act, &s_.moe_out, &s_.moe_acc,
                    &s_.shared_gate, &s_.final_rows, &s_.logits})
    if (t->data) b_.free(*t);
  free_mamba2_scratch(b_, ms_);
  s_.max_rows = 0;
}

void NemotronHModel::reserve(int max_rows) {
  if (max_rows <= s_.max_rows) return;
  free_scratch();
  const auto& c = config_;
  const int64_t R = max_rows, H = c.hidden_size;
  s_.x = b_.alloc(R, H);
  s_.h = b_.alloc(R, H);
  s_.o = b_.alloc(R, H);
  bool moe = false, dense = false;
  const Mamba2Block* mb = nullptr;
  for (const Layer& l : layers_) {
    moe |= l.kind == Kind::Moe;
    dense |= l.kind == Kind::Mlp;
    if (l.mamba) mb = l.mamba.get();
  }
  if (n_attn_ > 0) {
    s_.q = b_.alloc(R, c.num_attention_heads * c.head_dim);
    s_.att = b_.alloc(R, c.num_attention_heads * c.head_dim);
    s_.k = b_.alloc(R, c.num_key_value_heads * c.head_dim);
    s_.v = b_.alloc(R, c.num_key_value_heads * c.head_dim);
  }
  const int64_t inter = std::max(dense ? c.intermediate_size : 0, moe ? shared_inter_ : 0);
  if (inter > 0) {
    s_.up = b_.alloc(R, inter);
    s_.act = b_.alloc(R, inter);
  }
  if (moe) alloc_moe_scratch(b_, s_, R, H, c.num_experts, c.moe_intermediate_size, false, false);
  if (mb) ms_ = alloc_mamba2_scratch(b_, *mb, R);
  s_.max_logit_rows = static_cast<int>(std::min<int64_t>(R, 64));
  s_.final_rows = b_.alloc(s_.max_logit_rows, H);
  s_.logits = b_.alloc(s_.max_logit_rows, c.vocab_size);
  s_.max_rows = max_rows;
}

void NemotronHModel::forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits,
                             std::vector<int32_t>& sampled) {
  const int m = static_cast<int>(in.tokens.size());
  check_round(in, s_.max_rows, vocab_size());
  TF_CHECK(state_floats_ == 0 || (!in.states.empty() && in.states.slot_floats >= state_floats_),
           "forward: nemotron_h needs recurrent state slots of ", state_floats_, " floats; the round has ",
           in.states.empty() ? 0 : in.states.slot_floats);
  TF_CHECK(n_attn_ == 0 || kv.layers >= n_attn_, "forward: kv storage has ", kv.layers, " layers for ", n_attn_,
           " attention layers");
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Tensor x = s_.x.slice_rows(0, m), h = s_.h.slice_rows(0, m), o = s_.o.slice_rows(0, m);
  const LmHead lm{*final_norm_, eps, false, lm_head_ ? *lm_head_ : *embed_, vocab_size()};
  model_round(b_, in, x, lm, s_, [&] {
    b_.embed(*embed_, in.tokens.data(), m, x);
    static const RopeParams kNoRope{};
    // Each residual add runs with the norm after it (the next layer's).
    if (!layers_.empty()) b_.rmsnorm(x, *layers_[0].norm, eps, false, h);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      switch (L.kind) {
        case Kind::Mamba: mamba2_forward(b_, *L.mamba, h, o, ms_, in.layout, in.states, L.state_off); break;
        case Kind::Attention: attention_forward(b_, L.attn, kNoRope, h, o, s_, kv, L.kv_layer, in.layout); break;
        case Kind::Mlp: mlp_forward(b_, *L.mlp, h, o, s_.gate, s_.up, s_.act); break;
        case Kind::Moe: moe_forward(b_, *L.moe, h, o, s_); break;
      }
      if (l + 1 < layers_.size()) b_.add_rmsnorm(x, o, *layers_[l + 1].norm, eps, false, h);
      else b_.add(x, o);
    }
  }, logits, sampled);
}

}  // namespace

std::unique_ptr<Model> build_nemotron_h(const ModelFiles& files, const HfConfig& cfg, Backend& backend) {
  auto m = std::make_unique<NemotronHModel>(cfg, backend);
  m->load(files);
  return m;
}

}  // namespace tf
