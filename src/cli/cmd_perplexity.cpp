#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>

#include "base/error.h"
#include "base/log.h"
#include "cli/commands.h"
#include "cli/model_session.h"

namespace tf::cli {

namespace {

// log-sum-exp in double over one row, minus the target's logit: the token's negative log-likelihood.
double token_nll(const float* logits, int32_t vocab, int32_t target) {
  double m = logits[0];
  for (int32_t i = 1; i < vocab; ++i) m = std::max(m, static_cast<double>(logits[i]));
  double s = 0;
  for (int32_t i = 0; i < vocab; ++i) s += std::exp(static_cast<double>(logits[i]) - m);
  return m + std::log(s) - static_cast<double>(logits[target]);
}

}  // namespace

int cmd_perplexity(int argc, char** argv) {
  CLI::App app{"Perplexity of a model over a text file", "tensorfold perplexity"};
  std::string model, file;
  int window = 0, threads = 0;
  bool json = false;
  app.add_option("--model", model, "model folder or .gguf file (default: the built-in model)");
  app.add_option("--file", file, "UTF-8 text file")->required();
  app.add_option("--window", window, "tokens per evaluation window (default: min(context, 1024))");
  std::string device = "auto";
  std::string matmul_input = "f32";
  add_device_options(app, device, threads, matmul_input);
  app.add_flag("--json", json, "print one JSON object");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  const std::string text = read_text_input(file);

  SessionOptions so;
  so.model = model;
  so.threads = threads;
  so.device = device;
  so.matmul_input = matmul_input;
  auto probe = open_model(model.empty() ? default_model_path() : model);
  const int64_t ctx = probe.config.value("max_position_embeddings", int64_t{2048});
  if (window <= 0) window = static_cast<int>(std::min<int64_t>(ctx, 1024));
  TF_CHECK(window >= 2, "perplexity: --window must be at least 2");
  so.engine.context = window;
  auto s = open_session(so);
  const std::vector<int32_t> ids = s->tokenizer->encode(text, true);
  TF_CHECK(ids.size() >= 2, file, ": needs at least 2 tokens, has ", ids.size());
  const int32_t V = s->model->vocab_size();

  double nll = 0;
  int64_t count = 0;
  // Non-overlapping windows; each scores every token after its first.
  for (size_t start = 0; start + 1 < ids.size(); start += static_cast<size_t>(window)) {
    size_t end = std::min(ids.size(), start + static_cast<size_t>(window));
    GenerationRequest req;
    req.prompt.assign(ids.begin() + static_cast<std::ptrdiff_t>(start), ids.begin() + static_cast<std::ptrdiff_t>(end));
    req.max_tokens = 0;
    req.all_prompt_rows = true;
    const auto& prompt = req.prompt;
    std::vector<int32_t> targets(prompt.begin(), prompt.end());
    req.on_logits = [&, targets](int pos, const float* logits) {
      if (pos + 1 >= static_cast<int>(targets.size())) return;
      nll += token_nll(logits, V, targets[static_cast<size_t>(pos + 1)]);
      ++count;
    };
    s->engine->submit(std::move(req));
    s->engine->run_until_idle();
    log_debug("perplexity: ", end, " / ", ids.size(), " tokens");
  }
  TF_CHECK(count > 0, "perplexity: nothing was scored");
  const double ppl = std::exp(nll / static_cast<double>(count));
  if (json)
    std::printf("{\"perplexity\": %.6f, \"tokens\": %lld, \"nll\": %.6f, \"window\": %d}\n", ppl,
                static_cast<long long>(count), nll / static_cast<double>(count), window);
  else
    std::printf("perplexity: %.4f over %lld tokens (window %d)\n", ppl, static_cast<long long>(count), window);
  return 0;
}

}  // namespace tf::cli
