// The engine's logits buffer: kept across rounds, page-locked once per allocation through the
// backend, unpinned when it grows and when the engine ends; rows the host does not read stay on
// the backend, which draws their tokens.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <set>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "model_fixture.h"

namespace tf {

namespace {

// A cpu backend that records the ranges the engine pins and unpins.
class PinRecorder : public cpu::CpuBackend {
 public:
  PinRecorder() : cpu::CpuBackend(2, cpu::best_kernels()) {}
  void pin_host(void* p, uint64_t bytes) override {
    ++pins;
    EXPECT_EQ(live.count(p), 0u) << "range pinned twice";
    live[p] = bytes;
  }
  void unpin_host(void* p) override {
    if (p == nullptr) return;
    EXPECT_EQ(live.count(p), 1u) << "unpinning a range that is not pinned";
    live.erase(p);
  }
  int pins = 0;
  std::map<void*, uint64_t> live;
};

std::vector<test::Job> jobs(int n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<test::Job> out;
  for (int i = 0; i < n; ++i) {
    test::Job j;
    j.prompt = test::random_tokens(rng, 3 + static_cast<int>(rng() % 20), vocab);
    j.max_tokens = 5;
    out.push_back(j);
  }
  return out;
}

// Counts the logit rows the engine asks for whole, the others, and the draws it leaves to the backend.
class FlagSpy : public Model {
 public:
  explicit FlagSpy(Model& inner) : inner_(inner) { config_ = inner.config(); }
  void reserve(int rows) override { inner_.reserve(rows); }
  using Model::forward;
  void forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits, std::vector<int32_t>& sampled) override {
    for (size_t i = 0; i < in.logit_rows.size(); ++i) (in.logit_full.empty() || in.logit_full[i] ? full : device)++;
    draws += static_cast<int>(in.samples.size());
    // Rows left on the device must not be read: poison whatever the host buffer held.
    std::fill(logits.begin(), logits.end(), std::nanf(""));
    inner_.forward(in, kv, logits, sampled);
  }
  void reset() { full = device = draws = 0; }
  int full = 0, device = 0, draws = 0;

 private:
  Model& inner_;
};

// Tokens of each request, submitted together, without asking for any logits.
std::vector<std::vector<int32_t>> tokens_of(Engine& engine, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::vector<int32_t>> out(reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    GenerationRequest r = reqs[i];
    r.on_event = [&out, i](const TokenEvent& ev) {
      if (ev.token >= 0) out[i].push_back(ev.token);
    };
    engine.submit(std::move(r));
  }
  engine.run_until_idle();
  return out;
}

}  // namespace

TEST(EngineLogits, DrawsStayOnTheBackendAndLogprobsChangeNoToken) {
  cpu::CpuBackend be(2, cpu::best_kernels());
  const ModelFiles files = open_model(test::golden_dir("llama"));
  auto model = load_model(files, be);
  const int32_t V = model->vocab_size();
  FlagSpy spy(*model);
  EngineOptions opt;
  opt.lanes = 4;
  opt.context = 64;
  std::vector<GenerationRequest> reqs;
  for (const auto& j : jobs(6, V, 3)) {
    GenerationRequest r;
    r.prompt = j.prompt;
    r.max_tokens = 6;
    r.sampling.temperature = 0;
    reqs.push_back(r);
  }
  reqs[1].sampling.temperature = 0.8f;
  reqs[1].sampling.top_p = 0.9f;
  reqs[1].sampling.seed = 9;
  Engine engine(spy, be, opt);
  const auto plain = tokens_of(engine, reqs);
  EXPECT_EQ(spy.full, 0);
  EXPECT_EQ(spy.device, 6 * 6);
  EXPECT_EQ(spy.draws, 6 * 6);
  // Asking for logprobs brings the rows to the host but leaves the draws where they were.
  for (auto& r : reqs) r.logprobs = 0;
  spy.reset();
  EXPECT_EQ(tokens_of(engine, reqs), plain);
  EXPECT_EQ(spy.full, 6 * 6);
  EXPECT_EQ(spy.draws, 6 * 6);
  // Penalties too are applied on the backend, and logprobs leave them alone.
  for (auto& r : reqs) r.logprobs = -1;
  reqs[0].sampling.repetition_penalty = 1.3f;
  reqs[0].sampling.frequency_penalty = 0.5f;
  spy.reset();
  const auto mixed = tokens_of(engine, reqs);
  EXPECT_EQ(spy.full, 0);
  EXPECT_EQ(spy.draws, 6 * 6);
  for (size_t i = 1; i < reqs.size(); ++i) EXPECT_EQ(mixed[i], plain[i]) << "request " << i;
  reqs[0].logprobs = 0;
  EXPECT_EQ(tokens_of(engine, reqs)[0], mixed[0]);
  // Siblings draw from their shared prompt row on the backend, each with its own settings.
  std::vector<GenerationRequest> group(2, reqs[2]);
  group[1].sampling.temperature = 1.0f;
  spy.reset();
  engine.submit_group(group);
  engine.run_until_idle();
  EXPECT_EQ(spy.full, 0);
  EXPECT_EQ(spy.device, 1 + 5 + 5);
  EXPECT_EQ(spy.draws, 2 + 5 + 5);
}

