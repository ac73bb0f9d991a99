// Qwen3-Next / Qwen3.5 fixtures run through Model::forward directly (prefill with the chunked form,
// greedy decode with the step form) against transformers' tokens and logits, plus resumed = cold
// and concurrent = solo at the model level; multimodal Qwen3.5 folders serve their text path.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model_fixture.h"

namespace tf {
namespace {

const std::vector<std::string> kFixtures = {"qwen3_next", "qwen3_5_text", "qwen3_5_moe_text", "qwen3_5_vl"};

// One sequence driven by hand: its pages, and the state slot it reads (the other one is written).
struct Seq {
  std::vector<int32_t> pages;
  int32_t slot_a = 0, slot_b = 1;
  int32_t pos = 0;
};

struct Harness {
  std::unique_ptr<test::LoadedModel> m;
  std::unique_ptr<KvStorage> kv;
  Tensor pool;
  int next_page = 0;
  explicit Harness(const std::string& name, int threads = 2) {
    m = test::load_fixture(test::golden_dir(name), threads);
    m->model->reserve(128);
    kv = m->backend->alloc_kv(m->model->n_kv_layers(), 32, 16, m->model->n_kv_heads(), m->model->head_dim());
    pool = m->backend->alloc(8, m->model->state_floats());
  }
  Seq new_seq(int slot) {
    Seq s;
    for (int i = 0; i < 8; ++i) s.pages.push_back(next_page++);
    s.slot_a = slot, s.slot_b = slot + 1;
    // A fresh sequence starts from a zero state.
    std::vector<float> zeros(static_cast<size_t>(pool.cols), 0.0f);
    m->backend->from_host(zeros.data(), pool.slice_rows(slot, 1));
    return s;
  }
  // Rows of several sequences in one round; returns each sequence's last-row logits.
  std::vector<std::vector<float>> round(std::vector<Seq*> seqs, const std::vector<std::vector<int32_t>>& toks,
                                        uint8_t step) {
    RoundInput in;
    in.states.pool = pool.data;
    in.states.slot_floats = m->model->state_floats();
    for (size_t i = 0; i < seqs.size(); ++i) {
      Seq& s = *seqs[i];
      for (int32_t t : toks[i]) {
        in.tokens.push_back(t);
        in.layout.pos.push_back(s.pos++);
        in.layout.seq.push_back(static_cast<int32_t>(i));
      }
      in.logit_rows.push_back(static_cast<int32_t>(in.tokens.size()) - 1);
      in.layout.seq_pages.push_back(s.pages);
      in.states.src.push_back(s.slot_a);
      in.states.dst.push_back(s.slot_b);
      in.states.step.push_back(step);
      std::swap(s.slot_a, s.slot_b);
    }
    std::vector<float> logits;
    m->model->forward(in, *kv, logits);
    const size_t V = static_cast<size_t>(m->model->vocab_size());
    std::vector<std::vector<float>> out;
    for (size_t i = 0; i < seqs.size(); ++i) out.emplace_back(logits.begin() + i * V, logits.begin() + (i + 1) * V);
    return out;
  }
};

int32_t argmax(const std::vector<float>& v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

nlohmann::json expected(const std::string& name) {
  std::ifstream f(test::golden_dir(name) + "/expected.json");
  if (!f) return nullptr;
  return nlohmann::json::parse(f);
}

class Qwen3NextForward : public ::testing::TestWithParam<std::string> {};

TEST_P(Qwen3NextForward, GreedyPrefillThenDecodeMatchesTransformers) {
  const auto ex = expected(GetParam());
  ASSERT_FALSE(ex.is_null()) << GetParam();
  Harness h(GetParam());
  EXPECT_GT(h.m->model->state_floats(), 0);
  int compared = 0;
  double worst = 0;
  for (const auto& c : ex["cases"]) {
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto ref = c["tokens"].get<std::vector<int32_t>>();
    const auto ref_first = c["first_logits"].get<std::vector<float>>();
    h.next_page = 0;
    Seq s = h.new_seq(0);
    auto lg = h.round({&s}, {prompt}, 0)[0];
    double err = 0;
    for (size_t i = 0; i < lg.size(); ++i)
      err = std::max(err, std::fabs(double{lg[i]} - ref_first[i]) / (1.0 + std::fabs(ref_first[i])));
    worst = std::max(worst, err);
    EXPECT_LT(err, 1e-3) << GetParam() << " prompt of " << prompt.size();
    for (size_t step = 0; step < ref.size(); ++step) {
      const int32_t tok = argmax(lg);
      EXPECT_EQ(tok, ref[step]) << GetParam() << " prompt of " << prompt.size() << " step " << step;
      ++compared;
      if (tok != ref[step] || c["steps"][step]["margin"].get<double>() < 1e-3) break;
      lg = h.round({&s}, {{tok}}, 1)[0];
    }
  }
  EXPECT_GT(compared, 60);
  std::printf("[ %s ] max first-logit error %.3g\n", GetParam().c_str(), worst);
}

TEST_P(Qwen3NextForward, ResumedAtChunkMarkEqualsColdAndConcurrentEqualsSolo) {
  const auto ex = expected(GetParam());
  ASSERT_FALSE(ex.is_null());
  const auto prompt = ex["cases"].back()["prompt"].get<std::vector<int32_t>>();
  ASSERT_GT(prompt.size(), 64u);
  const std::vector<int32_t> head(prompt.begin(), prompt.begin() + 64), tail(prompt.begin() + 64, prompt.end());
  // Cold: one prefill item; then two decode steps.
  Harness cold(GetParam(), 1);
  Seq a = cold.new_seq(0);
  auto l_cold = cold.round({&a}, {prompt}, 0)[0];
  auto d_cold = cold.round({&a}, {{argmax(l_cold)}}, 1)[0];
  // Resumed: items [0, 64) and [64, n), with another sequence sharing the second round and the decode.
  Harness res(GetParam(), 2);
  Seq b = res.new_seq(0), other = res.new_seq(2);
  res.round({&b}, {head}, 0);
  auto l_res = res.round({&other, &b}, {{5, 9, 200}, tail}, 0)[1];
  ASSERT_EQ(l_res, l_cold);
  auto d_res = res.round({&b, &other}, {{argmax(l_res)}, {7}}, 1)[0];
  ASSERT_EQ(d_res, d_cold);
}

TEST_P(Qwen3NextForward, MissingStateSlotsAreAnError) {
  Harness h(GetParam());
  RoundInput in;
  in.tokens = {1};
  in.layout.pos = {0};
  in.layout.seq = {0};
  in.layout.seq_pages = {{0}};
  in.logit_rows = {0};
  std::vector<float> logits;
  EXPECT_THROW(h.m->model->forward(in, *h.kv, logits), Error);
}

TEST(Qwen3NextConfig, BadLayerTypesAndSizesAreErrors) {
  ModelFiles files = open_model(test::golden_dir("qwen3_next"));
  auto backend = make_cpu_backend(1);
  const nlohmann::json good = files.config;
  auto expect_error = [&](const char* what, auto edit) {
    files.config = good;
    edit(files.config);
    EXPECT_THROW(load_model(files, *backend), Error) << what;
  };
  expect_error("short layer_types", [](nlohmann::json& j) { j["layer_types"].erase(0); });
  expect_error("unknown layer type", [](nlohmann::json& j) { j["layer_types"][0] = "sliding_attention"; });
  expect_error("v heads not a multiple", [](nlohmann::json& j) { j["linear_num_value_heads"] = 3; });
  expect_error("k dim off the tensors", [](nlohmann::json& j) { j["linear_key_head_dim"] = 8; });
  expect_error("missing field", [](nlohmann::json& j) { j.erase("linear_conv_kernel_dim"); });
  expect_error("heads off q_proj", [](nlohmann::json& j) { j["head_dim"] = 8; });
  files.config = good;
  files.config.erase("layer_types");
  files.config["full_attention_interval"] = 2;  // layers 1 and 3 full: layer 3 has no self_attn tensors
  EXPECT_THROW(load_model(files, *backend), Error);
  files.config = good;
  EXPECT_NO_THROW(load_model(files, *backend));
}

// A checkpoint's tensors seen through other names: `hide` is absent, and names starting with `from`
// read the tensor named with `to` instead.
class RenamedWeights : public WeightSource {
 public:
  RenamedWeights(std::shared_ptr<WeightSource> base, std::string hide, std::string from = "", std::string to = "")
      : base_(std::move(base)), hide_(std::move(hide)), from_(std::move(from)), to_(std::move(to)) {}
  const TensorView* find(const std::string& name) const override {
    if (name == hide_) return nullptr;
    if (!from_.empty() && name.rfind(from_, 0) == 0) return base_->find(to_ + name.substr(from_.size()));
    if (!from_.empty() && name.rfind(to_, 0) == 0) return nullptr;
    return base_->find(name);
  }
  std::vector<std::string> names() const override {
    std::vector<std::string> out;
    for (const auto& n : base_->names()) {
      if (from_.empty() || n.rfind(to_, 0) != 0) out.push_back(n);
      else out.push_back(from_ + n.substr(to_.size()));
    }
    std::erase(out, hide_);
    return out;
  }
  std::string describe() const override { return base_->describe() + " (renamed)"; }

 private:
  std::shared_ptr<WeightSource> base_;
  std::string hide_, from_, to_;
};

// Largest relative error of the first logits of the fixture's first prompt, loaded from `files`.
double first_logit_error(const ModelFiles& files, const nlohmann::json& ex) {
  auto backend = make_cpu_backend(1);
  auto model = load_model(files, *backend);
  model->reserve(16);
  auto kv = backend->alloc_kv(model->n_kv_layers(), 8, 16, model->n_kv_heads(), model->head_dim());
  Tensor pool = backend->alloc(2, model->state_floats());
  std::vector<float> zeros(static_cast<size_t>(pool.cols), 0.0f);
  backend->from_host(zeros.data(), pool.slice_rows(0, 1));
  const auto& c = ex["cases"][1];
  RoundInput in;
  in.tokens = c["prompt"].get<std::vector<int32_t>>();
  for (size_t i = 0; i < in.tokens.size(); ++i) {
    in.layout.pos.push_back(static_cast<int32_t>(i));
    in.layout.seq.push_back(0);
  }
  in.layout.seq_pages = {{0}};
  in.logit_rows = {static_cast<int32_t>(in.tokens.size()) - 1};
  in.states.pool = pool.data;
  in.states.slot_floats = model->state_floats();
  in.states.src = {0};
  in.states.dst = {1};
  in.states.step = {0};
  std::vector<float> lg;
  model->forward(in, *kv, lg);
  const auto ref = c["first_logits"].get<std::vector<float>>();
  double err = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    err = std::max(err, std::fabs(double{lg[i]} - ref[i]) / (1.0 + std::fabs(ref[i])));
  return err;
}

TEST(Qwen3_5Multimodal, ConfigLiftsTextConfigAndKeepsOuterFields) {
  ModelFiles files = open_model(test::golden_dir("qwen3_5_vl"));
  ASSERT_TRUE(files.config.contains("text_config") && files.config.contains("vision_config"));
  HfConfig c = parse_hf_config(files.config, "vl");
  EXPECT_EQ(c.architecture, "Qwen3_5ForConditionalGeneration");
  EXPECT_EQ(c.model_type, "qwen3_5_text");
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.num_hidden_layers, 4);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));
  // transformers reads tying and generation ids from the outer config first.
  files.config["tie_word_embeddings"] = true;
  files.config["eos_token_id"] = 7;
  c = parse_hf_config(files.config, "vl");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{7}));
  files.config.erase("tie_word_embeddings");
  files.config.erase("eos_token_id");
  files.config["text_config"]["tie_word_embeddings"] = true;
  c = parse_hf_config(files.config, "vl");
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));
}

