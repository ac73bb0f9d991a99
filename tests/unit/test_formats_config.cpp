#include <gtest/gtest.h>

#include "base/json_capped.h"
#include "formats/hf_config.h"
#include "formats/model_files.h"
#include "test_formats_util.h"

namespace tf {
namespace {

using json = nlohmann::json;
using tf::testing::expect_error;
using tf::testing::TempDir;
using tf::testing::write_text;

json llama() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
    "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 128256,
    "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "tie_word_embeddings": false,
    "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "torch_dtype": "bfloat16",
    "rope_theta": 500000.0,
    "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192, "rope_type": "llama3"}})");
}

void expect_same_rope(const RopeScaling& a, const RopeScaling& b) {
  EXPECT_EQ(a.type, b.type);
  EXPECT_EQ(a.theta, b.theta);
  EXPECT_EQ(a.factor, b.factor);
  EXPECT_EQ(a.low_freq_factor, b.low_freq_factor);
  EXPECT_EQ(a.high_freq_factor, b.high_freq_factor);
  EXPECT_EQ(a.original_max_position_embeddings, b.original_max_position_embeddings);
  EXPECT_EQ(a.beta_fast, b.beta_fast);
  EXPECT_EQ(a.beta_slow, b.beta_slow);
  EXPECT_EQ(a.attention_factor, b.attention_factor);
  EXPECT_EQ(a.partial_rotary_factor, b.partial_rotary_factor);
}

TEST(FormatsConfig, Llama3Fields) {
  HfConfig c = parse_hf_config(llama(), "config.json");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.model_type, "llama");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.vocab_size, 128256);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope.type, "llama3");
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.bos_token_ids, std::vector<int64_t>{128000});
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.num_experts, 0);
  EXPECT_EQ(c.raw["rope_theta"], 500000.0);
}

