// Graph replay of a round's launches: graph_round's contract with a backend (run once, run again
// after a miss or a refusal), the models' round bodies under it, and on the GPU (TF_TEST_DEVICE=
// cuda) replayed rounds bit-identical to direct ones.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <random>
#include <string>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/cpu_kernels.h"
#include "models/blocks.h"
#include "model_fixture.h"

namespace tf {

namespace {

// A cpu backend that answers the graph hooks from a script; its "graphed" rounds still compute.
class ScriptedGraphs : public cpu::CpuBackend {
 public:
  enum class Script { Direct, Replay, Miss, RefuseThirdNorm };
  explicit ScriptedGraphs(Script s) : CpuBackend(2, cpu::best_kernels()), script_(s) {}
  bool graph_begin(int, uint64_t) override {
    ++begins;
    in_graph_ = script_ != Script::Direct;
    norms_ = 0;
    return in_graph_;
  }
  bool graph_end() override {
    ++ends;
    in_graph_ = false;
    return script_ == Script::Replay;
  }
  void graph_abort() override {
    ++aborts;
    in_graph_ = false;
  }
  void add_rmsnorm(Tensor x, const Tensor& a, const Weight& g, float eps, bool add_one, Tensor y) override {
    if (in_graph_ && script_ == Script::RefuseThirdNorm && ++norms_ == 3) throw GraphRefused{};
    CpuBackend::add_rmsnorm(x, a, g, eps, add_one, y);
  }
  int begins = 0, ends = 0, aborts = 0;

