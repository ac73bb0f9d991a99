// Nemotron-H through Model::forward directly (state slots built here): greedy prefill-then-decode
// against transformers' tokens and logits, and a prompt's logits unchanged by item splits at chunk
// marks and by other sequences sharing its rounds.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model_fixture.h"

namespace tf {
namespace {

constexpr int kPage = 16, kPages = 16;

struct Runner {
  std::unique_ptr<test::LoadedModel> lm;
  std::unique_ptr<KvStorage> kv;
  Tensor pool;
  explicit Runner(const std::string& name, int threads = 2) {
    lm = test::load_fixture(test::golden_dir(name), threads);
    Model& m = *lm->model;
    kv = lm->backend->alloc_kv(std::max(1, m.n_kv_layers()), kPages, kPage, m.n_kv_heads(), m.head_dim());
    pool = lm->backend->alloc(8, m.state_floats());
    m.reserve(128);
  }
  // One round: per sequence its tokens, first position, pages, src/dst slots and step flag.
  struct Seq {
    std::vector<int32_t> tokens;
    int pos0;
    std::vector<int32_t> pages;
    int32_t src, dst;
    uint8_t step;
  };
  std::vector<std::vector<float>> round(const std::vector<Seq>& seqs) {
    RoundInput in;
    in.states.pool = pool.data;
    in.states.slot_floats = pool.cols;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const Seq& q = seqs[s];
      for (size_t i = 0; i < q.tokens.size(); ++i) {
        in.tokens.push_back(q.tokens[i]);
        in.layout.pos.push_back(q.pos0 + static_cast<int32_t>(i));
        in.layout.seq.push_back(static_cast<int32_t>(s));
      }
      in.layout.seq_pages.push_back(q.pages);
      in.logit_rows.push_back(static_cast<int32_t>(in.tokens.size()) - 1);
      in.states.src.push_back(q.src);
      in.states.dst.push_back(q.dst);
      in.states.step.push_back(q.step);
    }
    std::vector<float> lg;
    lm->model->forward(in, *kv, lg);
    const size_t V = static_cast<size_t>(lm->model->vocab_size());
    std::vector<std::vector<float>> out;
    for (size_t s = 0; s < seqs.size(); ++s) out.emplace_back(lg.begin() + s * V, lg.begin() + (s + 1) * V);
    return out;
  }
  void clear_slot(int32_t slot) {
    std::vector<float> z(static_cast<size_t>(pool.cols), 0.0f);
    lm->backend->from_host(z.data(), pool.slice_rows(slot, 1));
  }
};

std::vector<int32_t> pages(int first, int n) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back(first + i);
  return p;
}

