#include "formats/gguf_hybrid.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <algorithm>
#include <map>

#include "base/error.h"
#include "formats/hf_config.h"

namespace tf {

namespace {

// What llama.cpp's converter did to a tensor, undone here.
// The kV* forms also undo qwen35's V-head reorder (grouped by key head -> tiled).
enum class Fx { kNone, kMinusOne, kALog, kConv, kFlat, kUnpermQ, kUnpermK, kVQkv, kVRows, kVHeads, kVALog, kVConv, kVCols };

struct Rule {
  const char* gguf;  // the part after "blk.N."
  const char* hf;    // the part after "<prefix>layers.N."
  Fx fx;
};

constexpr Rule kNemotronRules[] = {
    {"attn_norm.weight", "norm.weight", Fx::kNone},
    {"ssm_in.weight", "mixer.in_proj.weight", Fx::kNone},
    {"ssm_out.weight", "mixer.out_proj.weight", Fx::kNone},
    {"ssm_conv1d.weight", "mixer.conv1d.weight", Fx::kConv},
    {"ssm_conv1d.bias", "mixer.conv1d.bias", Fx::kNone},
    {"ssm_dt.bias", "mixer.dt_bias", Fx::kNone},
    {"ssm_a", "mixer.A_log", Fx::kALog},
    {"ssm_d", "mixer.D", Fx::kFlat},
    {"ssm_norm.weight", "mixer.norm.weight", Fx::kFlat},
    {"attn_q.weight", "mixer.q_proj.weight", Fx::kUnpermQ},
    {"attn_k.weight", "mixer.k_proj.weight", Fx::kUnpermK},
    {"attn_v.weight", "mixer.v_proj.weight", Fx::kNone},
    {"attn_output.weight", "mixer.o_proj.weight", Fx::kNone},
    {"ffn_up.weight", "mixer.up_proj.weight", Fx::kNone},
    {"ffn_down.weight", "mixer.down_proj.weight", Fx::kNone},
    {"ffn_gate_inp.weight", "mixer.gate.weight", Fx::kNone},
    {"exp_probs_b.bias", "mixer.gate.e_score_correction_bias", Fx::kNone},
    {"ffn_up_shexp.weight", "mixer.shared_experts.up_proj.weight", Fx::kNone},
    {"ffn_down_shexp.weight", "mixer.shared_experts.down_proj.weight", Fx::kNone},
};

constexpr Rule kQwenNextRules[] = {
    {"attn_norm.weight", "input_layernorm.weight", Fx::kMinusOne},
    {"post_attention_norm.weight", "post_attention_layernorm.weight", Fx::kMinusOne},
    {"attn_q.weight", "self_attn.q_proj.weight", Fx::kNone},
    {"attn_k.weight", "self_attn.k_proj.weight", Fx::kNone},
    {"attn_v.weight", "self_attn.v_proj.weight", Fx::kNone},
    {"attn_output.weight", "self_attn.o_proj.weight", Fx::kNone},
    {"attn_q_norm.weight", "self_attn.q_norm.weight", Fx::kMinusOne},
    {"attn_k_norm.weight", "self_attn.k_norm.weight", Fx::kMinusOne},
    {"ssm_a", "linear_attn.A_log", Fx::kALog},
    {"ssm_dt.bias", "linear_attn.dt_bias", Fx::kNone},
    {"ssm_conv1d.weight", "linear_attn.conv1d.weight", Fx::kConv},
    {"ssm_norm.weight", "linear_attn.norm.weight", Fx::kNone},
    {"ssm_out.weight", "linear_attn.out_proj.weight", Fx::kNone},
    {"ssm_ba.weight", "linear_attn.in_proj_ba.weight", Fx::kNone},
    {"ffn_gate.weight", "mlp.gate_proj.weight", Fx::kNone},
    {"ffn_up.weight", "mlp.up_proj.weight", Fx::kNone},
    {"ffn_down.weight", "mlp.down_proj.weight", Fx::kNone},
    {"ffn_gate_inp.weight", "mlp.gate.weight", Fx::kNone},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight", Fx::kNone},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight", Fx::kNone},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight", Fx::kNone},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight", Fx::kNone},
};

