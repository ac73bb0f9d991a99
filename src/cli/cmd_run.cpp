#include <CLI/CLI.hpp>

#include <cstdio>
#include <random>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/model_session.h"

namespace tf::cli {

int cmd_run(int argc, char** argv) {
  CLI::App app{"Generate text from a prompt", "tensorfold run"};
  std::string model, prompt, prompt_ids;
  int max_tokens = 128, threads = 0, top_k = -1;
  float temperature = -1, top_p = -1, min_p = -1, rep = -1;
  int64_t seed = -1;
  bool ids_out = false;
  app.add_option("--model", model, "model folder or .gguf file (default: the built-in model)");
  auto* po = app.add_option("--prompt", prompt, "prompt text (BOS added as the model asks)");
  auto* pi = app.add_option("--prompt-ids", prompt_ids, "prompt as comma-separated token ids, used exactly");
  po->excludes(pi);
  app.add_option("--max-tokens", max_tokens, "tokens to generate")->check(CLI::Range(0, 1 << 24));
  app.add_option("--temperature", temperature, "0 is greedy (default: generation_config, else 0.8)")
      ->check(finite_range(0.0, 100.0));
  app.add_option("--top-p", top_p, "nucleus sampling mass")->check(finite_range(0.0, 1.0));
  app.add_option("--top-k", top_k, "keep the k most likely tokens (0: off)");
  app.add_option("--min-p", min_p, "drop tokens below min_p times the top probability")->check(finite_range(0.0, 1.0));
  app.add_option("--repetition-penalty", rep, "penalty over prompt and output tokens")->check(finite_range(0.01, 100.0));
  app.add_option("--seed", seed, "sampling seed (default: random)");
  app.add_flag("--ids", ids_out, "print the generated token ids instead of text");
  std::string device = "auto";
  std::string matmul_input = "f32";
  add_device_options(app, device, threads, matmul_input);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  TF_CHECK(!prompt.empty() || !prompt_ids.empty(), "run: give --prompt or --prompt-ids");

  SessionOptions so;
  so.model = model;
  so.threads = threads;
  so.device = device;
  so.matmul_input = matmul_input;
  so.need_tokenizer = !prompt.empty() || !ids_out;
  auto s = open_session(so);
  GenerationRequest req;
  req.prompt = prompt_ids.empty() ? s->tokenizer->encode(prompt, true) : parse_id_list(prompt_ids);
  req.max_tokens = max_tokens;
  req.sampling = sampling_defaults(s->files);
  if (temperature >= 0) req.sampling.temperature = temperature;
  if (top_p >= 0) req.sampling.top_p = top_p;
  if (top_k >= 0) req.sampling.top_k = top_k;
  if (min_p >= 0) req.sampling.min_p = min_p;
  if (rep > 0) req.sampling.repetition_penalty = rep;
  req.sampling.seed = seed >= 0 ? static_cast<uint64_t>(seed) : std::random_device{}();
  if (s->tokenizer) {
    req.stop_ids = s->tokenizer->eos_ids;
    if (req.stop_ids.empty() && s->tokenizer->eos_id >= 0) req.stop_ids.push_back(s->tokenizer->eos_id);
  }

  std::vector<int32_t> out;
  std::unique_ptr<StreamDecoder> dec;
  if (!ids_out) dec = std::make_unique<StreamDecoder>(*s->tokenizer);
  std::string error;
  req.on_event = [&](const TokenEvent& ev) {
    if (ev.finish == FinishReason::Error) error = ev.error;
    if (ev.token < 0) return;
    out.push_back(ev.token);
    if (!ids_out) {
      std::string text = dec->push(ev.token);
      std::fwrite(text.data(), 1, text.size(), stdout);
      std::fflush(stdout);
    }
  };
  s->engine->submit(std::move(req));
  s->engine->run_until_idle();
  TF_CHECK(error.empty(), "generation failed: ", error);
  if (ids_out) {
    for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? "," : "", out[i]);
    std::printf("\n");
  } else {
    std::string rest = dec->flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
    std::printf("\n");
  }
  return 0;
}

}  // namespace tf::cli
