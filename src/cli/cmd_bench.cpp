#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <random>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/model_session.h"

namespace tf::cli {

namespace {

using Clock = std::chrono::steady_clock;

std::vector<int32_t> random_prompt(int n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (auto& t : ids) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
  return ids;
}

struct Result {
  double pp_tps = 0, tg_tps = 0;
  double tg_wait = 0;  // share of the timed decode the host spent blocked on the device
};

struct Stamp {
  Clock::time_point t;
  double wait;  // the backend's device wait total then
};

// batch requests of pp tokens each, prefilled to their first token: prompt tokens per second.
double run_prefill(Engine& engine, int32_t vocab, int batch, int pp, uint64_t seed) {
  const auto t0 = Clock::now();
  for (int b = 0; b < batch; ++b) {
    GenerationRequest req;
    req.prompt = random_prompt(pp, vocab, seed + static_cast<uint64_t>(b));
    req.max_tokens = 1;
    req.sampling.temperature = 0;
    engine.submit(std::move(req));
  }
  engine.run_until_idle();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return s > 0 ? static_cast<double>(batch) * pp / s : 0;
}

// batch prompts of `depth` tokens (at least one) decoding tg tokens each, timed once every lane
// is decoding, so the prompts' prefill stays outside the time. Deep prompts are prefilled once
// beforehand into the prompt cache, so every lane starts decoding at about the same round.
// Fills tg_tps and tg_wait.
Result run_decode(Engine& engine, const Backend& be, int32_t vocab, int batch, int depth, int tg, uint64_t seed,
                  const SamplingParams& sampling, int logprobs) {
  if (depth > 1) run_prefill(engine, vocab, batch, depth, seed);  // the same prompts, once
  std::vector<std::vector<Stamp>> stamps(static_cast<size_t>(batch));
  for (int b = 0; b < batch; ++b) {
    GenerationRequest req;
    req.prompt = random_prompt(std::max(depth, 1), vocab, seed + static_cast<uint64_t>(b));
    req.max_tokens = tg;
    req.sampling = sampling;
    req.sampling.seed = seed + static_cast<uint64_t>(b);
    req.logprobs = logprobs;
    req.on_event = [&, b](const TokenEvent& ev) {
      if (ev.token >= 0) stamps[static_cast<size_t>(b)].push_back({Clock::now(), be.device_wait_seconds()});
    };
    engine.submit(std::move(req));
  }
  engine.run_until_idle();
  // The window: from the last lane's first token to the last token of all.
  Stamp start = stamps[0].front(), end = stamps[0].back();
  for (const auto& st : stamps) {
    if (st.front().t > start.t) start = st.front();
    if (st.back().t > end.t) end = st.back();
  }
  int decoded = 0;
  for (const auto& st : stamps)
    for (const Stamp& x : st) decoded += x.t > start.t;
  const double s = std::chrono::duration<double>(end.t - start.t).count();
  Result r;
  if (s > 0) r.tg_tps = decoded / s, r.tg_wait = (end.wait - start.wait) / s;
  return r;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  CLI::App app{"Prompt and generation speed of a model", "tensorfold bench"};
  std::string model, batches = "1";
  int pp = 512, tg = 128, depth = 0, threads = 0, reps = 1, chunk = 512, logprobs = -1, round_tokens = 0;
  bool json = false, profile = false;
  SamplingParams sampling;
  sampling.temperature = 0;
  app.add_option("--model", model, "model folder or .gguf file (default: the built-in model)");
  app.add_option("--pp", pp, "prompt tokens per request")->check(CLI::Range(1, 1 << 20));
  app.add_option("--tg", tg, "generated tokens per request")->check(CLI::Range(2, 1 << 20));
  app.add_option("--depth", depth,
                 "prompt tokens before each decode (the context decode starts at; 0: 1-token prompts); "
                 "a multiple of --chunk plus one leaves no prefill inside the timing")
      ->check(CLI::Range(0, 1 << 20));
  app.add_option("--batch", batches, "comma-separated concurrent request counts");
  app.add_option("--reps", reps, "repetitions (the best is reported)")->check(CLI::Range(1, 100));
  app.add_option("--chunk", chunk, "prefill chunk grid")->check(CLI::Range(1, 1 << 20));
  app.add_option("--round-tokens", round_tokens,
                 "prefill tokens one round may take, in whole chunks (default: 4096 on a GPU, one chunk on the CPU)")
      ->check(CLI::Range(1, 1 << 15));
  app.add_option("--temperature", sampling.temperature, "decode sampling temperature (0: greedy)")
      ->check(finite_range(0.0, 100.0));
  app.add_option("--top-p", sampling.top_p, "decode nucleus size")->check(finite_range(0.0, 1.0));
  app.add_option("--top-k", sampling.top_k, "decode top-k (0: off)")->check(CLI::Range(0, 1 << 30));
  app.add_option("--repetition-penalty", sampling.repetition_penalty, "decode repetition penalty (1: off)")
      ->check(finite_range(0.01, 100.0));
  app.add_option("--presence-penalty", sampling.presence_penalty, "decode presence penalty")->check(finite_range(-2.0, 2.0));
  app.add_option("--logprobs", logprobs,
                 "decode: each token's logprob and its N most likely, as a server request asks (-1: none)")
      ->check(CLI::Range(-1, 20));
  std::string device = "auto";
  std::string matmul_input = "f32";
  add_device_options(app, device, threads, matmul_input);
  app.add_flag("--json", json, "one JSON object per line (on a GPU also tg_device_wait: the share of the timed decode the host spent blocked on the device)");
  app.add_flag("--profile", profile, "print each phase's device time per op to stderr (cuda)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  std::vector<int32_t> bs = parse_id_list(batches);
  int max_b = 1;
  for (int b : bs) {
    TF_CHECK(b >= 1 && b <= 1024, "bench: batch ", b, " outside 1..1024");
    max_b = std::max(max_b, b);
  }
  SessionOptions so;
  so.model = model;
  so.threads = threads;
  so.device = device;
  so.matmul_input = matmul_input;
  so.need_tokenizer = false;
  so.engine.lanes = max_b;
  so.engine.context = std::max(pp, depth) + tg;
  // Room to keep every lane's deep prompt in the prompt cache between its two passes.
  if (depth > 1) so.engine.cache_pages = max_b * (depth / so.engine.page_size + 1);
  so.engine.chunk = chunk;
  so.engine.round_tokens = round_tokens;
  auto s = open_session(so);
  const int32_t V = s->model->vocab_size();
  // Warm-up: touches weights and scratch, and runs a chunk's kernels once, so their first launches
  // (on a GPU, loading each kernel) fall outside the timed prefill.
  run_prefill(*s->engine, V, 1, std::min(pp, chunk), 7);
  if (profile) s->backend->set_profiling(true);
  const auto report = [&](const char* phase, int b, int r, double tps, double tokens) {
    if (!profile) return;
    std::fprintf(stderr, "profile: %s, batch %d, rep %d: %.3f ms wall\n%s", phase, b, r,
                 tps > 0 ? 1000.0 * tokens / tps : 0.0, s->backend->profile_take().c_str());
  };
  // depth: the prompt tokens each decode starts after (decode rates fall as it grows).
  if (!json) std::printf("%-6s %8s %8s %8s %12s %12s\n", "batch", "pp", "tg", "depth", "pp tok/s", "tg tok/s");
  for (int b : bs) {
    Result best;
    for (int r = 0; r < reps; ++r) {
      s->backend->profile_take();
      const double pp_tps = run_prefill(*s->engine, V, b, pp, 1000 + static_cast<uint64_t>(r));
      report("prefill", b, r, pp_tps, static_cast<double>(b) * pp);
      const Result x =
          run_decode(*s->engine, *s->backend, V, b, depth, tg, 2000 + static_cast<uint64_t>(r), sampling, logprobs);
      report("decode (whole phase; tok/s times only its steady part)", b, r, x.tg_tps, static_cast<double>(b) * (tg - 1));
      best.pp_tps = std::max(best.pp_tps, pp_tps);
      if (x.tg_tps > best.tg_tps) best.tg_tps = x.tg_tps, best.tg_wait = x.tg_wait;
    }
    // A device backend also tells how much of the decode the host waited on it: near 0, the
    // host's launches set the pace.
    char wait_field[256] = "";
    if (s->backend->device_memory_total() > 0) {
      // With graph replay on (TF_CUDA_GRAPHS=1), its counts since the backend was made.
      const GraphStats g = s->backend->graph_stats();
      int n = std::snprintf(wait_field, sizeof wait_field, ", \"tg_device_wait\": %.3f", best.tg_wait);
      if (g.captures + g.refusals > 0)
        std::snprintf(wait_field + n, sizeof wait_field - static_cast<size_t>(n),
                      ", \"graph_captures\": %lld, \"graph_replays\": %lld, \"graph_misses\": %lld, "
                      "\"graph_patched\": %lld",
                      static_cast<long long>(g.captures), static_cast<long long>(g.replays),
                      static_cast<long long>(g.misses), static_cast<long long>(g.updates));
    }
    if (json)
      std::printf(
          "{\"model\": \"%s\", \"backend\": \"%s\", \"threads\": %d, \"matmul_input\": \"%s\", "
          "\"batch\": %d, \"pp\": %d, \"tg\": %d, \"depth\": %d, \"temperature\": %g, \"top_p\": %g, "
          "\"logprobs\": %d, \"pp_tps\": %.2f, \"tg_tps\": %.2f%s}\n",
          (model.empty() ? default_model_path() : model).c_str(), s->backend->name().c_str(),
          s->backend->threads(), matmul_input_name(s->backend->matmul_input()), b, pp, tg, depth, static_cast<double>(sampling.temperature),
          static_cast<double>(sampling.top_p), logprobs, best.pp_tps, best.tg_tps, wait_field);
    else
      std::printf("%-6d %8d %8d %8d %12.2f %12.2f\n", b, pp, tg, std::max(depth, 1), best.pp_tps, best.tg_tps);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace tf::cli