// qwen35 / qwen35moe: separate in_proj_{qkv,z,b,a} with the V heads reordered.
constexpr Rule kQwen35Rules[] = {
    {"attn_qkv.weight", "linear_attn.in_proj_qkv.weight", Fx::kVQkv},
    {"attn_gate.weight", "linear_attn.in_proj_z.weight", Fx::kVRows},
    {"ssm_beta.weight", "linear_attn.in_proj_b.weight", Fx::kVHeads},
    {"ssm_alpha.weight", "linear_attn.in_proj_a.weight", Fx::kVHeads},
    {"ssm_a", "linear_attn.A_log", Fx::kVALog},
    {"ssm_dt.bias", "linear_attn.dt_bias", Fx::kVHeads},
    {"ssm_conv1d.weight", "linear_attn.conv1d.weight", Fx::kVConv},
    {"ssm_out.weight", "linear_attn.out_proj.weight", Fx::kVCols},
};

constexpr Rule kExpertRules[] = {
    {"ffn_gate_exps.weight", "gate_proj.weight", Fx::kNone},
    {"ffn_up_exps.weight", "up_proj.weight", Fx::kNone},
    {"ffn_down_exps.weight", "down_proj.weight", Fx::kNone},
};

bool is_nemotron(const std::string& arch) { return arch == "nemotron_h" || arch == "nemotron_h_moe"; }
bool is_qwen35(const std::string& arch) { return arch == "qwen35" || arch == "qwen35moe"; }

// "blk.N.rest" -> N and rest.
bool split_block(const std::string& name, int64_t* layer, std::string* rest) {
  if (name.rfind("blk.", 0) != 0) return false;
  const size_t dot = name.find('.', 4);
  if (dot == std::string::npos || dot == 4 || dot - 4 > 6 || dot + 1 >= name.size()) return false;
  int64_t n = 0;
  for (size_t i = 4; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9') return false;
    n = n * 10 + (name[i] - '0');
  }
  *layer = n;
  *rest = name.substr(dot + 1);
  return true;
}

int64_t meta_int(const GgufFile& g, const std::string& key) {
  TF_CHECK(g.find_meta(key), g.path(), ": metadata key '", key, "' is missing");
  return g.get_int(key, 0);
}

// block_count, checked before anything is sized by it.
int64_t block_count(const GgufFile& g, const std::string& arch) {
  const int64_t n = meta_int(g, arch + ".block_count");
  TF_CHECK(n >= 1 && n <= kMaxLayers, g.path(), ": metadata key '", arch, ".block_count' is ", n,
           ", outside [1, ", kMaxLayers, "]");
  return n;
}

// A per-layer key that llama.cpp writes either as one value or as an array of block_count values.
std::vector<int64_t> per_layer(const GgufFile& g, const std::string& key, int64_t n_layer, bool required) {
  const GgufValue* v = g.find_meta(key);
  if (!v) {
    TF_CHECK(!required, g.path(), ": metadata key '", key, "' is missing");
    return {};
  }
  if (v->type != GgufType::ARRAY) return std::vector<int64_t>(static_cast<size_t>(n_layer), v->as_int(key));
  std::vector<int64_t> out;
  for (const auto& e : v->arr) out.push_back(e.type == GgufType::BOOL ? e.as_bool(key) : e.as_int(key));
  TF_CHECK(static_cast<int64_t>(out.size()) == n_layer, g.path(), ": metadata key '", key, "' has ", out.size(),
           " entries, block_count is ", n_layer);
  return out;
}

// Rows of t rearranged so that row dst_of[i] of the result is row i of t.
TensorView scatter_rows(const TensorView& t, const std::vector<int64_t>& dst_of, std::vector<std::vector<uint8_t>>& owned,
                        const std::string& ctx) {
  const int64_t rows = t.shape.empty() ? 0 : t.shape[0];
  TF_CHECK(rows == static_cast<int64_t>(dst_of.size()) && rows > 0 && t.nbytes % static_cast<uint64_t>(rows) == 0, ctx,
           ": ", rows, " rows do not match the expected ", dst_of.size());
  const uint64_t rb = t.nbytes / static_cast<uint64_t>(rows);
  std::vector<uint8_t> buf(t.nbytes);
  for (int64_t i = 0; i < rows; ++i)
    std::memcpy(buf.data() + static_cast<uint64_t>(dst_of[static_cast<size_t>(i)]) * rb, t.data + static_cast<uint64_t>(i) * rb, rb);
  owned.push_back(std::move(buf));
  TensorView v = t;
  v.data = owned.back().data();
  return v;
}