TEST(Qwen3_5Multimodal, TieFollowsTheOuterConfigAsTransformersDoes) {
  ModelFiles files = open_model(test::golden_dir("qwen3_5_vl"));
  const auto ex = expected("qwen3_5_vl");
  ASSERT_FALSE(ex.is_null());
  const nlohmann::json good = files.config;
  EXPECT_LT(first_logit_error(files, ex), 1e-3);
  // Absent at the top level: Qwen3_5Config's default (untied) wins over text_config.
  files.config.erase("tie_word_embeddings");
  files.config["text_config"]["tie_word_embeddings"] = true;
  EXPECT_LT(first_logit_error(files, ex), 1e-3);
  // Tied at the top level: the head is the embedding, so the logits move off the reference.
  files.config = good;
  files.config["tie_word_embeddings"] = true;
  EXPECT_GT(first_logit_error(files, ex), 1e-2);
}

TEST(Qwen3_5Multimodal, MissingLanguageModelTensorIsNamed) {
  ModelFiles files = open_model(test::golden_dir("qwen3_5_vl"));
  const auto base = files.weights;
  for (const std::string name : {"model.language_model.layers.2.linear_attn.in_proj_z.weight",
                                 "model.language_model.layers.3.self_attn.k_proj.weight",
                                 "model.language_model.embed_tokens.weight", "model.language_model.norm.weight"}) {
    files.weights = std::make_shared<RenamedWeights>(base, name);
    EXPECT_NE(test::load_error(files).find(name), std::string::npos) << name << ": " << test::load_error(files);
  }
  files.weights = std::make_shared<RenamedWeights>(base, "lm_head.weight");
  EXPECT_NE(test::load_error(files).find("lm_head.weight"), std::string::npos);
  // Vision and mtp tensors are not needed.
  files.weights = std::make_shared<RenamedWeights>(base, "model.visual.pos_embed.weight");
  EXPECT_EQ(test::load_error(files), "");
  files.weights = std::make_shared<RenamedWeights>(base, "mtp.fc.weight");
  EXPECT_EQ(test::load_error(files), "");
  // A text-only folder's weights (model.*) under a multimodal config: the missing name is the nested one.
  ModelFiles text = open_model(test::golden_dir("qwen3_5_text"));
  text.config = {{"architectures", {"Qwen3_5ForConditionalGeneration"}}, {"model_type", "qwen3_5"},
                 {"text_config", text.config}, {"tie_word_embeddings", true}};
  EXPECT_NE(test::load_error(text).find("model.language_model.embed_tokens.weight"), std::string::npos)
      << test::load_error(text);
}

