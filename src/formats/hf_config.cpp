#include "formats/hf_config.h"

#include <cmath>

#include "base/error.h"

namespace tf {

namespace {

using json = nlohmann::json;

constexpr int64_t kMaxDim = int64_t(1) << 24;        // per-dimension size bound
constexpr int64_t kMaxContext = int64_t(1) << 28;

class Fields {
 public:
  Fields(const json& j, const std::string& source) : j_(j), src_(source) {}

  bool has(const std::string& k) const { return j_.contains(k) && !j_[k].is_null(); }
  const json& at(const std::string& k) const { return j_[k]; }
  const json& root() const { return j_; }

  // An integer in [lo, hi]; absent or null gives `fallback`, or an error when required.
  int64_t integer(const std::string& k, int64_t lo, int64_t hi, bool required, int64_t fallback = 0) const {
    if (!has(k)) {
      TF_CHECK(!required, src_, ": required field '", k, "' is missing");
      return fallback;
    }
    return to_int(j_[k], k, lo, hi);
  }
  int64_t to_int(const json& v, const std::string& k, int64_t lo, int64_t hi) const {
    int64_t x = 0;
    if (v.is_number_unsigned()) {
      uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(hi)) fail(src_, ": field '", k, "' = ", u, " is above the limit ", hi);
      x = static_cast<int64_t>(u);
    } else if (v.is_number_integer()) {
      x = v.get<int64_t>();
    } else if (v.is_number_float() && std::isfinite(v.get<double>()) && v.get<double>() == std::floor(v.get<double>()) &&
               std::fabs(v.get<double>()) < 9e15) {
      x = static_cast<int64_t>(v.get<double>());
    } else {
      fail(src_, ": field '", k, "' must be an integer, got ", v.dump());
    }
    if (x < lo || x > hi) fail(src_, ": field '", k, "' = ", x, " is outside [", lo, ", ", hi, "]");
    return x;
  }
  double number(const std::string& k, double lo, double hi, double fallback) const {
    if (!has(k)) return fallback;
    const json& v = j_[k];
    TF_CHECK(v.is_number(), src_, ": field '", k, "' must be a number, got ", v.dump());
    double x = v.get<double>();
    TF_CHECK(std::isfinite(x) && x >= lo && x <= hi, src_, ": field '", k, "' = ", x, " is outside [", lo,
             ", ", hi, "]");
    return x;
  }
  bool boolean(const std::string& k, bool fallback) const {
    if (!has(k)) return fallback;
    TF_CHECK(j_[k].is_boolean(), src_, ": field '", k, "' must be true or false, got ", j_[k].dump());
    return j_[k].get<bool>();
  }
  std::string string(const std::string& k) const {
    if (!has(k)) return "";
    TF_CHECK(j_[k].is_string(), src_, ": field '", k, "' must be a string, got ", j_[k].dump());
    return j_[k].get<std::string>();
  }

