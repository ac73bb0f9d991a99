#pragma once
// The fields of a Hugging Face config.json the model builders use, checked for sanity.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tf {

// The most decoder layers a model may have, whatever its file says.
inline constexpr int64_t kMaxLayers = 4096;

struct RopeScaling {
  std::string type = "default";  // default | linear | llama3 | yarn | dynamic
  double theta = 10000.0;
  double factor = 1.0;
  double low_freq_factor = 1.0;   // llama3
  double high_freq_factor = 4.0;  // llama3
  int64_t original_max_position_embeddings = 0;  // llama3, yarn
  double beta_fast = 32.0, beta_slow = 1.0;      // yarn
  double attention_factor = 0.0;                 // yarn; 0 = derive from factor
  double partial_rotary_factor = 1.0;
};

struct HfConfig {
  nlohmann::json raw;               // the whole config, for family-specific fields
  std::string architecture;         // architectures[0], e.g. "LlamaForCausalLM"
  std::string model_type;           // e.g. "llama"
  int64_t hidden_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // defaults to num_attention_heads
  int64_t head_dim = 0;             // defaults to hidden_size / num_attention_heads
  int64_t intermediate_size = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-6;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  int64_t sliding_window = 0;       // 0 when absent or null
  RopeScaling rope;
  // Mixture of experts (0 when dense).
  int64_t num_experts = 0;          // num_experts | num_local_experts | n_routed_experts
  int64_t num_experts_per_tok = 0;
  int64_t moe_intermediate_size = 0;
  int64_t shared_expert_intermediate_size = 0;
  bool norm_topk_prob = false;
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;
  std::vector<int64_t> bos_token_ids, eos_token_ids;
  std::string torch_dtype;          // dtype | torch_dtype, may be empty
};

// Parses config.json content. Reads rope_parameters (transformers 5) or rope_theta and
// rope_scaling (older releases). Missing required sizes, negative or absurd values (sizes
// past 2^24 per dimension, heads not dividing the width, kv heads not dividing heads) throw
// an error naming `source` and the field.
HfConfig parse_hf_config(const nlohmann::json& j, const std::string& source);

}  // namespace tf