TEST(Qwen3_5Multimodal, TextClassLoadsMultimodalWeights) {
  // transformers' Qwen3_5ForCausalLM reads a multimodal folder by dropping "language_model.".
  ModelFiles files = open_model(test::golden_dir("qwen3_5_vl"));
  nlohmann::json text = files.config["text_config"];
  text["architectures"] = {"Qwen3_5ForCausalLM"};
  files.config = text;
  EXPECT_LT(first_logit_error(files, expected("qwen3_5_vl")), 1e-3);
}

TEST(Qwen3_5Multimodal, MoeConditionalGenerationMatchesItsTextModel) {
  // The MoE text fixture's tensors seen under the multimodal names, with a multimodal config around it.
  ModelFiles files = open_model(test::golden_dir("qwen3_5_moe_text"));
  const auto ex = expected("qwen3_5_moe_text");
  ASSERT_FALSE(ex.is_null());
  const bool tie = files.config.value("tie_word_embeddings", false);
  files.config = {{"architectures", {"Qwen3_5MoeForConditionalGeneration"}}, {"model_type", "qwen3_5_moe"},
                  {"text_config", files.config}, {"tie_word_embeddings", tie},
                  {"vision_config", {{"model_type", "qwen3_5_moe_vision"}, {"depth", 1}}}};
  files.weights = std::make_shared<RenamedWeights>(files.weights, "", "model.language_model.", "model.");
  EXPECT_LT(first_logit_error(files, ex), 1e-3);
  files.config["text_config"].erase("model_type");
  EXPECT_LT(first_logit_error(files, ex), 1e-3);
  const std::string expert = "model.language_model.layers.1.mlp.experts.3.up_proj.weight";
  files.weights = std::make_shared<RenamedWeights>(files.weights, expert);
  EXPECT_NE(test::load_error(files).find(expert), std::string::npos) << test::load_error(files);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Qwen3NextForward, ::testing::ValuesIn(kFixtures),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tf