 private:
  const json& j_;
  const std::string& src_;
};

std::vector<int64_t> token_ids(const Fields& f, const std::string& k, const std::string& src) {
  std::vector<int64_t> out;
  if (!f.has(k)) return out;
  const json& v = f.at(k);
  if (v.is_array()) {
    for (const auto& e : v) out.push_back(f.to_int(e, k, 0, INT32_MAX));
  } else {
    out.push_back(f.to_int(v, k, 0, INT32_MAX));
  }
  return out;
}

RopeScaling parse_rope(const Fields& top, const std::string& src, int64_t max_pos) {
  RopeScaling r;
  const json* params = nullptr;
  if (top.has("rope_parameters")) {
    params = &top.at("rope_parameters");
    TF_CHECK(params->is_object(), src, ": field 'rope_parameters' must be an object");
    // Models with several layer types keep one set per type; full attention is the main one.
    if (!params->contains("rope_type") && !params->contains("rope_theta") && params->contains("full_attention"))
      params = &(*params)["full_attention"];
    TF_CHECK(params->is_object(), src, ": field 'rope_parameters.full_attention' must be an object");
  } else if (top.has("rope_scaling")) {
    params = &top.at("rope_scaling");
    TF_CHECK(params->is_object(), src, ": field 'rope_scaling' must be an object or null");
  }
  static const json kEmpty = json::object();
  const std::string where = params == nullptr ? "" : (top.has("rope_parameters") ? "rope_parameters" : "rope_scaling");
  const std::string psrc = where.empty() ? src : cat(src, " ", where);
  Fields p(params ? *params : kEmpty, psrc);

  std::string type = p.string("rope_type");
  if (type.empty()) type = p.string("type");
  if (type.empty()) type = "default";
  r.type = type;
  r.theta = p.has("rope_theta") ? p.number("rope_theta", 1e-9, 1e12, 0) : top.number("rope_theta", 1e-9, 1e12, 10000.0);
  r.partial_rotary_factor = p.has("partial_rotary_factor") ? p.number("partial_rotary_factor", 1e-9, 1.0, 1.0)
                                                           : top.number("partial_rotary_factor", 1e-9, 1.0, 1.0);
  if (type == "default") return r;
  if (type != "linear" && type != "dynamic" && type != "llama3" && type != "yarn")
    fail(psrc, ": rope type '", type, "' is not supported (default, linear, dynamic, llama3, yarn)");
  TF_CHECK(p.has("factor"), psrc, ": rope type '", type, "' needs field 'factor'");
  r.factor = p.number("factor", 1e-6, 1e6, 1.0);
  if (type == "llama3") {
    r.low_freq_factor = p.number("low_freq_factor", 1e-9, 1e6, 1.0);
    r.high_freq_factor = p.number("high_freq_factor", 1e-9, 1e6, 4.0);
    TF_CHECK(r.high_freq_factor > r.low_freq_factor, psrc, ": high_freq_factor ", r.high_freq_factor,
             " must exceed low_freq_factor ", r.low_freq_factor);
    r.original_max_position_embeddings = p.integer("original_max_position_embeddings", 1, kMaxContext, true);
  } else if (type == "yarn") {
    r.original_max_position_embeddings =
        p.integer("original_max_position_embeddings", 1, kMaxContext, false, max_pos);
    r.beta_fast = p.number("beta_fast", 1e-9, 1e6, 32.0);
    r.beta_slow = p.number("beta_slow", 1e-9, 1e6, 1.0);
    r.attention_factor = p.number("attention_factor", 0, 1e6, 0.0);
  }
  return r;
}

}  // namespace

