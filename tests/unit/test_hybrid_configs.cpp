// Bad hybrid configs (BAD_INPUTS 12): missing, negative, huge or inconsistent sizes in a
// nemotron_h or qwen3_next config.json end in a tf::Error naming the field, never a crash.
#include <gtest/gtest.h>

#include <cmath>

#include "model_fixture.h"

namespace tf {

namespace {

struct BadField {
  const char* fixture;
  const char* field;
  nlohmann::json value;  // null: the field is removed
  const char* expect;    // text the error must contain
};

std::string load_error(const BadField& b) {
  ModelFiles files = open_model(test::golden_dir(b.fixture));
  if (b.value.is_null()) files.config.erase(b.field);
  else files.config[b.field] = b.value;
  return test::load_error(files);
}

}  // namespace

TEST(HybridConfigs, BadSizesAreErrorsNamingTheField) {
  const double huge = std::pow(2.0, 40);
  const std::vector<BadField> cases = {
      {"nemotron_h_moe", "mamba_num_heads", 0, "mamba_num_heads"},
      {"nemotron_h_moe", "mamba_num_heads", -8, "mamba_num_heads"},
      {"nemotron_h_moe", "mamba_num_heads", huge, "mamba_num_heads"},
      {"nemotron_h_moe", "n_groups", 3, "n_groups"},
      {"nemotron_h_moe", "ssm_state_size", 0, "ssm_state_size"},
      {"nemotron_h_moe", "ssm_state_size", 1 << 30, "ssm_state_size"},
      {"nemotron_h_moe", "conv_kernel", 0, "conv_kernel"},
      {"nemotron_h_moe", "conv_kernel", 100000, "conv_kernel"},
      {"nemotron_h_moe", "mamba_head_dim", 24, "in_proj"},
      {"nemotron_h_moe", "n_routed_experts", 0, "expert"},
      {"nemotron_h_moe", "num_experts_per_tok", 100, "experts"},
      {"nemotron_h_moe", "n_group", 3, "n_group"},
      {"nemotron_h_moe", "topk_group", 0, "topk_group"},
      {"nemotron_h_moe", "routed_scaling_factor", "big", "routed_scaling_factor"},
      {"nemotron_h_moe", "routed_scaling_factor", -1.0, "routed_scaling_factor"},
      {"nemotron_h_moe", "layers_block_type", nlohmann::json::array(), "num_hidden_layers"},
      {"nemotron_h_moe", "layers_block_type", nlohmann::json::array({"mamba", 7}), "layers_block_type"},
      {"nemotron_h_dense", "num_hidden_layers", 99, "disagrees"},
      {"nemotron_h_dense", "vocab_size", 100, "embeddings"},
      {"qwen3_next", "linear_num_value_heads", 3, "linear_num_value_heads"},
      {"qwen3_next", "linear_num_key_heads", 0, "linear_num_key_heads"},
      {"qwen3_next", "linear_conv_kernel_dim", 0, "linear_conv_kernel_dim"},
      {"qwen3_next", "linear_key_head_dim", -16, "linear_key_head_dim"},
      {"qwen3_next", "layer_types", nlohmann::json::array({"linear_attention"}), "layer_types"},
      {"qwen3_next", "num_experts_per_tok", 1000, "num_experts_per_tok"},
      {"qwen3_next", "linear_value_head_dim", nullptr, "linear_value_head_dim"},
      {"qwen3_5_text", "head_dim", 12, "q_proj"},
  };
  for (const auto& c : cases) {
    const std::string err = load_error(c);
    EXPECT_FALSE(err.empty()) << c.fixture << " " << c.field << " = " << c.value.dump() << " loaded";
    EXPECT_NE(err.find(c.expect), std::string::npos)
        << c.fixture << " " << c.field << " = " << c.value.dump() << ": " << err;
  }
}

}  // namespace tf
