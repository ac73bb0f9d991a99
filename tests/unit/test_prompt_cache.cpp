// Resumed equals cold: a prompt that adopts cached pages gives bit-identical logits and the same
// tokens as one computed from scratch; the page census holds after every request and failure.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "model_fixture.h"

namespace tf {

namespace {

using test::expect_same;
using test::random_tokens;
using test::submit_all;

void expect_census(const Engine& e, const std::string& what) {
  EXPECT_TRUE(e.audit()) << what;
  Census c = e.census();
  EXPECT_TRUE(c.ok()) << what << ": free " << c.free << " kept " << c.kept << " used " << c.used << " total " << c.total;
  EXPECT_EQ(c.used, 0) << what;
}

}  // namespace

class PromptCache : public ::testing::TestWithParam<std::string> {};

TEST_P(PromptCache, ResumedEqualsCold) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 2);
  const int32_t V = m->model->vocab_size();
  std::mt19937 rng(3);
  const EngineOptions opt = test::cached_options(4, 128, 64), cold_opt = test::without_cache(opt);
  Engine warm(*m->model, *m->backend, opt);
  for (bool sampled : {false, true}) {
    test::Job j;
    j.prompt = random_tokens(rng, 70, V);
    j.max_tokens = 8;
    j.sampling.temperature = sampled ? 1.0f : 0.0f;
    j.sampling.seed = 11;
    auto cold = test::run_jobs(*m->model, *m->backend, cold_opt, {j})[0];
    auto first = submit_all(warm, {j}, V);
    EXPECT_EQ(first[0].cached, 0);
    expect_same(cold, first[0].trace, "first");
    auto again = submit_all(warm, {j}, V);
    EXPECT_EQ(again[0].cached, 64) << "a 70-token prompt resumes from the mark at 64";
    expect_same(cold, again[0].trace, "again");
    auto many = submit_all(warm, {j, j, j, j}, V);
    for (const auto& r : many) {
      EXPECT_GT(r.cached, 0);
      expect_same(cold, r.trace, "4 at once");
    }
    // A conversation's next turn: the old prompt, the reply, then more.
    test::Job next = j;
    next.prompt.insert(next.prompt.end(), cold.tokens.begin(), cold.tokens.end());
    auto more = random_tokens(rng, 20, V);
    next.prompt.insert(next.prompt.end(), more.begin(), more.end());
    auto cold_next = test::run_jobs(*m->model, *m->backend, cold_opt, {next})[0];
    auto warm_next = submit_all(warm, {next}, V);
    EXPECT_EQ(warm_next[0].cached, 64);
    expect_same(cold_next, warm_next[0].trace, "next turn");
    expect_census(warm, "after turns");
  }
  // Salts isolate tenants.
  test::Job j;
  j.prompt = random_tokens(rng, 40, V);
  j.max_tokens = 2;
  submit_all(warm, {j}, V, "a");
  EXPECT_EQ(submit_all(warm, {j}, V, "b")[0].cached, 0);
  EXPECT_EQ(submit_all(warm, {j}, V, "a")[0].cached, 32);
}

TEST_P(PromptCache, RoundRobinPastTheCapStaysExact) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 2);
  const int32_t V = m->model->vocab_size();
  std::mt19937 rng(5);
  EngineOptions opt = test::cached_options(2, 96, 6);  // three 2-page prefixes fit; the round robin below needs five
  opt.host_cache_bytes = GetParam() == "llama" ? (1u << 20) : 0;  // one family through the host tier
  Engine warm(*m->model, *m->backend, opt);
  const EngineOptions cold_opt = test::without_cache(opt);
  std::vector<test::Job> convs(5);
  for (auto& c : convs) {
    c.prompt = random_tokens(rng, 40, V);
    c.max_tokens = 4;
  }
  std::vector<test::Trace> cold;
  for (const auto& c : convs) cold.push_back(test::run_jobs(*m->model, *m->backend, cold_opt, {c})[0]);
  int hits = 0;
  for (int round = 0; round < 3; ++round)
    for (size_t i = 0; i < convs.size(); ++i) {
      auto r = submit_all(warm, {convs[i]}, V);
      hits += r[0].cached > 0;
      expect_same(cold[i], r[0].trace, "round robin");
      expect_census(warm, "round robin");
      EXPECT_LE(warm.census().kept, 6);
    }
  const auto st = warm.cache_stats();
  EXPECT_GT(st.evictions, 0u);
  if (opt.host_cache_bytes > 0) {
    EXPECT_GT(st.restores, 0u);
    EXPECT_GT(hits, 5);
  }
  // Page pressure: a context-filling request evicts kept pages and still runs exactly.
  test::Job big;
  big.prompt = random_tokens(rng, 90, V);
  big.max_tokens = 6;
  auto cold_big = test::run_jobs(*m->model, *m->backend, cold_opt, {big})[0];
  auto r = submit_all(warm, {big, convs[0]}, V);
  expect_same(cold_big, r[0].trace, "under pressure");
  expect_same(cold[0], r[1].trace, "beside pressure");
  expect_census(warm, "after pressure");
}