HfConfig parse_hf_config(const json& j, const std::string& source) {
  TF_CHECK(j.is_object(), source, ": config is not a JSON object");
  HfConfig c;
  c.raw = j;
  Fields top(j, source);
  // Multimodal configs keep the language model's sizes under text_config.
  const bool nested = j.contains("text_config") && j["text_config"].is_object() && !j.contains("hidden_size");
  const std::string tsrc = nested ? cat(source, " text_config") : source;
  Fields f(nested ? j["text_config"] : j, tsrc);

  if (top.has("architectures")) {
    const json& a = j["architectures"];
    TF_CHECK(a.is_array() && !a.empty() && a[0].is_string(), source,
             ": field 'architectures' must be a non-empty list of strings");
    c.architecture = a[0].get<std::string>();
  }
  c.model_type = f.string("model_type");
  if (c.model_type.empty()) c.model_type = top.string("model_type");

  c.hidden_size = f.integer("hidden_size", 1, kMaxDim, true);
  // Hybrid configs (Nemotron-H) may give the layer count only as a list or pattern of layer kinds.
  int64_t listed_layers = 0;
  if (f.has("layers_block_type") && f.at("layers_block_type").is_array())
    listed_layers = static_cast<int64_t>(f.at("layers_block_type").size());
  else if (f.has("hybrid_override_pattern") && f.at("hybrid_override_pattern").is_string())
    listed_layers = static_cast<int64_t>(f.at("hybrid_override_pattern").get<std::string>().size());
  c.num_hidden_layers = f.integer("num_hidden_layers", 1, kMaxLayers, listed_layers == 0, listed_layers);
  TF_CHECK(c.num_hidden_layers >= 1 && c.num_hidden_layers <= kMaxLayers, tsrc, ": ", c.num_hidden_layers,
           " layers is outside [1, ", kMaxLayers, "]");
  c.num_attention_heads = f.integer("num_attention_heads", 1, kMaxDim, true);
  c.num_key_value_heads = f.integer("num_key_value_heads", 1, kMaxDim, false, c.num_attention_heads);
  TF_CHECK(c.num_attention_heads % c.num_key_value_heads == 0, tsrc, ": num_key_value_heads ",
           c.num_key_value_heads, " does not divide num_attention_heads ", c.num_attention_heads);
  if (f.has("head_dim")) {
    c.head_dim = f.integer("head_dim", 1, kMaxDim, true);
  } else {
    TF_CHECK(c.hidden_size % c.num_attention_heads == 0, tsrc, ": num_attention_heads ",
             c.num_attention_heads, " does not divide hidden_size ", c.hidden_size, " (and no head_dim given)");
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.intermediate_size = f.integer("intermediate_size", 1, kMaxDim, false);
  c.vocab_size = f.integer("vocab_size", 1, kMaxDim, true);
  c.max_position_embeddings = f.integer("max_position_embeddings", 1, kMaxContext, false);
  if (f.has("rms_norm_eps")) c.rms_norm_eps = f.number("rms_norm_eps", 0, 1, 1e-6);
  else if (f.has("layer_norm_eps")) c.rms_norm_eps = f.number("layer_norm_eps", 0, 1, 1e-6);
  else if (f.has("layer_norm_epsilon")) c.rms_norm_eps = f.number("layer_norm_epsilon", 0, 1, 1e-6);
  else if (f.has("norm_epsilon")) c.rms_norm_eps = f.number("norm_epsilon", 0, 1, 1e-6);
  TF_CHECK(c.rms_norm_eps > 0, tsrc, ": rms_norm_eps must be positive");
  // transformers reads tying and generation ids from the outer config; text_config is the fallback.
  c.tie_word_embeddings = top.has("tie_word_embeddings") ? top.boolean("tie_word_embeddings", false)
                                                         : f.boolean("tie_word_embeddings", false);
  c.attention_bias = f.boolean("attention_bias", false);
  c.mlp_bias = f.boolean("mlp_bias", false);
  c.sliding_window = f.integer("sliding_window", 0, kMaxContext, false);
  c.rope = parse_rope(f, tsrc, c.max_position_embeddings);

  for (const char* k : {"num_experts", "num_local_experts", "n_routed_experts"}) {
    if (f.has(k)) {
      c.num_experts = f.integer(k, 0, 1 << 16, true);
      break;
    }
  }
  if (c.num_experts > 0) {
    c.num_experts_per_tok = f.integer("num_experts_per_tok", 1, c.num_experts, true);
    c.moe_intermediate_size = f.integer("moe_intermediate_size", 1, kMaxDim, false);
    c.shared_expert_intermediate_size = f.integer("shared_expert_intermediate_size", 0, kMaxDim, false);
    c.norm_topk_prob = f.boolean("norm_topk_prob", false);
    c.decoder_sparse_step = f.integer("decoder_sparse_step", 1, c.num_hidden_layers, false, 1);
    if (f.has("mlp_only_layers")) {
      TF_CHECK(f.at("mlp_only_layers").is_array(), tsrc, ": field 'mlp_only_layers' must be a list");
      for (const auto& e : f.at("mlp_only_layers"))
        c.mlp_only_layers.push_back(f.to_int(e, "mlp_only_layers", 0, c.num_hidden_layers - 1));
    }
  }

  c.bos_token_ids = token_ids(top.has("bos_token_id") ? top : f, "bos_token_id", tsrc);
  c.eos_token_ids = token_ids(top.has("eos_token_id") ? top : f, "eos_token_id", tsrc);
  for (const auto* ids : {&c.bos_token_ids, &c.eos_token_ids}) {
    for (int64_t id : *ids)
      TF_CHECK(id < c.vocab_size, tsrc, ": special token id ", id, " is not below vocab_size ", c.vocab_size);
  }
  c.torch_dtype = f.has("dtype") ? f.string("dtype") : f.string("torch_dtype");
  if (c.torch_dtype.empty()) c.torch_dtype = top.has("dtype") ? top.string("dtype") : top.string("torch_dtype");
  return c;
}

}  // namespace tf
