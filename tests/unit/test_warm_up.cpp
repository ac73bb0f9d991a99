// Startup warm-up rounds (engine/warm_up.h): the widest rounds an engine makes run before memory
// is planned, and leave nothing behind that changes a later request's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <set>

#include "engine/warm_up.h"
#include "model_fixture.h"

namespace tf {

namespace {

// Passes rounds to a model and keeps each round's rows and its sequences' count.
class RecordingModel : public test::WrappedModel {
 public:
  using WrappedModel::WrappedModel;
  using Model::forward;
  void forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits, std::vector<int32_t>& sampled) override {
    rows.push_back(in.layout.rows());
    seqs.push_back(static_cast<int>(std::set<int32_t>(in.layout.seq.begin(), in.layout.seq.end()).size()));
    WrappedModel::forward(in, kv, logits, sampled);
  }
  std::vector<int> rows, seqs;
};

}  // namespace

class WarmUp : public ::testing::TestWithParam<std::string> {};

TEST_P(WarmUp, RunsTheWidestRoundsAndChangesNoBits) {
  const std::string dir = test::golden_dir(GetParam());
  auto warmed = test::load_fixture(dir);
  RecordingModel rec(*warmed->model);
  const int lanes = 5, chunk = 32, page = 16, context = 64;
  warm_up_rounds(rec, *warmed->backend, lanes, chunk, page, context);
  ASSERT_FALSE(rec.rows.empty());
  // One prompt chunk beside every other lane's row: lanes - 1 + chunk rows in one round.
  EXPECT_EQ(*std::max_element(rec.rows.begin(), rec.rows.end()), lanes - 1 + chunk);
  // Every lane decoding together: a round of one row per lane.
  bool all_lanes = false;
  for (size_t i = 0; i < rec.rows.size(); ++i) all_lanes = all_lanes || (rec.rows[i] == lanes && rec.seqs[i] == lanes);
  EXPECT_TRUE(all_lanes);
  // With a budget of several chunks, the widest round is that budget beside lanes - 1 rows.
  RecordingModel budget(*warmed->model);
  warm_up_rounds(budget, *warmed->backend, lanes, chunk, page, context, 3 * chunk);
  EXPECT_EQ(*std::max_element(budget.rows.begin(), budget.rows.end()), lanes - 1 + 3 * chunk);
  // Wider than the model's window (256): the widest rows come as several prompts in one round.
  RecordingModel many(*warmed->model);
  warm_up_rounds(many, *warmed->backend, 12, chunk, page, context, 12 * chunk);
  const auto at = std::max_element(many.rows.begin(), many.rows.end()) - many.rows.begin();
  EXPECT_EQ(many.rows[static_cast<size_t>(at)], 12 - 1 + 12 * chunk);
  EXPECT_EQ(many.seqs[static_cast<size_t>(at)], 2);
  // The warmed model answers as a fresh one, bit for bit.
  auto fresh = test::load_fixture(dir);
  std::mt19937 rng(9);
  std::vector<test::Job> jobs;
  for (int i = 0; i < 3; ++i) {
    test::Job j;
    j.prompt = test::random_tokens(rng, 4 + 11 * i, fresh->model->vocab_size());
    j.max_tokens = 5;
    jobs.push_back(j);
  }
  EngineOptions opt;
  opt.lanes = 3;
  opt.context = context;
  opt.chunk = page;
  const auto ref = test::run_jobs(*fresh->model, *fresh->backend, opt, jobs);
  const auto got = test::run_jobs(*warmed->model, *warmed->backend, opt, jobs);
  for (size_t i = 0; i < jobs.size(); ++i) test::expect_same(ref[i], got[i], GetParam() + " job " + std::to_string(i));
}

// On a device: after the warm-up, an engine's rounds of those widths allocate nothing more while
// no row reads 64 keys or more (deeper rows may add attention's split partials, which
// round_growth_bound covers).
TEST_P(WarmUp, DeviceBuffersDoNotGrowAfterIt) {
  auto m = test::load_fixture(test::golden_dir(GetParam()));
  if (m->backend->device_memory_total() == 0) GTEST_SKIP() << "needs a device backend (TF_TEST_DEVICE=cuda)";
  const int lanes = 6, chunk = 32, page = 16, context = 64;
  warm_up_rounds(*m->model, *m->backend, lanes, chunk, page, context);
  EngineOptions opt;
  opt.lanes = lanes;
  opt.context = context;
  opt.chunk = chunk;
  opt.page_size = page;
  Engine engine(*m->model, *m->backend, opt);
  const uint64_t before = m->backend->device_bytes_in_use();
  std::mt19937 rng(4);
  std::vector<test::Job> jobs;
  // One prompt of two chunks beside short ones decoding: the widest rounds and every lane's row.
  for (int i = 0; i < lanes; ++i) {
    test::Job j;
    j.prompt = test::random_tokens(rng, i == 0 ? 40 : 3 + i, m->model->vocab_size());
    j.max_tokens = i == 0 ? 8 : 50;
    j.sampling.temperature = i % 2 ? 0.8f : 0.0f;
    jobs.push_back(j);
  }
  test::submit_all(engine, jobs, m->model->vocab_size());
  EXPECT_EQ(m->backend->device_bytes_in_use(), before) << GetParam() << ": rounds made buffers the plan did not count";
  // A budget of a chunk a lane: every lane's prompt in one round, after its own warm-up.
  opt.round_tokens = lanes * chunk;
  warm_up_rounds(*m->model, *m->backend, lanes, chunk, page, context, opt.round_tokens);
  Engine wide(*m->model, *m->backend, opt);
  const uint64_t wide_before = m->backend->device_bytes_in_use();
  for (auto& j : jobs) {
    j.prompt = test::random_tokens(rng, chunk, m->model->vocab_size());
    j.max_tokens = 8;  // rows read fewer than 64 keys
  }
  test::submit_all(wide, jobs, m->model->vocab_size());
  EXPECT_EQ(m->backend->device_bytes_in_use(), wide_before)
      << GetParam() << ": wide rounds made buffers the plan did not count";
}

INSTANTIATE_TEST_SUITE_P(Families, WarmUp, ::testing::Values("llama", "qwen3_moe", "nemotron_h_moe", "qwen3_next"),
                         [](const auto& info) { return info.param; });

}  // namespace tf
