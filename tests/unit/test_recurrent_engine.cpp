// Models with recurrent layers (Mamba2, Gated DeltaNet) in the engine: the state pool's bound,
// concurrent = solo, resumed = cold at several marks, siblings, failed rounds and the verify
// form (k positions of one lane in one round, with the states a rollback needs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <utility>

#include "engine/state_pool.h"
#include "model_fixture.h"

namespace tf {

namespace {

// Golden fixtures whose model carries recurrent state.
std::vector<std::string> hybrid_fixtures() {
  std::vector<std::string> out;
  for (const auto& name : test::golden_models()) {
    ModelFiles files = open_model(test::golden_dir(name));
    const std::string type = files.config.value("model_type", "");
    if (type == "nemotron_h" || type.rfind("qwen3_next", 0) == 0 || type.rfind("qwen3_5", 0) == 0) out.push_back(name);
  }
  return out;
}

using test::expect_same;
using test::random_tokens;
using test::submit_all;

void expect_idle(const Engine& e, const std::string& what) {
  EXPECT_TRUE(e.audit()) << what;
  EXPECT_EQ(e.state_pool().in_use(), 0) << what;
  EXPECT_EQ(e.census().used, 0) << what;
}

}  // namespace

TEST(StatePool, SizedForTheWorstCaseAndTheNextSlotIsTheLast) {
  for (int lanes : {1, 4, 64}) {
    StatePool pool(lanes);
    ASSERT_EQ(pool.capacity(), 2 * lanes + 3);
    std::vector<int> held;
    // Worst case: every lane's state and its pending forward, one restore and one snapshot staged.
    for (int i = 0; i < 2 * lanes + 2; ++i) held.push_back(pool.alloc());
    EXPECT_EQ(pool.free_count(), 1);
    const int last = pool.alloc();
    EXPECT_EQ(last, pool.capacity() - 1) << "the spare is the last slot";
    EXPECT_THROW(pool.alloc(), Error);
    EXPECT_EQ(pool.high_water(), pool.capacity());
    pool.release(last);
    EXPECT_THROW(pool.release(last), Error) << "a double release is caught";
    EXPECT_EQ(pool.alloc(), last) << "a returned slot is reused";
  }
}

// A new sequence's state slot is cleared by the backend's fill: that slot only, every value, NaN too.
TEST(StatePool, ZeroClearsOneSlotAndNoOther) {
  const char* device = std::getenv("TF_TEST_DEVICE");
  auto be = make_backend(device && *device ? device : "cpu", 2);
  const int64_t slots = 3, floats = 1037;
  std::vector<float> v(static_cast<size_t>(slots * floats));
  for (size_t i = 0; i < v.size(); ++i) v[i] = i % 7 == 3 ? std::nanf("") : 0.5f + static_cast<float>(i);
  Tensor t = be->alloc(slots, floats);
  be->from_host(v.data(), t);
  be->zero(t.slice_rows(1, 1));
  std::vector<float> got(v.size());
  be->to_host(t, got.data());
  for (int64_t s = 0; s < slots; ++s)
    for (int64_t i = 0; i < floats; ++i) {
      const size_t at = static_cast<size_t>(s * floats + i);
      if (s == 1) {
        const float zero = 0.0f;  // +0 exactly: -0 or a NaN left behind differ in their bits
        ASSERT_EQ(std::memcmp(&got[at], &zero, 4), 0) << "slot 1 value " << i << " is " << got[at];
      } else {
        ASSERT_EQ(std::memcmp(&got[at], &v[at], 4), 0) << "slot " << s << " value " << i << " changed";
      }
    }
  be->free(t);
}

TEST(RecurrentEngine, HybridFixturesExist) { EXPECT_GE(hybrid_fixtures().size(), 2u); }

class Recurrent : public ::testing::TestWithParam<std::string> {};

TEST_P(Recurrent, ConcurrentEqualsSolo) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 2);
  ASSERT_GT(m->model->state_floats(), 0);
  const int32_t V = m->model->vocab_size();
  std::mt19937 rng(5);
  std::vector<test::Job> jobs;
  for (int len : {1, 7, 16, 33, 50, 64, 71, 90}) {
    test::Job j;
    j.prompt = random_tokens(rng, len, V);
    j.max_tokens = 6;
    j.sampling.temperature = jobs.size() % 2 ? 1.0f : 0.0f;
    j.sampling.seed = 100 + jobs.size();
    jobs.push_back(j);
  }
  EngineOptions solo_opt;
  solo_opt.context = 128;
  solo_opt.chunk = 16;
  std::vector<test::Trace> solo;
  for (const auto& j : jobs) solo.push_back(test::run_jobs(*m->model, *m->backend, solo_opt, {j})[0]);
  // Then rounds of several prompts' chunks: the recurrent layers take each lane's span apart.
  for (auto [lanes, round_tokens] : {std::pair{2, 0}, {4, 0}, {8, 0}, {8, 64}}) {
    EngineOptions opt = solo_opt;
    opt.lanes = lanes;
    opt.round_tokens = round_tokens;
    Engine e(*m->model, *m->backend, opt);
    auto runs = submit_all(e, jobs, V);
    for (size_t i = 0; i < jobs.size(); ++i)
      expect_same(solo[i], runs[i].trace,
                  GetParam() + " lanes " + std::to_string(lanes) + " round tokens " + std::to_string(round_tokens) +
                      " job " + std::to_string(i));
    EXPECT_LE(e.state_pool().high_water(), 2 * lanes) << "each lane holds its state and at most one pending";
    expect_idle(e, "after concurrent jobs");
  }
}

