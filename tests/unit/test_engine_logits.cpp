// The engine's logits buffer: kept across rounds, page-locked once per allocation through the
// backend, unpinned when it grows and when the engine ends.
#include <gtest/gtest.h>

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

}  // namespace

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
