#include "models/transformer.h"

#include <algorithm>

#include "base/error.h"
#include "formats/model_files.h"
#include "models/rope.h"

namespace tf {

TransformerModel::TransformerModel(const HfConfig& cfg, Backend& backend, std::string family)
    : b_(backend) {
  config_ = cfg;
  family_ = std::move(family);
}

TransformerModel::~TransformerModel() { free_scratch(); }

void TransformerModel::load_embeddings(WeightLoader& L) {
  const auto& c = config_;
  embed = L.matrix("model.embed_tokens.weight", c.vocab_size, c.hidden_size);
  final_norm = L.vector("model.norm.weight", c.hidden_size);
  if (L.has("lm_head.weight") && !c.tie_word_embeddings)
    lm_head = L.matrix("lm_head.weight", c.vocab_size, c.hidden_size);
  else
    TF_CHECK(c.tie_word_embeddings, "tensor lm_head.weight is missing and tie_word_embeddings is false");
}

void TransformerModel::free_scratch() {
  for (Tensor* t : {&s_.x, &s_.h, &s_.q, &s_.k, &s_.v, &s_.att, &s_.o, &s_.gate, &s_.up, &s_.act,
                    &s_.down, &s_.router, &s_.moe_in, &s_.moe_gate, &s_.moe_up, &s_.moe_act,
                    &s_.moe_out, &s_.moe_acc, &s_.shared_gate, &s_.final_rows, &s_.logits})
    if (t->data) b_.free(*t);
  s_.max_rows = 0;
}

void TransformerModel::reserve(int max_rows) {
  if (max_rows <= s_.max_rows) return;
  free_scratch();
  const auto& c = config_;
  const int64_t R = max_rows, H = c.hidden_size, hd = c.head_dim;
  int64_t inter = c.intermediate_size;
  if (c.shared_expert_intermediate_size > inter) inter = c.shared_expert_intermediate_size;
  s_.x = b_.alloc(R, H);
  s_.h = b_.alloc(R, H);
  s_.o = b_.alloc(R, H);
  s_.down = b_.alloc(R, H);
  s_.q = b_.alloc(R, c.num_attention_heads * hd);
  s_.att = b_.alloc(R, c.num_attention_heads * hd);
  s_.k = b_.alloc(R, c.num_key_value_heads * hd);
  s_.v = b_.alloc(R, c.num_key_value_heads * hd);
  if (inter > 0) {
    s_.gate = b_.alloc(R, inter);
    s_.up = b_.alloc(R, inter);
    s_.act = b_.alloc(R, inter);
  }
  if (c.num_experts > 0) alloc_moe_scratch(b_, s_, R, H, c.num_experts, c.moe_intermediate_size, true, true);
  s_.max_logit_rows = static_cast<int>(std::min<int64_t>(R, 64));
  s_.final_rows = b_.alloc(s_.max_logit_rows, H);
  s_.logits = b_.alloc(s_.max_logit_rows, c.vocab_size);
  s_.max_rows = max_rows;
}

void TransformerModel::forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits,
                             std::vector<int32_t>& sampled) {
  const int m = static_cast<int>(in.tokens.size());
  check_round(in, s_.max_rows, vocab_size());
  const float eps = static_cast<float>(config_.rms_norm_eps);
  Tensor x = s_.x.slice_rows(0, m), h = s_.h.slice_rows(0, m), o = s_.o.slice_rows(0, m);
  const LmHead lm{*final_norm, eps, false, lm_head ? *lm_head : *embed, vocab_size()};
  model_round(b_, in, x, lm, s_, [&] {
    b_.embed(*embed, in.tokens.data(), m, x);
    // Each residual add runs with the norm after it (the next layer's input norm).
    if (!layers.empty()) b_.rmsnorm(x, *layers[0].input_norm, eps, false, h);
    for (size_t l = 0; l < layers.size(); ++l) {
      const DecoderLayer& L = layers[l];
      attention_forward(b_, L.attn, rope, h, o, s_, kv, static_cast<int>(l), in.layout);
      b_.add_rmsnorm(x, o, *L.post_attn_norm, eps, false, h);
      if (L.moe) moe_forward(b_, *L.moe, h, o, s_);
      else mlp_forward(b_, *L.mlp, h, o, s_.gate, s_.up, s_.act);
      if (l + 1 < layers.size()) b_.add_rmsnorm(x, o, *layers[l + 1].input_norm, eps, false, h);
      else b_.add(x, o);
    }
  }, logits, sampled);
}

std::unique_ptr<TransformerModel> build_decoder(const ModelFiles& files, const HfConfig& cfg, Backend& backend,
                                                const DecoderSpec& spec) {
  auto m = std::make_unique<TransformerModel>(cfg, backend, spec.family);
  WeightLoader L(*files.weights, backend);
  m->load_embeddings(L);
  for (int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
    const std::string p = cat("model.layers.", i, ".");
    DecoderLayer layer;
    layer.input_norm = L.vector(p + "input_layernorm.weight", cfg.hidden_size);
    layer.post_attn_norm = L.vector(p + "post_attention_layernorm.weight", cfg.hidden_size);
    layer.attn = load_attention(L, p + "self_attn.", cfg, spec.qk_norm);
    if (spec.sparse && spec.sparse(i))
      layer.moe = std::make_unique<MoeBlock>(load_moe(L, p + "mlp.", cfg));
    else
      layer.mlp = std::make_unique<MlpBlock>(load_mlp(L, p + "mlp.", cfg.hidden_size, cfg.intermediate_size, cfg.mlp_bias));
    m->layers.push_back(std::move(layer));
  }
  m->rope = make_rope_params(cfg, cfg.raw.value("tf_rope_interleaved", false));
  m->set_weight_bytes(L.bytes());
  return m;
}

}  // namespace tf