TEST_P(Recurrent, ResumedEqualsColdAtSeveralMarks) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 2);
  const int32_t V = m->model->vocab_size();
  std::mt19937 rng(8);
  const EngineOptions opt = test::cached_options(4, 160, 64), cold_opt = test::without_cache(opt);
  Engine warm(*m->model, *m->backend, opt);
  const auto base = random_tokens(rng, 100, V);
  // Cold once, so the store holds states at marks 16..96.
  test::Job first;
  first.prompt = base;
  first.max_tokens = 4;
  auto r0 = submit_all(warm, {first}, V);
  expect_same(test::run_jobs(*m->model, *m->backend, cold_opt, {first})[0], r0[0].trace, "first");
  // Prompts sharing 20..100 tokens of it resume at the last mark they share (and before their last token).
  for (int shared : {20, 33, 48, 64, 81, 100}) {
    for (bool sampled : {false, true}) {
      test::Job j;
      j.prompt.assign(base.begin(), base.begin() + shared);
      auto tail = random_tokens(rng, 9, V);
      j.prompt.insert(j.prompt.end(), tail.begin(), tail.end());
      j.max_tokens = 5;
      j.sampling.temperature = sampled ? 0.8f : 0.0f;
      j.sampling.seed = 7;
      auto cold = test::run_jobs(*m->model, *m->backend, cold_opt, {j})[0];
      auto got = submit_all(warm, {j}, V);
      const int expect_mark = std::min(shared / 16 * 16, (static_cast<int>(j.prompt.size()) - 1) / 16 * 16);
      EXPECT_EQ(got[0].cached, expect_mark) << "shared " << shared;
      expect_same(cold, got[0].trace, GetParam() + " shared " + std::to_string(shared));
    }
  }
  // Four at once, all resuming.
  test::Job j;
  j.prompt = base;
  j.max_tokens = 6;
  auto cold = test::run_jobs(*m->model, *m->backend, cold_opt, {j})[0];
  for (const auto& r : submit_all(warm, {j, j, j, j}, V)) {
    EXPECT_EQ(r.cached, 96);
    expect_same(cold, r.trace, "4 at once");
  }
  EXPECT_GT(warm.cache_stats().states, 0u);
  expect_idle(warm, "after resumes");
}