int argmax(const std::vector<float>& v) {
  return static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Prompt prefill in items of `item` rows (0: one item), then greedy decode of n tokens.
std::vector<std::vector<float>> generate(Runner& r, const std::vector<int32_t>& prompt, int n, int item,
                                         std::vector<int32_t>* tokens) {
  r.clear_slot(0);
  int32_t src = 0, dst = 1;
  std::vector<std::vector<float>> logits;
  const int P = static_cast<int>(prompt.size()), step = item > 0 ? item : P;
  std::vector<float> last;
  for (int b0 = 0; b0 < P; b0 += step) {
    const int e = std::min(P, b0 + step);
    last = r.round({{std::vector<int32_t>(prompt.begin() + b0, prompt.begin() + e), b0, pages(0, 8), src, dst, 0}})[0];
    std::swap(src, dst);
  }
  logits.push_back(last);
  for (int i = 0; i + 1 < n; ++i) {
    const int32_t t = argmax(logits.back());
    tokens->push_back(t);
    logits.push_back(r.round({{{t}, P + i, pages(0, 8), src, dst, 1}})[0]);
    std::swap(src, dst);
  }
  tokens->push_back(argmax(logits.back()));
  return logits;
}

class NemotronH : public ::testing::TestWithParam<std::string> {};

TEST_P(NemotronH, ForwardMatchesTransformers) {
  std::ifstream f(test::golden_dir(GetParam()) + "/expected.json");
  ASSERT_TRUE(f);
  const nlohmann::json expected = nlohmann::json::parse(f);
  Runner r(GetParam());
  EXPECT_GT(r.lm->model->state_floats(), 0);
  int compared = 0;
  for (const auto& c : expected["cases"]) {
    const auto prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto ref = c["tokens"].get<std::vector<int32_t>>();
    const auto first = c["first_logits"].get<std::vector<float>>();
    std::vector<int32_t> ours;
    const auto logits = generate(r, prompt, static_cast<int>(ref.size()), 0, &ours);
    double err = 0;
    for (size_t i = 0; i < first.size(); ++i)
      err = std::max(err, std::fabs(logits[0][i] - first[i]) / (1.0 + std::fabs(first[i])));
    EXPECT_LT(err, 1e-3) << GetParam() << " prompt of " << prompt.size();
    std::printf("%s prompt %zu: first-logit max rel err %.3g\n", GetParam().c_str(), prompt.size(), err);
    for (size_t s = 0; s < ref.size(); ++s) {
      EXPECT_EQ(ours[s], ref[s]) << GetParam() << " prompt " << prompt.size() << " step " << s;
      ++compared;
      if (ours[s] != ref[s] || c["steps"][s]["margin"].get<double>() < 1e-3) break;
    }
  }
  EXPECT_GT(compared, 60);
}

TEST_P(NemotronH, ItemSplitsAtMarksAndCompanyKeepLogitsBitIdentical) {
  Runner r(GetParam());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 53; ++i) prompt.push_back((i * 37 + 5) % 512);
  std::vector<int32_t> t1, t2;
  const auto whole = generate(r, prompt, 4, 0, &t1);
  const auto split = generate(r, prompt, 4, 16, &t2);  // marks at multiples of the SSD chunk
  EXPECT_EQ(whole, split);
  // The same prompt prefilled beside another sequence, which decodes a step meanwhile.
  r.clear_slot(0);
  r.clear_slot(4);
  r.round({{{5, 6, 7}, 0, pages(8, 4), 4, 5, 0}});
  const auto both = r.round({{{9}, 3, pages(8, 4), 5, 6, 1}, {prompt, 0, pages(0, 8), 0, 1, 0}});
  EXPECT_EQ(both[1], whole[0]);
}

TEST_P(NemotronH, MissingStateIsAnError) {
  Runner r(GetParam());
  RoundInput in;
  in.tokens = {1, 2};
  in.layout.pos = {0, 1};
  in.layout.seq = {0, 0};
  in.layout.seq_pages = {pages(0, 1)};
  in.logit_rows = {1};
  std::vector<float> lg;
  EXPECT_THROW(r.lm->model->forward(in, *r.kv, lg), Error);
}

// The older config form: the hybrid_override_pattern string instead of layers_block_type, no
// num_hidden_layers; a bad pattern character is an error naming it.
TEST(NemotronHConfig, OverridePatternEqualsBlockTypeList) {
  Runner r("nemotron_h_dense");
  ModelFiles files = open_model(test::golden_dir("nemotron_h_dense"));
  files.config.erase("layers_block_type");
  files.config.erase("num_hidden_layers");
  files.config["hybrid_override_pattern"] = "M*M-M-";
  auto model = load_model(files, *r.lm->backend);
  EXPECT_EQ(model->n_layers(), 6);
  EXPECT_EQ(model->n_kv_layers(), 1);
  EXPECT_EQ(model->state_floats(), r.lm->model->state_floats());
  // 3 mamba layers of conv (4 - 1) x 192 and scan 8 x 16 x 16 floats.
  EXPECT_EQ(model->state_floats(), 3 * (3 * 192 + 8 * 16 * 16));
  files.config["hybrid_override_pattern"] = "M*M-X-";
  EXPECT_THROW(load_model(files, *r.lm->backend), Error);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, NemotronH, ::testing::Values("nemotron_h_dense", "nemotron_h_moe"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tf