// llama.cpp's permute for interleaved rotary, undone: GGUF row h*hd + 2i + j holds HF row h*hd + j*hd/2 + i.
std::vector<int64_t> unpermute_rows(int64_t heads, int64_t rows, const std::string& ctx) {
  TF_CHECK(heads > 0 && rows % heads == 0 && (rows / heads) % 2 == 0, ctx, ": ", rows, " rows do not split into ", heads,
           " heads of an even size");
  const int64_t hd = rows / heads;
  std::vector<int64_t> dst(static_cast<size_t>(rows));
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) dst[static_cast<size_t>(h * hd + 2 * i + j)] = h * hd + j * (hd / 2) + i;
  return dst;
}

// Element-wise f32 copy of a float-like tensor with f applied.
template <class F>
TensorView map_f32(const TensorView& t, std::vector<std::vector<uint8_t>>& owned, F f) {
  const int64_t n = t.numel();
  std::vector<uint8_t> buf(static_cast<size_t>(n) * sizeof(float));
  for (int64_t i = 0; i < n; ++i) {
    const float v = f(tensor_element(t, i));
    std::memcpy(buf.data() + i * sizeof(float), &v, sizeof(float));
  }
  owned.push_back(std::move(buf));
  TensorView v = t;
  v.dtype = DType::F32;
  v.data = owned.back().data();
  v.nbytes = static_cast<uint64_t>(n) * sizeof(float);
  return v;
}

float bf16_round(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&x, &u, 4);
  return x;
}

float bf16_step(float x, int k) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  u = static_cast<uint32_t>(static_cast<int64_t>(u) + static_cast<int64_t>(k) * 0x10000);
  std::memcpy(&x, &u, 4);
  return x;
}

// qwen35's converter tiles V heads: GGUF unit (r * kh + g) holds HF unit (g * rep + r); units of n rows.
std::vector<int64_t> v_untile(int64_t kh, int64_t vh, int64_t n, int64_t offset, int64_t total) {
  std::vector<int64_t> dst(static_cast<size_t>(total));
  for (int64_t i = 0; i < total; ++i) dst[static_cast<size_t>(i)] = i;
  const int64_t rep = vh / kh;
  for (int64_t r = 0; r < rep; ++r)
    for (int64_t g = 0; g < kh; ++g)
      for (int64_t i = 0; i < n; ++i)
        dst[static_cast<size_t>(offset + (r * kh + g) * n + i)] = offset + (g * rep + r) * n + i;
  return dst;
}

// Columns of a 2-D tensor moved in units of `unit` columns: unit dst_of[i] of the result is unit i of t.
TensorView scatter_cols(const TensorView& t, int64_t unit, const std::vector<int64_t>& dst_of,
                        std::vector<std::vector<uint8_t>>& owned, const std::string& ctx) {
  TF_CHECK(t.shape.size() == 2 && t.shape[1] == unit * static_cast<int64_t>(dst_of.size()), ctx,
           ": columns do not split into ", dst_of.size(), " heads of ", unit);
  const uint64_t ub = dtype_row_bytes(t.dtype, static_cast<uint64_t>(unit));
  const uint64_t rb = dtype_row_bytes(t.dtype, static_cast<uint64_t>(t.shape[1]));
  TF_CHECK(ub > 0 && rb == ub * dst_of.size() && rb * static_cast<uint64_t>(t.shape[0]) == t.nbytes, ctx, ": ",
           dtype_name(t.dtype), " blocks do not align with heads of ", unit, " columns");
  std::vector<uint8_t> buf(t.nbytes);
  for (int64_t r = 0; r < t.shape[0]; ++r)
    for (size_t u = 0; u < dst_of.size(); ++u)
      std::memcpy(buf.data() + r * rb + static_cast<uint64_t>(dst_of[u]) * ub, t.data + r * rb + u * ub, ub);
  owned.push_back(std::move(buf));
  TensorView v = t;
  v.data = owned.back().data();
  return v;
}

}  // namespace

