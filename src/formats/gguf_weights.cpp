#include "formats/gguf_weights.h"

#include <cstring>

#include "base/error.h"
#include "formats/gguf_hybrid.h"

namespace tf {

namespace {

struct NameRule {
  const char* gguf;
  const char* hf;
};

constexpr NameRule kBlockRules[] = {
    {"attn_norm", "input_layernorm"},
    {"attn_q", "self_attn.q_proj"},
    {"attn_k", "self_attn.k_proj"},
    {"attn_v", "self_attn.v_proj"},
    {"attn_output", "self_attn.o_proj"},
    {"attn_q_norm", "self_attn.q_norm"},
    {"attn_k_norm", "self_attn.k_norm"},
    {"ffn_norm", "post_attention_layernorm"},
    {"ffn_gate", "mlp.gate_proj"},
    {"ffn_up", "mlp.up_proj"},
    {"ffn_down", "mlp.down_proj"},
    {"ffn_gate_inp", "mlp.gate"},
    {"ffn_gate_shexp", "mlp.shared_expert.gate_proj"},
    {"ffn_up_shexp", "mlp.shared_expert.up_proj"},
    {"ffn_down_shexp", "mlp.shared_expert.down_proj"},
    {"ffn_gate_inp_shexp", "mlp.shared_expert_gate"},
};

constexpr NameRule kExpertRules[] = {
    {"ffn_gate_exps", "gate_proj"},
    {"ffn_up_exps", "up_proj"},
    {"ffn_down_exps", "down_proj"},
};

// Splits "blk.N.base.suffix" into N, base and suffix; false for other names.
bool split_block_name(const std::string& name, std::string* layer, std::string* base, std::string* suffix) {
  if (name.rfind("blk.", 0) != 0) return false;
  size_t dot1 = name.find('.', 4);
  if (dot1 == std::string::npos || dot1 == 4) return false;
  for (size_t i = 4; i < dot1; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
  }
  size_t dot2 = name.rfind('.');
  if (dot2 <= dot1 + 1) return false;
  *layer = name.substr(4, dot1 - 4);
  *base = name.substr(dot1 + 1, dot2 - dot1 - 1);
  *suffix = name.substr(dot2 + 1);
  return true;
}

}  // namespace

std::string gguf_to_hf_name(const std::string& n) {
  if (n == "token_embd.weight") return "model.embed_tokens.weight";
  if (n == "output_norm.weight") return "model.norm.weight";
  if (n == "output.weight") return "lm_head.weight";
  std::string layer, base, suffix;
  if (!split_block_name(n, &layer, &base, &suffix)) return n;
  for (const auto& r : kBlockRules) {
    if (base == r.gguf) return cat("model.layers.", layer, ".", r.hf, ".", suffix);
  }
  return n;
}

GgufWeights::GgufWeights(std::shared_ptr<GgufFile> file) : file_(std::move(file)) {
  const std::string& path = file_->path();
  auto add = [&](TensorView v) {
    const std::string name = v.name;
    TF_CHECK(views_.emplace(name, std::move(v)).second, path, ": two tensors map to the name '", name, "'");
  };
  if (gguf_is_hybrid(file_->get_string("general.architecture", ""))) {
    gguf_hybrid_views(*file_, owned_, add);
    return;
  }
  for (const auto& gname : file_->names()) {
    const TensorView& t = *file_->find(gname);
    std::string layer, base, suffix;
    const NameRule* expert = nullptr;
    if (split_block_name(gname, &layer, &base, &suffix)) {
      for (const auto& r : kExpertRules) {
        if (base == r.gguf) expert = &r;
      }
    }
    if (!expert) {
      TensorView v = t;
      v.name = gguf_to_hf_name(gname);
      add(std::move(v));
      continue;
    }
    TF_CHECK(t.shape.size() == 3, path, ": tensor '", gname, "': expert tensors must have 3 dimensions, not ",
             t.shape.size());
    const int64_t n_expert = t.shape[0];
    TF_CHECK(n_expert >= 1, path, ": tensor '", gname, "': no experts");
    const uint64_t slice = t.nbytes / static_cast<uint64_t>(n_expert);
    for (int64_t e = 0; e < n_expert; ++e) {
      TensorView v;
      v.name = cat("model.layers.", layer, ".mlp.experts.", e, ".", expert->hf, ".", suffix);
      v.dtype = t.dtype;
      v.shape = {t.shape[1], t.shape[2]};
      v.data = t.data + static_cast<uint64_t>(e) * slice;
      v.nbytes = slice;
      add(std::move(v));
    }
  }
}

const TensorView* GgufWeights::find(const std::string& name) const {
  auto it = views_.find(name);
  return it == views_.end() ? nullptr : &it->second;
}

std::vector<std::string> GgufWeights::names() const {
  std::vector<std::string> out;
  out.reserve(views_.size());
  for (const auto& [name, v] : views_) out.push_back(name);
  return out;
}

nlohmann::json gguf_hf_config(const GgufFile& g, const WeightSource& w) {
  const std::string& path = g.path();
  const std::string arch = g.get_string("general.architecture", "");
  TF_CHECK(!arch.empty(), path, ": metadata key 'general.architecture' is missing");
  if (gguf_is_hybrid(arch)) return gguf_hybrid_config(g, w);
  struct ArchInfo {
    const char* gguf;
    const char* hf_class;
    const char* model_type;
  };
  static const ArchInfo kArchs[] = {
      {"llama", "LlamaForCausalLM", "llama"},
      {"qwen2", "Qwen2ForCausalLM", "qwen2"},
      {"qwen3", "Qwen3ForCausalLM", "qwen3"},
      {"qwen3moe", "Qwen3MoeForCausalLM", "qwen3_moe"},
  };
  const ArchInfo* info = nullptr;
  for (const auto& a : kArchs) {
    if (arch == a.gguf) info = &a;
  }
  if (!info) fail(path, ": general.architecture '", arch, "' is not supported (llama, qwen2, qwen3, qwen3moe)",
                  " nor a hybrid one (nemotron_h, nemotron_h_moe, qwen3next, qwen35, qwen35moe)");

  auto key = [&](const char* k) { return cat(arch, ".", k); };
  auto required = [&](const char* k) {
    const std::string full = key(k);
    TF_CHECK(g.find_meta(full), path, ": metadata key '", full, "' is missing");
    return g.get_int(full, 0);
  };
  nlohmann::json c = nlohmann::json::object();
  c["architectures"] = {info->hf_class};
  c["model_type"] = info->model_type;
  c["hidden_size"] = required("embedding_length");
  c["num_hidden_layers"] = required("block_count");
  const int64_t heads = required("attention.head_count");
  c["num_attention_heads"] = heads;
  c["num_key_value_heads"] = g.get_int(key("attention.head_count_kv"), heads);
  if (g.find_meta(key("feed_forward_length"))) c["intermediate_size"] = g.get_int(key("feed_forward_length"), 0);
  if (g.find_meta(key("attention.key_length"))) c["head_dim"] = g.get_int(key("attention.key_length"), 0);
  if (g.find_meta(key("context_length"))) c["max_position_embeddings"] = g.get_int(key("context_length"), 0);
  c["rms_norm_eps"] = g.get_float(key("attention.layer_norm_rms_epsilon"), 1e-6);
  c["rope_theta"] = g.get_float(key("rope.freq_base"), 10000.0);
  const std::string scaling = g.get_string(key("rope.scaling.type"), "none");
  if (scaling == "none") {
    c["rope_scaling"] = nullptr;
  } else {
    nlohmann::json rs = {{"rope_type", scaling}, {"factor", g.get_float(key("rope.scaling.factor"), 1.0)}};
    if (g.find_meta(key("rope.scaling.original_context_length")))
      rs["original_max_position_embeddings"] = g.get_int(key("rope.scaling.original_context_length"), 0);
    c["rope_scaling"] = rs;
  }
  // Partial rotary: rope.dimension_count below the head size.
  if (g.find_meta(key("rope.dimension_count"))) {
    const int64_t hd = c.contains("head_dim") ? c["head_dim"].get<int64_t>()
                                              : (heads > 0 ? c["hidden_size"].get<int64_t>() / heads : 0);
    const int64_t rot = g.get_int(key("rope.dimension_count"), 0);
    if (hd > 0 && rot > 0 && rot < hd) c["partial_rotary_factor"] = static_cast<double>(rot) / hd;
  }
  const GgufValue* tokens = g.find_meta("tokenizer.ggml.tokens");
  if (tokens) {
    TF_CHECK(tokens->type == GgufType::ARRAY, path, ": tokenizer.ggml.tokens is not an array");
    c["vocab_size"] = tokens->arr.size();
  } else if (const TensorView* emb = w.find("model.embed_tokens.weight")) {
    c["vocab_size"] = emb->shape.empty() ? 0 : emb->shape[0];
  }
  c["tie_word_embeddings"] = w.find("lm_head.weight") == nullptr;
  c["attention_bias"] = w.find("model.layers.0.self_attn.q_proj.bias") != nullptr;
  if (g.find_meta(key("expert_count"))) {
    c["num_experts"] = g.get_int(key("expert_count"), 0);
    c["num_experts_per_tok"] = g.get_int(key("expert_used_count"), 0);
    if (g.find_meta(key("expert_feed_forward_length")))
      c["moe_intermediate_size"] = g.get_int(key("expert_feed_forward_length"), 0);
    if (g.find_meta(key("expert_shared_feed_forward_length")))
      c["shared_expert_intermediate_size"] = g.get_int(key("expert_shared_feed_forward_length"), 0);
    c["norm_topk_prob"] = arch == "qwen3moe";
  }
  if (g.find_meta("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = g.get_int("tokenizer.ggml.bos_token_id", 0);
  if (g.find_meta("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = g.get_int("tokenizer.ggml.eos_token_id", 0);
  // llama.cpp's converter permutes llama's Q and K rows for interleaved-pair rotary.
  c["tf_rope_interleaved"] = arch == "llama";
  return c;
}

}  // namespace tf
