#pragma once
// Loads a golden fixture model and runs requests through the engine for tests.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "base/error.h"
#include "engine/engine.h"
#include "formats/model_files.h"
#include "models/model.h"

namespace tf::test {

inline std::string golden_dir(const std::string& name) {
  return std::string(TF_SOURCE_DIR) + "/tests/fixtures/golden/" + name;
}

inline std::vector<std::string> golden_models() {
  std::vector<std::string> out;
  for (const auto& e : std::filesystem::directory_iterator(std::string(TF_SOURCE_DIR) + "/tests/fixtures/golden"))
    if (e.is_directory()) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

struct LoadedModel {
  ModelFiles files;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
};

// TF_TEST_DEVICE=cuda runs the model tests on the GPU (a build with TF_CUDA); default cpu.
inline std::unique_ptr<LoadedModel> load_fixture(const std::string& path, int threads = 2) {
  auto m = std::make_unique<LoadedModel>();
  m->files = open_model(path);
  const char* device = std::getenv("TF_TEST_DEVICE");
  m->backend = make_backend(device && *device ? device : "cpu", threads);
  m->model = load_model(m->files, *m->backend);
  return m;
}

// The error loading files on the cpu backend gives, or "" when it loads.
inline std::string load_error(const ModelFiles& files) {
  auto backend = make_backend("cpu", 1);
  try {
    load_model(files, *backend);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Every logit row of a request, by position, and its sampled tokens.
struct Trace {
  std::map<int, std::vector<float>> logits;
  std::vector<int32_t> tokens;
};

struct Job {
  std::vector<int32_t> prompt;
  int max_tokens = 8;
  SamplingParams sampling;
};

// Engine options of the cache tests: lanes of a context window on a chunk grid of 16 (pages of
// 16) with cache_pages kept prefix pages.
inline EngineOptions cached_options(int lanes, int context, int cache_pages) {
  EngineOptions o;
  o.lanes = lanes;
  o.context = context;
  o.chunk = 16;
  o.page_size = 16;
  o.cache_pages = cache_pages;
  return o;
}

// The same options with the prompt cache off: what a cold run of the same requests uses.
inline EngineOptions without_cache(EngineOptions o) {
  o.cache_pages = 0;
  return o;
}

// One request's trace, the prompt tokens it adopted from the cache and how it ended.
struct Run {
  Trace trace;
  int cached = 0;
  FinishReason finish = FinishReason::None;
};

// Submits all jobs to a running engine (under one cache salt) and runs it until idle.
inline std::vector<Run> submit_all(Engine& engine, const std::vector<Job>& jobs, int32_t vocab,
                                   const std::string& salt = {}) {
  std::vector<Run> out(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    GenerationRequest req;
    req.prompt = jobs[i].prompt;
    req.max_tokens = jobs[i].max_tokens;
    req.sampling = jobs[i].sampling;
    req.cache_salt = salt;
    Run* r = &out[i];
    req.on_logits = [r, vocab](int pos, const float* lg) { r->trace.logits[pos].assign(lg, lg + vocab); };
    req.on_event = [r](const TokenEvent& ev) {
      if (ev.token >= 0) r->trace.tokens.push_back(ev.token);
      r->cached = ev.cached_tokens;
      if (ev.finish != FinishReason::None) r->finish = ev.finish;
    };
    engine.submit(std::move(req));
  }
  engine.run_until_idle();
  return out;
}

// Submits all jobs at once to a new engine and runs it until idle; their traces.
inline std::vector<Trace> run_jobs(Model& model, Backend& backend, const EngineOptions& opt,
                                   const std::vector<Job>& jobs) {
  Engine engine(model, backend, opt);
  std::vector<Trace> traces;
  for (Run& r : submit_all(engine, jobs, model.vocab_size())) traces.push_back(std::move(r.trace));
  return traces;
}

// The same tokens, and every row the second run computed bit-identical to the first's there.
inline void expect_same(const Trace& ref, const Trace& got, const std::string& what) {
  EXPECT_EQ(ref.tokens, got.tokens) << what;
  ASSERT_FALSE(got.logits.empty()) << what;
  for (const auto& [pos, row] : got.logits) {
    auto it = ref.logits.find(pos);
    ASSERT_NE(it, ref.logits.end()) << what << " position " << pos;
    ASSERT_EQ(std::memcmp(row.data(), it->second.data(), row.size() * sizeof(float)), 0) << what << " position " << pos;
  }
}

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int n, int32_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

// A model that passes everything to another; tests override forward to watch or break rounds.
class WrappedModel : public Model {
 public:
  explicit WrappedModel(Model& inner) : inner_(inner) { config_ = inner.config(); }
  int n_kv_layers() const override { return inner_.n_kv_layers(); }
  int64_t state_floats() const override { return inner_.state_floats(); }
  void reserve(int rows) override { inner_.reserve(rows); }
  using Model::forward;
  void forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits, std::vector<int32_t>& sampled) override {
    inner_.forward(in, kv, logits, sampled);
  }

 private:
  Model& inner_;
};

// Throws from forward when armed, to check that a failed round gives its pages and slots back.
class FailingModel : public WrappedModel {
 public:
  using WrappedModel::WrappedModel;
  using Model::forward;
  void forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits, std::vector<int32_t>& sampled) override {
    if (armed) throw Error("planted failure");
    WrappedModel::forward(in, kv, logits, sampled);
  }
  bool armed = false;
};

// Submits jobs sharing one prompt as one sibling group (n > 1) and runs until idle; their tokens.
inline std::vector<Trace> submit_siblings(Engine& engine, const std::vector<Job>& jobs) {
  std::vector<GenerationRequest> group;
  std::vector<Trace> got(jobs.size());
  for (size_t k = 0; k < jobs.size(); ++k) {
    GenerationRequest r;
    r.prompt = jobs[k].prompt;
    r.max_tokens = jobs[k].max_tokens;
    r.sampling = jobs[k].sampling;
    Trace* t = &got[k];
    r.on_event = [t](const TokenEvent& ev) {
      if (ev.token >= 0) t->tokens.push_back(ev.token);
    };
    group.push_back(std::move(r));
  }
  engine.submit_group(std::move(group));
  engine.run_until_idle();
  return got;
}

}  // namespace tf::test