 private:
  Script script_;
  bool in_graph_ = false;
  int norms_ = 0;
};

using Script = ScriptedGraphs::Script;

}  // namespace

TEST(GraphRound, DirectWhenTheBackendKeepsNoGraph) {
  ScriptedGraphs b(Script::Direct);
  int runs = 0;
  graph_round(b, 1, 7, [&] { ++runs; });
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(b.ends, 0);
  EXPECT_EQ(b.aborts, 0);
}

TEST(GraphRound, ReplayedRoundRunsItsBodyOnce) {
  ScriptedGraphs b(Script::Replay);
  int runs = 0;
  graph_round(b, 1, 7, [&] { ++runs; });
  EXPECT_EQ(runs, 1);
  EXPECT_EQ(b.ends, 1);
}

TEST(GraphRound, MissRunsTheBodyAgainDirectly) {
  ScriptedGraphs b(Script::Miss);
  int runs = 0;
  graph_round(b, 1, 7, [&] { ++runs; });
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(b.ends, 1);
  EXPECT_EQ(b.aborts, 0);
}

TEST(GraphRound, RefusalAbortsAndRunsDirectly) {
  ScriptedGraphs b(Script::Replay);
  int runs = 0;
  graph_round(b, 1, 7, [&] {
    if (++runs == 1) throw GraphRefused{};
  });
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(b.aborts, 1);
  EXPECT_EQ(b.ends, 0);
}

TEST(GraphRound, AnErrorIsRaisedByTheDirectRun) {
  ScriptedGraphs b(Script::Replay);
  int runs = 0;
  // An error only under the graph: the direct run decides, and it succeeds.
  graph_round(b, 1, 7, [&] {
    if (++runs == 1) throw Error("graph only");
  });
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(b.aborts, 1);
  // An error of the round itself reaches the caller from the direct run.
  runs = 0;
  EXPECT_THROW(graph_round(b, 1, 7, [&] {
                 ++runs;
                 throw Error("bad round");
               }),
               Error);
  EXPECT_EQ(runs, 2);
}

TEST(GraphRound, OnlyDecodeRoundsAskForAGraph) {
  ScriptedGraphs b(Script::Replay);
  RoundInput in;
  in.tokens = {5, 6, 7};
  int runs = 0;
  in.logit_rows = {2};  // a prompt chunk's last row
  graph_round(b, in, [&] { ++runs; });
  EXPECT_EQ(b.begins, 0);
  in.logit_rows = {0, 1, 2};  // three lanes decoding
  graph_round(b, in, [&] { ++runs; });
  EXPECT_EQ(b.begins, 1);
  EXPECT_EQ(runs, 2);
}

// A model's round body run twice (a miss), or cut short and run again (a refusal), gives the
// bits of one direct run: the body starts from the embedding and writes every buffer it reads.
class GraphRoundModels : public ::testing::TestWithParam<std::string> {};

TEST_P(GraphRoundModels, BodyRunAgainGivesTheSameBits) {
  const std::string dir = test::golden_dir(GetParam());
  auto files = open_model(dir);
  std::mt19937 rng(11);
  auto ref_backend = make_backend("cpu", 2);
  auto ref_model = load_model(files, *ref_backend);
  std::vector<test::Job> jobs;
  for (int i = 0; i < 3; ++i) {
    test::Job j;
    j.prompt = test::random_tokens(rng, 5 + 9 * i, ref_model->vocab_size());
    j.max_tokens = 6;
    j.sampling.temperature = i == 1 ? 0.8f : 0.0f;
    j.sampling.seed = 5 + static_cast<uint64_t>(i);
    jobs.push_back(j);
  }
  EngineOptions opt;
  opt.lanes = 3;
  opt.context = 64;
  opt.chunk = 16;
  const auto ref = test::run_jobs(*ref_model, *ref_backend, opt, jobs);
  for (Script s : {Script::Miss, Script::RefuseThirdNorm}) {
    ScriptedGraphs b(s);
    auto model = load_model(files, b);
    const auto got = test::run_jobs(*model, b, opt, jobs);
    EXPECT_GT(b.begins, 0);
    for (size_t i = 0; i < jobs.size(); ++i)
      test::expect_same(ref[i], got[i], GetParam() + " job " + std::to_string(i) +
                                            (s == Script::Miss ? " (miss)" : " (refusal)"));
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GraphRoundModels,
                         ::testing::Values("llama", "qwen3_moe", "nemotron_h_moe", "qwen3_next"),
                         [](const auto& info) { return info.param; });

// On the GPU: TF_CUDA_GRAPHS=1 replays decode rounds, and every logit row equals the direct run's.
class GraphReplay : public ::testing::TestWithParam<std::string> {};

TEST_P(GraphReplay, ReplayedRoundsEqualDirectOnes) {
  const char* device = std::getenv("TF_TEST_DEVICE");
  if (!device || std::string(device) != "cuda") GTEST_SKIP() << "graph replay needs TF_TEST_DEVICE=cuda";
  const std::string dir = test::golden_dir(GetParam());
  auto direct = test::load_fixture(dir);
  ::setenv("TF_CUDA_GRAPHS", "1", 1);
  auto graphed = test::load_fixture(dir);
  ::unsetenv("TF_CUDA_GRAPHS");
  std::mt19937 rng(3);
  std::vector<test::Job> jobs;
  // Prompts of several lengths decoding past 64 positions, so attention plans change mid-run and
  // lanes finish at different rounds.
  for (int i = 0; i < 4; ++i) {
    test::Job j;
    j.prompt = test::random_tokens(rng, 3 + 17 * i, direct->model->vocab_size());
    j.max_tokens = 70 + 5 * i;
    j.sampling.temperature = i % 2 ? 0.7f : 0.0f;
    j.sampling.top_p = 0.9f;
    j.sampling.seed = 40 + static_cast<uint64_t>(i);
    jobs.push_back(j);
  }
  EngineOptions opt;
  opt.lanes = 4;
  opt.context = 192;
  opt.chunk = 32;
  const auto ref = test::run_jobs(*direct->model, *direct->backend, opt, jobs);
  const auto got = test::run_jobs(*graphed->model, *graphed->backend, opt, jobs);
  for (size_t i = 0; i < jobs.size(); ++i) test::expect_same(ref[i], got[i], GetParam() + " job " + std::to_string(i));
  const GraphStats st = graphed->backend->graph_stats();
  EXPECT_GT(st.captures, 0) << GetParam();
  EXPECT_GT(st.replays, 0) << GetParam();
  std::printf("[ %s ] graphs: %lld captures, %lld replays, %lld misses, %lld refusals, %lld patched launches\n",
              GetParam().c_str(), static_cast<long long>(st.captures), static_cast<long long>(st.replays),
              static_cast<long long>(st.misses), static_cast<long long>(st.refusals),
              static_cast<long long>(st.updates));
}

INSTANTIATE_TEST_SUITE_P(Families, GraphReplay,
                         ::testing::Values("llama", "qwen3", "qwen3_moe", "nemotron_h_moe", "qwen3_next"),
                         [](const auto& info) { return info.param; });

}  // namespace tf