TEST(EngineLogits, PenaltiesReachTheBackendsDraw) {
  cpu::CpuBackend be(2, cpu::best_kernels());
  const ModelFiles files = open_model(test::golden_dir("llama"));
  auto model = load_model(files, be);
  EngineOptions opt;
  opt.lanes = 2;
  opt.context = 64;
  Engine engine(*model, be, opt);
  GenerationRequest r;
  r.prompt = jobs(1, model->vocab_size(), 5)[0].prompt;
  r.max_tokens = 24;
  r.sampling.temperature = 0;
  auto repeats = [](const std::vector<int32_t>& t) { return std::set<int32_t>(t.begin(), t.end()).size() < t.size(); };
  const auto plain = tokens_of(engine, {r})[0];
  ASSERT_TRUE(repeats(plain)) << "greedy output without a repeat: the check below would prove nothing";
  // A frequency penalty far above the logits' spread forbids every token generated once.
  r.sampling.frequency_penalty = 1000.0f;
  const auto penalized = tokens_of(engine, {r})[0];
  EXPECT_EQ(penalized.size(), 24u);
  EXPECT_FALSE(repeats(penalized));
}

TEST(EngineLogits, PinnedOnceKeptAcrossRoundsAndUnpinnedAtTheEnd) {
  PinRecorder be;
  const ModelFiles files = open_model(test::golden_dir("llama"));
  auto model = load_model(files, be);
  const int32_t V = model->vocab_size();
  {
    EngineOptions opt;
    opt.lanes = 4;
    opt.context = 64;
    Engine engine(*model, be, opt);
    // submit_all asks for every prompt row's logits, so the first rounds are the widest.
    const auto a = jobs(8, V, 1);
    test::submit_all(engine, a, V);
    ASSERT_EQ(be.live.size(), 1u);
    EXPECT_GE(be.live.begin()->second, static_cast<uint64_t>(V) * sizeof(float));
    const int after_first = be.pins;
    // The same work again reuses the buffer: no new allocation, so no new pin.
    test::submit_all(engine, a, V);
    EXPECT_EQ(be.pins, after_first);
    EXPECT_EQ(be.live.size(), 1u);
    // Wider rounds grow it; the old range is unpinned before the new one is pinned.
    auto wide = jobs(4, V, 2);
    for (auto& j : wide) j.prompt.resize(55, 1);
    test::submit_all(engine, wide, V);
    EXPECT_GT(be.pins, after_first);
    EXPECT_EQ(be.live.size(), 1u);
  }
  EXPECT_TRUE(be.live.empty()) << "the engine left its logits buffer pinned";
}

}  // namespace tf