INSTANTIATE_TEST_SUITE_P(Families, PromptCache, ::testing::Values("llama", "qwen3_moe"),
                         [](const auto& info) { return info.param; });

namespace {

using test::FailingModel;

}  // namespace

TEST(PromptCache, FailedRoundReturnsItsPages) {
  auto m = test::load_fixture(test::golden_dir("llama"), 1);
  FailingModel fm(*m->model);
  EngineOptions opt;
  opt.lanes = 3;
  opt.context = 64;
  opt.chunk = 16;
  opt.cache_pages = 8;
  Engine e(fm, *m->backend, opt);
  std::mt19937 rng(9);
  std::vector<test::Job> jobs(3);
  for (auto& j : jobs) {
    j.prompt = random_tokens(rng, 33, m->model->vocab_size());
    j.max_tokens = 5;
  }
  submit_all(e, jobs, m->model->vocab_size());
  expect_census(e, "before");
  fm.armed = true;
  int errors = 0;
  for (const auto& j : jobs) {
    GenerationRequest req;
    req.prompt = j.prompt;
    req.max_tokens = 5;
    req.on_event = [&](const TokenEvent& ev) { errors += ev.finish == FinishReason::Error; };
    e.submit(std::move(req));
  }
  e.run_until_idle();
  EXPECT_EQ(errors, 3);
  expect_census(e, "after a failed round");
  fm.armed = false;
  auto again = submit_all(e, jobs, m->model->vocab_size());
  EXPECT_EQ(again[0].trace.tokens.size(), 5u);
  expect_census(e, "after recovery");
}

}  // namespace tf

namespace tf {

TEST(SiblingGroup, SharedPrefillEqualsSoloRequests) {
  auto m = test::load_fixture(test::golden_dir("qwen3"), 2);
  const int32_t V = m->model->vocab_size();
  std::mt19937 rng(21);
  for (int len : {16, 37}) {  // a full last page and a partial one
    std::vector<int32_t> prompt = random_tokens(rng, len, V);
    EngineOptions opt;
    opt.lanes = 4;
    opt.context = 64;
    opt.chunk = 16;
    Engine e(*m->model, *m->backend, opt);
    std::vector<test::Job> jobs(3);
    for (int k = 0; k < 3; ++k) {
      jobs[static_cast<size_t>(k)].prompt = prompt;
      jobs[static_cast<size_t>(k)].max_tokens = 10;
      jobs[static_cast<size_t>(k)].sampling.temperature = 1.0f;
      jobs[static_cast<size_t>(k)].sampling.seed = 500 + static_cast<uint64_t>(k);
    }
    const auto got = test::submit_siblings(e, jobs);
    expect_census(e, "after a group");
    EXPECT_EQ(e.stats().prompt_tokens, static_cast<uint64_t>(len)) << "the prompt is prefilled once";
    int distinct = 0;
    for (int k = 0; k < 3; ++k) {
      EngineOptions solo = opt;
      solo.lanes = 1;
      auto ref = test::run_jobs(*m->model, *m->backend, solo, {jobs[static_cast<size_t>(k)]})[0];
      EXPECT_EQ(got[static_cast<size_t>(k)].tokens, ref.tokens) << "sibling " << k << " prompt " << len;
      distinct += k > 0 && got[static_cast<size_t>(k)].tokens != got[0].tokens;
    }
    EXPECT_GT(distinct, 0);
  }
}

}  // namespace tf