bool gguf_is_hybrid(const std::string& arch) { return is_nemotron(arch) || arch == "qwen3next" || is_qwen35(arch); }

float gguf_a_log_from_a(float a) {
  TF_CHECK(std::isfinite(a) && a < 0, "ssm_a value ", a, " is not a negative number (A = -exp(A_log))");
  const float a0 = static_cast<float>(std::log(-static_cast<double>(a)));
  auto err = [&](float c) { return std::fabs(-std::exp(c) - a); };
  const float ulp = 4 * std::fabs(std::nextafter(a, 0.0f) - a);
  // A bf16 A_log whose exp lands within a few ulps is the stored one: exp implementations round differently.
  const float b0 = bf16_round(a0);
  for (int k : {0, -1, 1}) {
    const float c = bf16_step(b0, k);
    if (err(c) <= ulp) return c;
  }
  float best = a0;
  for (float dir : {-1.0f, 1.0f}) {
    float x = a0;
    for (int s = 0; s < 4; ++s) {
      x = std::nextafter(x, dir * std::numeric_limits<float>::infinity());
      if (err(x) < err(best)) best = x;
    }
  }
  return best;
}

void gguf_hybrid_views(const GgufFile& g, std::vector<std::vector<uint8_t>>& owned,
                       const std::function<void(TensorView)>& add) {
  const std::string& path = g.path();
  const std::string arch = g.get_string("general.architecture", "");
  const bool nemo = is_nemotron(arch);
  const std::string P = nemo ? "backbone." : "model.";
  const int64_t n_layer = block_count(g, arch);
  std::vector<int64_t> kv_heads;
  int64_t heads = 0, kh = 0, vh = 0, dk = 0, dv = 0;
  if (!nemo) {
    kh = meta_int(g, arch + ".ssm.group_count");
    vh = meta_int(g, arch + ".ssm.time_step_rank");
    dk = meta_int(g, arch + ".ssm.state_size");
    const int64_t inner = meta_int(g, arch + ".ssm.inner_size");
    TF_CHECK(kh > 0 && vh > 0 && dk > 0 && vh % kh == 0 && inner % vh == 0, path, ": ssm.group_count ", kh,
             ", ssm.time_step_rank ", vh, ", ssm.inner_size ", inner, " are inconsistent");
    dv = inner / vh;
  }
  if (nemo) {
    heads = meta_int(g, arch + ".attention.head_count");
    kv_heads = per_layer(g, arch + ".attention.head_count_kv", n_layer, true);
  }
  auto plus_minus = [](float v) { return v - 1.0f; };
  std::map<int64_t, std::pair<const TensorView*, const TensorView*>> qkv_gate;  // qwen3next: attn_qkv, attn_gate
  for (const auto& gname : g.names()) {
    const TensorView& t = *g.find(gname);
    const std::string ctx = cat(path, ": tensor '", gname, "'");
    auto a_log = [&ctx](float a) {
      TF_CHECK(std::isfinite(a) && a < 0, ctx, ": value ", a, " is not negative (the converter stores A = -exp(A_log))");
      return gguf_a_log_from_a(a);
    };
    TensorView v = t;
    if (gname == "token_embd.weight") {
      v.name = P + (nemo ? "embeddings.weight" : "embed_tokens.weight");
    } else if (gname == "output_norm.weight") {
      if (nemo) {
        v.name = "backbone.norm_f.weight";
      } else {
        v = map_f32(t, owned, plus_minus);
        v.name = "model.norm.weight";
      }
    } else if (gname == "output.weight") {
      v.name = "lm_head.weight";
    } else {
      int64_t layer = 0;
      std::string rest;
      if (!split_block(gname, &layer, &rest)) {
        add(std::move(v));
        continue;
      }
      TF_CHECK(layer < n_layer, ctx, ": layer ", layer, " is past block_count ", n_layer);
      const std::string lp = cat(P, "layers.", layer, ".");
      if (arch == "qwen3next" && (rest == "attn_qkv.weight" || rest == "attn_gate.weight")) {
        auto& slot = qkv_gate[layer];
        (rest == "attn_qkv.weight" ? slot.first : slot.second) = &t;
        continue;
      }
      const Rule* expert = nullptr;
      for (const auto& r : kExpertRules)
        if (rest == r.gguf) expert = &r;
      if (expert) {
        TF_CHECK(t.shape.size() == 3 && t.shape[0] >= 1, ctx, ": expert tensors must have 3 dimensions");
        const uint64_t slice = t.nbytes / static_cast<uint64_t>(t.shape[0]);
        for (int64_t e = 0; e < t.shape[0]; ++e) {
          TensorView x;
          x.name = cat(lp, nemo ? "mixer.experts." : "mlp.experts.", e, ".", expert->hf);
          x.dtype = t.dtype;
          x.shape = {t.shape[1], t.shape[2]};
          x.data = t.data + static_cast<uint64_t>(e) * slice;
          x.nbytes = slice;
          add(std::move(x));
        }
        continue;
      }
      const Rule* rule = nullptr;
      if (nemo) {
        for (const auto& r : kNemotronRules)
          if (rest == r.gguf) rule = &r;
      } else {
        for (const auto& r : kQwenNextRules)
          if (rest == r.gguf) rule = &r;
        if (is_qwen35(arch))
          for (const auto& r : kQwen35Rules)
            if (rest == r.gguf) rule = &r;
      }
      TF_CHECK(rule, ctx, ": tensor name not known for architecture '", arch, "'");
      switch (rule->fx) {
        case Fx::kNone: break;
        case Fx::kMinusOne: v = map_f32(t, owned, plus_minus); break;
        case Fx::kALog:
          v = map_f32(t, owned, a_log);
          v.shape = {t.numel()};
          break;
        case Fx::kFlat: v.shape = {t.numel()}; break;
        case Fx::kConv:
          TF_CHECK(t.shape.size() == 2, ctx, ": conv1d weight must have 2 dimensions, not ", t.shape.size());
          v.shape = {t.shape[0], 1, t.shape[1]};
          break;
        case Fx::kVQkv:
          v = scatter_rows(t, v_untile(kh, vh, dv, 2 * kh * dk, 2 * kh * dk + vh * dv), owned, ctx);
          break;
        case Fx::kVRows: v = scatter_rows(t, v_untile(kh, vh, dv, 0, vh * dv), owned, ctx); break;
        case Fx::kVHeads: {
          TensorView h = t;
          if (t.shape.size() == 1) h.shape = {t.shape[0], 1};
          v = scatter_rows(h, v_untile(kh, vh, 1, 0, vh), owned, ctx);
          v.shape = t.shape;
          break;
        }
        case Fx::kVALog: {
          TensorView h = map_f32(t, owned, a_log);
          h.shape = {t.numel(), 1};
          v = scatter_rows(h, v_untile(kh, vh, 1, 0, vh), owned, ctx);
          v.shape = {t.numel()};
          break;
        }
        case Fx::kVConv:
          TF_CHECK(t.shape.size() == 2, ctx, ": conv1d weight must have 2 dimensions, not ", t.shape.size());
          v = scatter_rows(t, v_untile(kh, vh, dv, 2 * kh * dk, 2 * kh * dk + vh * dv), owned, ctx);
          v.shape = {t.shape[0], 1, t.shape[1]};
          break;
        case Fx::kVCols: {
          std::vector<int64_t> units = v_untile(kh, vh, 1, 0, vh);
          v = scatter_cols(t, dv, units, owned, ctx);
          break;
        }
        case Fx::kUnpermQ:
        case Fx::kUnpermK: {
          const bool q = rule->fx == Fx::kUnpermQ;
          const int64_t h = q ? heads : kv_heads[static_cast<size_t>(layer)];
          const std::string hctx = cat(ctx, " (", arch, q ? ".attention.head_count " : ".attention.head_count_kv[", q ? "" : std::to_string(layer), q ? "" : "] ", h, ")");
          v = scatter_rows(t, unpermute_rows(h, t.shape.empty() ? 0 : t.shape[0], hctx), owned, hctx);
          break;
        }
      }
      v.name = lp + rule->hf;
    }
    add(std::move(v));
  }
  if (qkv_gate.empty()) return;
  // qwen3next: the converter split in_proj_qkvz (per key head: q, k, v, z) into qkv (all q, all k, all v) and z.
  const int64_t rep = vh / kh, group = 2 * dk + 2 * rep * dv;
  std::vector<int64_t> dst;
  auto part = [&](int64_t begin, int64_t n) {
    for (int64_t h = 0; h < kh; ++h)
      for (int64_t i = 0; i < n; ++i) dst.push_back(h * group + begin + i);
  };
  part(0, dk);
  part(dk, dk);
  part(2 * dk, rep * dv);
  part(2 * dk + rep * dv, rep * dv);
  for (const auto& [layer, pr] : qkv_gate) {
    const std::string ctx = cat(path, ": layer ", layer, " attn_qkv/attn_gate");
    TF_CHECK(pr.first && pr.second, ctx, ": one of the pair is missing");
    const TensorView &a = *pr.first, &b = *pr.second;
    TF_CHECK(a.dtype == b.dtype && a.shape.size() == 2 && b.shape.size() == 2 && a.shape[1] == b.shape[1] &&
                 a.shape[0] == 2 * kh * dk + vh * dv && b.shape[0] == vh * dv,
             ctx, ": shapes [", a.shape[0], " x ", a.shape[1], "] and [", b.shape[0], " x ", b.shape[1],
             "] do not match the ssm sizes");
    std::vector<uint8_t> joined(a.nbytes + b.nbytes);
    std::memcpy(joined.data(), a.data, a.nbytes);
    std::memcpy(joined.data() + a.nbytes, b.data, b.nbytes);
    owned.push_back(std::move(joined));
    TensorView cat_v = a;
    cat_v.data = owned.back().data();
    cat_v.nbytes = a.nbytes + b.nbytes;
    cat_v.shape = {a.shape[0] + b.shape[0], a.shape[1]};
    TensorView v = scatter_rows(cat_v, dst, owned, ctx);
    v.name = cat("model.layers.", layer, ".linear_attn.in_proj_qkvz.weight");
    add(std::move(v));
  }
}