TEST(FormatsConfig, RopeParametersEqualOldForm) {
  json old_form = llama();
  json new_form = llama();
  new_form.erase("rope_theta");
  new_form.erase("rope_scaling");
  new_form["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0},
                                 {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                                 {"original_max_position_embeddings", 8192}};
  expect_same_rope(parse_hf_config(old_form, "old").rope, parse_hf_config(new_form, "new").rope);

  // yarn with the legacy "type" key, partial rotary at the top level vs inside the parameters.
  old_form["rope_theta"] = 1000000.0;
  old_form["partial_rotary_factor"] = 0.5;
  old_form["rope_scaling"] = {{"type", "yarn"}, {"factor", 4.0}, {"original_max_position_embeddings", 32768},
                              {"beta_fast", 16.0}};
  new_form["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 1000000.0}, {"factor", 4.0},
                                 {"original_max_position_embeddings", 32768}, {"beta_fast", 16.0},
                                 {"partial_rotary_factor", 0.5}};
  RopeScaling a = parse_hf_config(old_form, "old").rope, b = parse_hf_config(new_form, "new").rope;
  expect_same_rope(a, b);
  EXPECT_EQ(a.type, "yarn");
  EXPECT_EQ(a.beta_fast, 16.0);
  EXPECT_EQ(a.partial_rotary_factor, 0.5);

  // No scaling: null rope_scaling vs a default rope_parameters.
  old_form.erase("partial_rotary_factor");
  old_form["rope_scaling"] = nullptr;
  new_form["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
  expect_same_rope(parse_hf_config(old_form, "old").rope, parse_hf_config(new_form, "new").rope);
  EXPECT_EQ(parse_hf_config(old_form, "old").rope.type, "default");
  old_form.erase("rope_theta");
  EXPECT_EQ(parse_hf_config(old_form, "old").rope.theta, 10000.0);
}

TEST(FormatsConfig, RopeErrors) {
  json j = llama();
  j["rope_scaling"]["rope_type"] = "longrope";
  expect_error([&] { parse_hf_config(j, "cfg.json"); }, "cfg.json", "rope type 'longrope' is not supported");
  j = llama();
  j["rope_scaling"].erase("original_max_position_embeddings");
  expect_error([&] { parse_hf_config(j, "cfg.json"); }, "cfg.json", "original_max_position_embeddings");
  j = llama();
  j["rope_scaling"]["factor"] = -2;
  expect_error([&] { parse_hf_config(j, "cfg.json"); }, "cfg.json", "field 'factor'");
  j = llama();
  j["rope_scaling"]["high_freq_factor"] = 0.5;
  expect_error([&] { parse_hf_config(j, "cfg.json"); }, "cfg.json", "high_freq_factor");
  j = llama();
  j["rope_theta"] = "big";
  j.erase("rope_scaling");
  expect_error([&] { parse_hf_config(j, "cfg.json"); }, "cfg.json", "'rope_theta' must be a number");
  j = llama();
  j["rope_scaling"] = 3;
  expect_error([&] { parse_hf_config(j, "cfg.json"); }, "cfg.json", "'rope_scaling' must be an object or null");
}

// BAD_INPUTS 12: missing, negative or huge sizes; heads not dividing; small vocabularies.
TEST(FormatsConfig, Bad12Sizes) {
  auto bad = [](const std::function<void(json&)>& edit, const std::string& needle) {
    json j = llama();
    edit(j);
    expect_error([&] { parse_hf_config(j, "/m/config.json"); }, "/m/config.json", needle);
  };
  bad([](json& j) { j.erase("hidden_size"); }, "required field 'hidden_size' is missing");
  bad([](json& j) { j["hidden_size"] = nullptr; }, "required field 'hidden_size' is missing");
  bad([](json& j) { j["num_attention_heads"] = -32; }, "field 'num_attention_heads' = -32 is outside");
  bad([](json& j) { j["hidden_size"] = 0; }, "field 'hidden_size' = 0");
  bad([](json& j) { j["vocab_size"] = 1ll << 40; }, "field 'vocab_size' = 1099511627776");
  bad([](json& j) { j["intermediate_size"] = 18446744073709551615ull; }, "is above the limit");
  bad([](json& j) { j["num_hidden_layers"] = 100000; }, "field 'num_hidden_layers' = 100000");
  bad([](json& j) { j["hidden_size"] = "4096"; }, "field 'hidden_size' must be an integer");
  bad([](json& j) { j["hidden_size"] = 4096.5; }, "field 'hidden_size' must be an integer");
  bad([](json& j) { j["num_attention_heads"] = 30; }, "num_key_value_heads 8 does not divide num_attention_heads 30");
  bad([](json& j) { j["num_attention_heads"] = 24; j["num_key_value_heads"] = 24; j["hidden_size"] = 1000; },
      "num_attention_heads 24 does not divide hidden_size 1000");
  bad([](json& j) { j["vocab_size"] = 1000; }, "special token id 128000 is not below vocab_size 1000");
  bad([](json& j) { j["eos_token_id"] = {1, -2}; }, "field 'eos_token_id' = -2");
  bad([](json& j) { j["rms_norm_eps"] = -1; }, "field 'rms_norm_eps'");
  bad([](json& j) { j["tie_word_embeddings"] = 1; }, "'tie_word_embeddings' must be true or false");
  bad([](json& j) { j["architectures"] = json::array(); }, "'architectures' must be a non-empty list");
  EXPECT_THROW(parse_hf_config(json::array(), "x"), Error);

  json j = llama();
  j["hidden_size"] = 4096.0;  // an integral float is still a size
  EXPECT_EQ(parse_hf_config(j, "c").hidden_size, 4096);
  j["num_attention_heads"] = 24;
  j["head_dim"] = 128;  // explicit head_dim: heads need not divide the width
  j["num_key_value_heads"] = 8;
  EXPECT_EQ(parse_hf_config(j, "c").head_dim, 128);
  j.erase("num_key_value_heads");
  EXPECT_EQ(parse_hf_config(j, "c").num_key_value_heads, 24);
  j["bos_token_id"] = nullptr;
  j["eos_token_id"] = 128001;
  j["sliding_window"] = nullptr;
  HfConfig c = parse_hf_config(j, "c");
  EXPECT_TRUE(c.bos_token_ids.empty());
  EXPECT_EQ(c.eos_token_ids, std::vector<int64_t>{128001});
  EXPECT_EQ(c.sliding_window, 0);
}

// A deeply nested value in a model's JSON (a million levels) is refused while parsing: copying it
// later overflowed the stack. Nesting up to the cap still loads.
TEST(FormatsConfig, DeepNestingIsAnError) {
  TempDir dir;
  const std::string p = dir.file("config.json");
  auto nest = [](int n) { return std::string(n, '[') + std::string(n, ']'); };
  write_text(p, "{\"architectures\": [\"LlamaForCausalLM\"], \"zzz\": " + nest(1000000) + "}");
  expect_error([&] { read_json_file(p); }, p, "nests deeper than 256 levels");
  write_text(p, "{\"zzz\": " + nest(kMaxJsonDepth) + "}");
  EXPECT_TRUE(read_json_file(p).contains("zzz"));
  write_text(p, "{\"zzz\": " + nest(kMaxJsonDepth + 1) + "}");
  EXPECT_THROW(read_json_file(p), Error);
}

TEST(FormatsConfig, MoeFields) {
  json j = json::parse(R"({"architectures":["Qwen3MoeForCausalLM"],"model_type":"qwen3_moe",
    "hidden_size":2048,"num_hidden_layers":48,"num_attention_heads":32,"num_key_value_heads":4,
    "head_dim":128,"intermediate_size":6144,"vocab_size":151936,"num_experts":128,
    "num_experts_per_tok":8,"moe_intermediate_size":768,"norm_topk_prob":true,
    "decoder_sparse_step":1,"mlp_only_layers":[],"rope_theta":1000000.0,"sliding_window":null,
    "attention_bias":false,"eos_token_id":151645})");
  HfConfig c = parse_hf_config(j, "q");
  EXPECT_EQ(c.num_experts, 128);
  EXPECT_EQ(c.num_experts_per_tok, 8);
  EXPECT_EQ(c.moe_intermediate_size, 768);
  EXPECT_TRUE(c.norm_topk_prob);
  j.erase("num_experts");
  j["num_local_experts"] = 16;
  EXPECT_EQ(parse_hf_config(j, "q").num_experts, 16);
  j.erase("num_local_experts");
  j["n_routed_experts"] = 64;
  EXPECT_EQ(parse_hf_config(j, "q").num_experts, 64);
  j["num_experts_per_tok"] = 65;
  expect_error([&] { parse_hf_config(j, "q.json"); }, "q.json", "num_experts_per_tok");
  j["num_experts_per_tok"] = 8;
  j["mlp_only_layers"] = {0, 48};
  expect_error([&] { parse_hf_config(j, "q.json"); }, "q.json", "mlp_only_layers");
}

TEST(FormatsConfig, TextConfigNesting) {
  json j = {{"architectures", {"Gemma3ForConditionalGeneration"}},
            {"model_type", "gemma3"},
            {"text_config", json::parse(R"({"model_type":"gemma3_text","hidden_size":2560,
              "num_hidden_layers":34,"num_attention_heads":8,"num_key_value_heads":4,"head_dim":256,
              "intermediate_size":10240,"vocab_size":262208,"sliding_window":1024,
              "rope_theta":1000000.0,"rope_scaling":{"rope_type":"linear","factor":8.0}})")},
            {"eos_token_id", {1, 106}}};
  HfConfig c = parse_hf_config(j, "g.json");
  EXPECT_EQ(c.architecture, "Gemma3ForConditionalGeneration");
  EXPECT_EQ(c.model_type, "gemma3_text");
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.sliding_window, 1024);
  EXPECT_EQ(c.rope.type, "linear");
  EXPECT_EQ(c.rope.factor, 8.0);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{1, 106}));
  j["text_config"]["vocab_size"] = 50;
  expect_error([&] { parse_hf_config(j, "g.json"); }, "g.json text_config", "special token id 106");
  // A top-level hidden_size means the top level is the language model.
  j["hidden_size"] = 64;
  expect_error([&] { parse_hf_config(j, "g.json"); }, "g.json", "required field 'num_hidden_layers'");
  // transformers 5 per-layer-type rope parameters: the full-attention set is used.
  json t5 = j["text_config"];
  t5["vocab_size"] = 262208;
  t5.erase("rope_theta");
  t5.erase("rope_scaling");
  t5["rope_parameters"] = {{"full_attention", {{"rope_type", "linear"}, {"factor", 8.0}, {"rope_theta", 1000000.0}}},
                           {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 10000.0}}}};
  HfConfig c5 = parse_hf_config(t5, "t5");
  expect_same_rope(c5.rope, c.rope);
}

}  // namespace
}  // namespace tf