TEST_P(Recurrent, StateBudgetEvictsSnapshotsAndStaysExact) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 1);
  const int32_t V = m->model->vocab_size();
  std::mt19937 rng(12);
  EngineOptions opt = test::cached_options(2, 128, 32);
  opt.state_cache_bytes = 3 * static_cast<uint64_t>(m->model->state_floats()) * sizeof(float);
  const EngineOptions cold_opt = test::without_cache(opt);
  Engine warm(*m->model, *m->backend, opt);
  std::vector<test::Job> convs(4);
  for (auto& c : convs) {
    c.prompt = random_tokens(rng, 40, V);
    c.max_tokens = 3;
  }
  for (int round = 0; round < 2; ++round)
    for (const auto& c : convs) {
      auto cold = test::run_jobs(*m->model, *m->backend, cold_opt, {c})[0];
      auto got = submit_all(warm, {c}, V);
      expect_same(cold, got[0].trace, "round robin");
      EXPECT_LE(warm.cache_stats().states, 3u);
      expect_idle(warm, "round robin");
    }
}

TEST_P(Recurrent, ABudgetBelowOneStateKeepsNoneAndRecomputes) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 1);
  const int32_t V = m->model->vocab_size();
  std::mt19937 rng(13);
  EngineOptions opt;
  opt.context = 96;
  opt.chunk = 16;
  opt.cache_pages = 16;
  opt.state_cache_bytes = 1;
  Engine e(*m->model, *m->backend, opt);
  test::Job j;
  j.prompt = random_tokens(rng, 40, V);
  j.max_tokens = 3;
  auto first = submit_all(e, {j}, V);
  auto again = submit_all(e, {j}, V);
  EXPECT_EQ(again[0].cached, 0) << "no state could be kept, so nothing is resumed";
  EXPECT_EQ(e.cache_stats().states, 0u);
  expect_same(first[0].trace, again[0].trace, "recomputed");
  expect_idle(e, "after recomputing");
}

TEST_P(Recurrent, SiblingsEqualSoloRequests) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 2);
  const int32_t V = m->model->vocab_size();
  std::mt19937 rng(31);
  EngineOptions opt;
  opt.lanes = 3;
  opt.context = 96;
  opt.chunk = 16;
  const auto prompt = random_tokens(rng, 37, V);
  std::vector<test::Job> jobs(3);
  for (int k = 0; k < 3; ++k) {
    jobs[static_cast<size_t>(k)].prompt = prompt;
    jobs[static_cast<size_t>(k)].max_tokens = 5;
    jobs[static_cast<size_t>(k)].sampling.temperature = 1.0f;
    jobs[static_cast<size_t>(k)].sampling.seed = 40 + static_cast<uint64_t>(k);
  }
  Engine e(*m->model, *m->backend, opt);
  const auto got = test::submit_siblings(e, jobs);
  for (int k = 0; k < 3; ++k) {
    auto solo = test::run_jobs(*m->model, *m->backend, opt, {jobs[static_cast<size_t>(k)]})[0];
    EXPECT_EQ(solo.tokens, got[static_cast<size_t>(k)].tokens) << "sibling " << k;
  }
  expect_idle(e, "after siblings");
}

namespace {

using test::FailingModel;

}  // namespace

TEST_P(Recurrent, FailedRoundReturnsItsSlots) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 1);
  FailingModel fm(*m->model);
  const int32_t V = m->model->vocab_size();
  EngineOptions opt;
  opt.lanes = 3;
  opt.context = 64;
  opt.chunk = 16;
  opt.cache_pages = 8;
  Engine e(fm, *m->backend, opt);
  std::mt19937 rng(2);
  std::vector<test::Job> jobs(3);
  for (auto& j : jobs) {
    j.prompt = random_tokens(rng, 21, V);
    j.max_tokens = 4;
  }
  auto before = submit_all(e, jobs, V);
  fm.armed = true;
  for (const auto& r : submit_all(e, jobs, V)) EXPECT_EQ(r.finish, FinishReason::Error);
  expect_idle(e, "after a failed round");
  fm.armed = false;
  auto after = submit_all(e, jobs, V);
  for (size_t i = 0; i < jobs.size(); ++i) expect_same(before[i].trace, after[i].trace, "after recovery");
  expect_idle(e, "after recovery");
}

