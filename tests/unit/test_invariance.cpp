// Batch invariance end to end: a request's logits are bit-identical alone or beside others,
// and whether its prompt was prefilled in one chunk or many.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "model_fixture.h"

namespace tf {

namespace {

std::vector<test::Job> make_jobs(int n, int32_t vocab, bool sampled) {
  std::mt19937 rng(7);
  std::vector<test::Job> jobs;
  for (int i = 0; i < n; ++i) {
    test::Job j;
    int len = 1 + static_cast<int>(rng() % 40);
    for (int t = 0; t < len; ++t) j.prompt.push_back(static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab)));
    j.max_tokens = 6;
    j.sampling.temperature = sampled ? 1.0f : 0.0f;
    j.sampling.seed = 100 + static_cast<uint64_t>(i);
    jobs.push_back(j);
  }
  return jobs;
}

void expect_identical(const test::Trace& a, const test::Trace& b, const std::string& what) {
  EXPECT_EQ(a.tokens, b.tokens) << what;
  ASSERT_EQ(a.logits.size(), b.logits.size()) << what;
  for (const auto& [pos, row] : a.logits) {
    const auto& other = b.logits.at(pos);
    ASSERT_EQ(row.size(), other.size());
    EXPECT_EQ(std::memcmp(row.data(), other.data(), row.size() * sizeof(float)), 0) << what << " position " << pos;
  }
}

}  // namespace

class Invariance : public ::testing::TestWithParam<std::string> {};

TEST_P(Invariance, ConcurrentEqualsSoloBitForBit) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 2);
  for (bool sampled : {false, true}) {
    auto jobs = make_jobs(64, m->model->vocab_size(), sampled);
    EngineOptions solo;
    solo.context = 64;
    std::vector<test::Trace> alone;
    for (const auto& j : jobs) alone.push_back(test::run_jobs(*m->model, *m->backend, solo, {j})[0]);
    for (int lanes : {2, 4, 8, 64}) {
      EngineOptions opt;
      opt.lanes = lanes;
      opt.context = 64;
      auto together = test::run_jobs(*m->model, *m->backend, opt, jobs);
      for (size_t i = 0; i < jobs.size(); ++i)
        expect_identical(alone[i], together[i], GetParam() + " lanes " + std::to_string(lanes) + " job " + std::to_string(i));
    }
  }
}

TEST_P(Invariance, ChunkedPrefillEqualsOneChunk) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 2);
  auto jobs = make_jobs(6, m->model->vocab_size(), false);
  EngineOptions one;
  one.context = 64;
  one.chunk = 64;
  auto base = test::run_jobs(*m->model, *m->backend, one, jobs);
  for (int chunk : {1, 2, 7, 16}) {
    EngineOptions opt = one;
    opt.chunk = chunk;
    opt.lanes = 3;
    auto other = test::run_jobs(*m->model, *m->backend, opt, jobs);
    for (size_t i = 0; i < jobs.size(); ++i) expect_identical(base[i], other[i], "chunk " + std::to_string(chunk));
  }
}

TEST_P(Invariance, RoundBudgetChangesRoundsNotBits) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 2);
  const int32_t V = m->model->vocab_size();
  auto jobs = make_jobs(24, V, true);
  EngineOptions opt;
  opt.lanes = 8;
  opt.context = 64;
  opt.chunk = 16;
  auto run = [&](int round_tokens, uint64_t& rounds) {
    EngineOptions o = opt;
    o.round_tokens = round_tokens;
    Engine e(*m->model, *m->backend, o);
    std::vector<test::Trace> traces;
    for (auto& r : test::submit_all(e, jobs, V)) traces.push_back(std::move(r.trace));
    rounds = e.stats().rounds;
    EXPECT_TRUE(e.audit());
    return traces;
  };
  uint64_t one = 0, wide = 0, widest = 0;
  const auto base = run(0, one);
  const auto b = run(48, wide), c = run(4096, widest);
  for (size_t i = 0; i < jobs.size(); ++i) {
    expect_identical(base[i], b[i], "48 round tokens, job " + std::to_string(i));
    expect_identical(base[i], c[i], "4096 round tokens, job " + std::to_string(i));
  }
  // The budget took several prompts' chunks a round.
  EXPECT_LT(wide, one);
  EXPECT_LE(widest, wide);
  EngineOptions bad = opt;
  bad.round_tokens = 15;
  EXPECT_THROW(Engine(*m->model, *m->backend, bad), Error);
}

TEST_P(Invariance, ThreadCountDoesNotChangeBits) {
  auto m1 = test::load_fixture(test::golden_dir(GetParam()), 1);
  auto m3 = test::load_fixture(test::golden_dir(GetParam()), 3);
  auto jobs = make_jobs(4, m1->model->vocab_size(), true);
  EngineOptions opt;
  opt.lanes = 4;
  opt.context = 64;
  auto a = test::run_jobs(*m1->model, *m1->backend, opt, jobs);
  auto b = test::run_jobs(*m3->model, *m3->backend, opt, jobs);
  for (size_t i = 0; i < jobs.size(); ++i) expect_identical(a[i], b[i], "threads 1 vs 3");
}

INSTANTIATE_TEST_SUITE_P(Families, Invariance, ::testing::Values("llama", "qwen3", "qwen3_moe", "qwen2_moe"),
                         [](const auto& info) { return info.param; });

}  // namespace tf
