// Our greedy tokens and logits against transformers' on tiny random models of every family
// (fixtures made by scripts/make_golden.py).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include <nlohmann/json.hpp>

#include "model_fixture.h"

namespace tf {

class Golden : public ::testing::TestWithParam<std::string> {};

TEST_P(Golden, GreedyTokensAndLogitsMatchTransformers) {
  const std::string dir = test::golden_dir(GetParam());
  std::ifstream f(dir + "/expected.json");
  ASSERT_TRUE(f) << dir;
  nlohmann::json expected = nlohmann::json::parse(f);
  auto m = test::load_fixture(dir);
  const int32_t V = m->model->vocab_size();
  int compared_steps = 0;
  for (const auto& c : expected["cases"]) {
    test::Job job;
    job.prompt = c["prompt"].get<std::vector<int32_t>>();
    const auto ref_tokens = c["tokens"].get<std::vector<int32_t>>();
    job.max_tokens = static_cast<int>(ref_tokens.size());
    job.sampling.temperature = 0;
    EngineOptions opt;
    opt.context = 128;
    auto traces = test::run_jobs(*m->model, *m->backend, opt, {job});
    const auto& ours = traces[0].tokens;
    // Logits of the first generated position, within tolerance.
    const auto ref_first = c["first_logits"].get<std::vector<float>>();
    const auto& our_first = traces[0].logits.at(static_cast<int>(job.prompt.size()) - 1);
    ASSERT_EQ(ref_first.size(), static_cast<size_t>(V));
    double max_err = 0;
    for (int32_t i = 0; i < V; ++i)
      max_err = std::max(max_err, std::fabs(static_cast<double>(our_first[i]) - ref_first[static_cast<size_t>(i)]) /
                                      (1.0 + std::fabs(ref_first[static_cast<size_t>(i)])));
    EXPECT_LT(max_err, 1e-3) << GetParam() << " prompt of " << job.prompt.size();
    // Tokens equal up to the first step where the reference's top-2 margin is below 1e-3.
    for (size_t s = 0; s < ref_tokens.size(); ++s) {
      ASSERT_LT(s, ours.size()) << GetParam();
      EXPECT_EQ(ours[s], ref_tokens[s]) << GetParam() << " step " << s;
      ++compared_steps;
      if (ours[s] != ref_tokens[s]) break;
      if (c["steps"][s]["margin"].get<double>() < 1e-3) break;
    }
  }
  EXPECT_GT(compared_steps, 20);
}

INSTANTIATE_TEST_SUITE_P(AllFixtures, Golden, ::testing::ValuesIn(test::golden_models()),
                         [](const auto& info) { return info.param; });

TEST(Registry, EveryFamilyHasAGoldenFixture) {
  const auto fixtures = test::golden_models();
  for (const auto& fam : model_registry()) {
    bool found = false;
    for (const auto& f : fixtures) found |= f.rfind(fam.name, 0) == 0;
    EXPECT_TRUE(found) << "family " << fam.name << " has no golden fixture";
  }
}

TEST(Registry, UnknownArchitectureListsTheSupportedOnes) {
  ModelFiles files;
  files.path = "/nowhere";
  files.config = {{"architectures", {"FancyNetForCausalLM"}}, {"model_type", "fancy"}, {"hidden_size", 64},
                  {"num_hidden_layers", 1}, {"num_attention_heads", 4}, {"intermediate_size", 8},
                  {"vocab_size", 16}};
  const std::string msg = test::load_error(files);
  ASSERT_FALSE(msg.empty()) << "expected an error";
  EXPECT_NE(msg.find("FancyNetForCausalLM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LlamaForCausalLM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("Qwen3MoeForCausalLM"), std::string::npos) << msg;
}

}  // namespace tf