nlohmann::json gguf_hybrid_config(const GgufFile& g, const WeightSource& w) {
  const std::string& path = g.path();
  const std::string arch = g.get_string("general.architecture", "");
  const bool nemo = is_nemotron(arch);
  const std::string P = nemo ? "backbone." : "model.";
  auto key = [&](const char* k) { return cat(arch, ".", k); };
  auto req = [&](const char* k) { return meta_int(g, key(k)); };
  auto has = [&](int64_t i, const char* rest) { return g.find(cat("blk.", i, ".", rest)) != nullptr; };
  nlohmann::json c = nlohmann::json::object();
  const int64_t L = block_count(g, arch), H = req("embedding_length"), heads = req("attention.head_count");
  TF_CHECK(H > 0 && heads > 0, path, ": embedding_length and attention.head_count must be positive");
  c["hidden_size"] = H;
  c["num_hidden_layers"] = L;
  c["num_attention_heads"] = heads;
  const int64_t hd = g.get_int(key("attention.key_length"), H / heads);
  c["head_dim"] = hd;
  if (g.find_meta(key("context_length"))) c["max_position_embeddings"] = g.get_int(key("context_length"), 0);
  const double eps = g.get_float(key("attention.layer_norm_rms_epsilon"),
                                 g.get_float(key("attention.layer_norm_epsilon"), nemo ? 1e-5 : 1e-6));
  c["rms_norm_eps"] = eps;
  c["layer_norm_epsilon"] = eps;
  const std::vector<int64_t> kv = per_layer(g, key("attention.head_count_kv"), L, true);
  int64_t n_kv = 0;
  for (int64_t v : kv) n_kv = std::max(n_kv, v);
  c["num_key_value_heads"] = n_kv;
  // Expert and shared-expert settings, common to both families.
  const bool moe = g.find_meta(key("expert_count")) != nullptr;
  // Layer kinds from the tensors, checked against llama.cpp's per-layer arrays.
  std::vector<std::string> kinds;
  const std::vector<int64_t> recurrent = per_layer(g, key("attention.recurrent_layers"), L, false);
  const int64_t interval = g.get_int(key("full_attention_interval"), 0);
  nlohmann::json mlp_only = nlohmann::json::array();
  int64_t dense_ff = 0;
  for (int64_t i = 0; i < L; ++i) {
    const bool ssm = has(i, nemo ? "ssm_in.weight" : "ssm_a"), attn = has(i, "attn_q.weight");
    const bool experts = has(i, "ffn_up_exps.weight"), dense = has(i, "ffn_up.weight");
    const std::string ctx = cat(path, ": block ", i);
    if (nemo) {
      TF_CHECK(int(ssm) + int(attn) + int(experts) + int(dense) == 1, ctx,
               ": expected exactly one of ssm_in, attn_q, ffn_up_exps, ffn_up");
      TF_CHECK((kv[static_cast<size_t>(i)] > 0) == attn, ctx, ": attention.head_count_kv is ",
               kv[static_cast<size_t>(i)], " but attn_q is ", attn ? "present" : "absent");
      kinds.push_back(ssm ? "mamba" : attn ? "attention" : experts ? "moe" : "mlp");
    } else {
      TF_CHECK(int(ssm) + int(attn) == 1, ctx, ": expected exactly one of ssm_a, attn_q");
      TF_CHECK(int(experts) + int(dense) == 1, ctx, ": expected exactly one of ffn_up_exps, ffn_up");
      if (!recurrent.empty())
        TF_CHECK((recurrent[static_cast<size_t>(i)] != 0) == ssm, ctx, ": attention.recurrent_layers says ",
                 recurrent[static_cast<size_t>(i)] ? "recurrent" : "attention", " but the tensors say otherwise");
      else if (interval > 0)
        TF_CHECK(((i + 1) % interval != 0) == ssm, ctx, ": full_attention_interval ", interval,
                 " disagrees with the tensors");
      kinds.push_back(ssm ? "linear_attention" : "full_attention");
      if (dense) mlp_only.push_back(i);
    }
    if (dense && !dense_ff) dense_ff = g.find(cat("blk.", i, ".ffn_up.weight"))->shape.at(0);
  }
  if (nemo) {
    c["architectures"] = {"NemotronHForCausalLM"};
    c["model_type"] = "nemotron_h";
    nlohmann::json types = nlohmann::json::array();
    for (const auto& k : kinds) types.push_back(k);
    c["layers_block_type"] = types;
    const int64_t mh = req("ssm.time_step_rank"), inner = req("ssm.inner_size");
    TF_CHECK(mh > 0 && inner % mh == 0, path, ": ssm.inner_size ", inner, " is not a multiple of ssm.time_step_rank ", mh);
    c["mamba_num_heads"] = mh;
    c["mamba_head_dim"] = inner / mh;
    c["n_groups"] = req("ssm.group_count");
    c["ssm_state_size"] = req("ssm.state_size");
    c["conv_kernel"] = req("ssm.conv_kernel");
    bool conv_bias = false;
    for (int64_t i = 0; i < L; ++i)
      if (kinds[static_cast<size_t>(i)] == "mamba") conv_bias = has(i, "ssm_conv1d.bias");
    c["use_conv_bias"] = conv_bias;
    c["mamba_hidden_act"] = "silu";
    c["mlp_hidden_act"] = "relu2";
    c["use_bias"] = false;
    c["mlp_bias"] = false;
    if (dense_ff) c["intermediate_size"] = dense_ff;
    if (moe) {
      c["n_routed_experts"] = req("expert_count");
      c["num_experts_per_tok"] = req("expert_used_count");
      c["moe_intermediate_size"] = req("expert_feed_forward_length");
      c["moe_shared_expert_intermediate_size"] = req("expert_shared_feed_forward_length");
      c["n_shared_experts"] = g.get_int(key("expert_shared_count"), 1);
      c["norm_topk_prob"] = g.get_bool(key("expert_weights_norm"), true);
      c["routed_scaling_factor"] = g.get_float(key("expert_weights_scale"), 1.0);
      c["n_group"] = g.get_int(key("expert_group_count"), 1);
      c["topk_group"] = g.get_int(key("expert_group_used_count"), 1);
    }
  } else {
    const bool q35 = is_qwen35(arch);
    c["architectures"] = {q35 ? (arch == "qwen35moe" ? "Qwen3_5MoeForCausalLM" : "Qwen3_5ForCausalLM")
                              : "Qwen3NextForCausalLM"};
    c["model_type"] = q35 ? (arch == "qwen35moe" ? "qwen3_5_moe_text" : "qwen3_5_text") : "qwen3_next";
    c["layer_types"] = kinds;
    c["hidden_act"] = "silu";
    const int64_t vh = req("ssm.time_step_rank"), inner = req("ssm.inner_size");
    TF_CHECK(vh > 0 && inner % vh == 0, path, ": ssm.inner_size ", inner, " is not a multiple of ssm.time_step_rank ", vh);
    c["linear_conv_kernel_dim"] = req("ssm.conv_kernel");
    c["linear_key_head_dim"] = req("ssm.state_size");
    c["linear_num_key_heads"] = req("ssm.group_count");
    c["linear_num_value_heads"] = vh;
    c["linear_value_head_dim"] = inner / vh;
    c["intermediate_size"] = dense_ff ? dense_ff : g.get_int(key("feed_forward_length"), 0);
    if (moe) {
      c["num_experts"] = req("expert_count");
      c["num_experts_per_tok"] = req("expert_used_count");
      c["moe_intermediate_size"] = req("expert_feed_forward_length");
      if (g.find_meta(key("expert_shared_feed_forward_length")))
        c["shared_expert_intermediate_size"] = g.get_int(key("expert_shared_feed_forward_length"), 0);
      c["norm_topk_prob"] = g.get_bool(key("expert_weights_norm"), true);
      if (!q35) {
        c["decoder_sparse_step"] = 1;
        c["mlp_only_layers"] = mlp_only;
      } else {
        TF_CHECK(mlp_only.empty() == (arch == "qwen35moe"), path, ": ", arch, " block ",
                 mlp_only.empty() ? std::string("0") : mlp_only[0].dump(), " has ",
                 mlp_only.empty() ? "expert" : "dense", " feed-forward tensors");
      }
    }
    const int64_t rot = req("rope.dimension_count");
    TF_CHECK(rot > 0 && rot <= hd && rot % 2 == 0, path, ": rope.dimension_count ", rot, " does not fit head size ", hd);
    const double factor = static_cast<double>(rot) / static_cast<double>(hd);
    c["partial_rotary_factor"] = factor;
    c["rope_parameters"] = {{"rope_type", "default"},
                            {"rope_theta", g.get_float(key("rope.freq_base"), 10000.0)},
                            {"partial_rotary_factor", factor}};
    if (q35) {
      // Qwen3.5 always rotates with interleaved mrope; text positions make it plain rope.
      std::vector<int64_t> sec = g.get_ints(key("rope.dimension_sections"));
      TF_CHECK(sec.size() >= 3, path, ": metadata key '", key("rope.dimension_sections"), "' is missing or short");
      sec.resize(3);
      TF_CHECK(2 * (sec[0] + sec[1] + sec[2]) == rot, path, ": ", key("rope.dimension_sections"),
               " do not add up to half of rope.dimension_count ", rot);
      c["rope_parameters"]["mrope_section"] = sec;
      c["rope_parameters"]["mrope_interleaved"] = true;
    }
    TF_CHECK(g.get_string(key("rope.scaling.type"), "none") == "none", path, ": ", key("rope.scaling.type"),
             " is not supported for ", arch, " GGUF files");
  }
  c["attention_bias"] = false;
  // The embedding rows are the model's vocabulary (the converter may pad the token list).
  const TensorView* emb = w.find(P + (nemo ? "embeddings.weight" : "embed_tokens.weight"));
  TF_CHECK(emb && emb->shape.size() == 2, path, ": tensor token_embd.weight is missing or not 2-D");
  c["vocab_size"] = emb->shape[0];
  c["tie_word_embeddings"] = w.find("lm_head.weight") == nullptr;
  if (g.find_meta("tokenizer.ggml.bos_token_id")) c["bos_token_id"] = g.get_int("tokenizer.ggml.bos_token_id", 0);
  if (g.find_meta("tokenizer.ggml.eos_token_id")) c["eos_token_id"] = g.get_int("tokenizer.ggml.eos_token_id", 0);
  if (g.find_meta("tokenizer.ggml.padding_token_id")) c["pad_token_id"] = g.get_int("tokenizer.ggml.padding_token_id", 0);
  return c;
}

}  // namespace tf