TEST_P(Recurrent, VerifyRoundKeepsRollbackStates) {
  auto m = test::load_fixture(test::golden_dir(GetParam()), 2);
  Model& model = *m->model;
  Backend& b = *m->backend;
  const int32_t V = model.vocab_size();
  const int64_t S = model.state_floats();
  const int ps = 16, k = 4;
  model.reserve(64);
  auto kv = b.alloc_kv(std::max(1, model.n_kv_layers()), 8, ps, model.n_kv_heads(), model.head_dim());
  Tensor pool = b.alloc(8, S), keep_pool = b.alloc(k - 1, S);
  std::mt19937 rng(4);
  const auto prompt = random_tokens(rng, 20, V);
  const auto draft = random_tokens(rng, k, V);
  auto round = [&](int begin, const std::vector<int32_t>& toks, int src, int dst, bool step,
                   std::vector<int32_t> keep) {
    RoundInput in;
    in.tokens = toks;
    in.layout.seq_pages = {{0, 1, 2, 3}};
    for (size_t i = 0; i < toks.size(); ++i) {
      in.layout.pos.push_back(begin + static_cast<int>(i));
      in.layout.seq.push_back(0);
      in.logit_rows.push_back(static_cast<int>(i));
    }
    in.states.pool = pool.data;
    in.states.slot_floats = S;
    in.states.slots = 8;
    in.states.keep_slots = k - 1;
    in.states.src = {src};
    in.states.dst = {dst};
    in.states.step = {static_cast<uint8_t>(step)};
    in.states.keep_pool = keep_pool.data;
    in.states.keep = {std::move(keep)};
    std::vector<float> logits;
    model.forward(in, *kv, logits);
    return logits;
  };
  auto host = [&](Tensor t) {
    std::vector<float> v(static_cast<size_t>(t.rows * t.cols));
    b.to_host(t, v.data());
    return v;
  };
  round(0, prompt, 0, 1, false, {});
  const auto after_prompt = host(pool.slice_rows(1, 1));
  // k draft positions in one round, step form, keeping the states after the first k - 1.
  const auto verify = round(20, draft, 1, 2, true, {0, 1, 2});
  // The same positions one round each.
  int src = 1;
  for (int i = 0; i < k; ++i) {
    const int dst = 3 + i;
    const auto one = round(20 + i, {draft[static_cast<size_t>(i)]}, src, dst, true, {});
    EXPECT_EQ(std::memcmp(one.data(), verify.data() + static_cast<size_t>(i) * V, sizeof(float) * V), 0)
        << "verify row " << i << " equals a single decode step";
    const auto stepped = host(pool.slice_rows(dst, 1));
    const auto kept = i < k - 1 ? host(keep_pool.slice_rows(i, 1)) : host(pool.slice_rows(2, 1));
    EXPECT_EQ(std::memcmp(stepped.data(), kept.data(), sizeof(float) * static_cast<size_t>(S)), 0)
        << "state after draft " << i;
    src = dst;
  }
  // Rollback: accept one draft, restore its kept state and continue with another token.
  b.from_host(host(keep_pool.slice_rows(0, 1)).data(), pool.slice_rows(7, 1));
  const int32_t other = (draft[1] + 1) % V;
  const auto resumed = round(21, {other}, 7, 6, true, {});
  b.from_host(after_prompt.data(), pool.slice_rows(5, 1));
  round(20, {draft[0]}, 5, 4, true, {});
  const auto straight = round(21, {other}, 4, 3, true, {});
  EXPECT_EQ(std::memcmp(resumed.data(), straight.data(), sizeof(float) * V), 0) << "rollback equals the straight path";
  b.free(pool);
  b.free(keep_pool);
}

INSTANTIATE_TEST_SUITE_P(Hybrids, Recurrent, ::testing::ValuesIn(hybrid_fixtures()),
                         [](const auto& info) { return info.param; });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(Recurrent);

}  // namespace tf
