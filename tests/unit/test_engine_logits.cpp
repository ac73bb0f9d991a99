// The engine's logits buffer: kept across rounds, page-locked once per allocation through the
// backend, unpinned when it grows and when the engine ends; greedy rows that only need their
// argmax never reach the host.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
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

// Counts the logit rows of each kind the engine asks for.
class FlagSpy : public Model {
 public:
  explicit FlagSpy(Model& inner) : inner_(inner) { config_ = inner.config(); }
  void reserve(int rows) override { inner_.reserve(rows); }
  using Model::forward;
  void forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits, std::vector<int32_t>& argmax) override {
    for (size_t i = 0; i < in.logit_rows.size(); ++i) (in.logit_full.empty() || in.logit_full[i] ? full : device)++;
    // Rows left on the device must not be read: poison whatever the host buffer held.
    std::fill(logits.begin(), logits.end(), std::nanf(""));
    inner_.forward(in, kv, logits, argmax);
  }
  int full = 0, device = 0;

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

TEST(EngineLogits, GreedyRowsTakeTheDeviceArgmaxAndGiveTheHostsTokens) {
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
  Engine engine(spy, be, opt);
  const auto greedy = tokens_of(engine, reqs);
  EXPECT_EQ(spy.full, 0);
  EXPECT_EQ(spy.device, 6 * 6);
  // The same requests asking for logprobs sample from host rows: the same tokens.
  for (auto& r : reqs) r.logprobs = 0;
  spy.full = spy.device = 0;
  EXPECT_EQ(tokens_of(engine, reqs), greedy);
  EXPECT_EQ(spy.full, 6 * 6);
  EXPECT_EQ(spy.device, 0);
  // Penalties, temperature and a sibling that samples all need the row on the host.
  for (auto& r : reqs) r.logprobs = -1;
  reqs[0].sampling.repetition_penalty = 1.1f;
  reqs[1].sampling.temperature = 0.8f;
  reqs[1].sampling.seed = 9;
  spy.full = spy.device = 0;
  const auto mixed = tokens_of(engine, reqs);
  EXPECT_EQ(spy.full, 2 * 6);
  EXPECT_EQ(spy.device, 4 * 6);
  for (size_t i = 2; i < reqs.size(); ++i) EXPECT_EQ(mixed[i], greedy[i]) << "request " << i;
  std::vector<GenerationRequest> group(2, reqs[2]);
  group[1].sampling.temperature = 1.0f;
  spy.full = spy.device = 0;
  engine.submit_group(group);
  engine.run_until_idle();
  EXPECT_EQ(spy.full, 1 + 5) << "the shared prompt row and the sampling sibling's decode rows";
  EXPECT_EQ(spy.device, 5);
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
