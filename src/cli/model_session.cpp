#include "cli/model_session.h"

#include <charconv>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "base/error.h"
#include "base/log.h"
#include "base/thread_pool.h"

#ifndef TF_DEFAULT_MODEL_DIR
#define TF_DEFAULT_MODEL_DIR "models/default"
#endif

namespace tf::cli {

std::string default_model_path() {
  if (const char* env = std::getenv("TENSORFOLD_DEFAULT_MODEL")) return env;
  return TF_DEFAULT_MODEL_DIR;
}

std::unique_ptr<ModelSession> open_session(const SessionOptions& opt) {
  auto s = std::make_unique<ModelSession>();
  const std::string path = opt.model.empty() ? default_model_path() : opt.model;
  s->files = open_model(path);
  s->backend = make_backend(opt.device, opt.threads > 0 ? opt.threads : default_thread_count());
  s->backend->set_matmul_input(parse_matmul_input(opt.matmul_input));
  s->model = load_model(s->files, *s->backend);
  const bool has_tokenizer = !s->files.tokenizer_json.is_null() ||
                             (s->files.gguf && s->files.gguf->find_meta("tokenizer.ggml.model"));
  if (opt.need_tokenizer || has_tokenizer) s->tokenizer = load_tokenizer(s->files);
  if (s->tokenizer) {
    if (const std::string w = vocab_fit_warning(*s->tokenizer, s->model->vocab_size()); !w.empty()) log_warn(w);
  }
  EngineOptions eo = opt.engine;
  if (eo.round_tokens == 0) eo.round_tokens = default_round_tokens(s->backend->device_memory_total() > 0, eo.chunk);
  s->engine = std::make_unique<Engine>(*s->model, *s->backend, eo);
  log_debug("backend ", s->backend->name(), "; model ", path, ": ", s->model->family(), ", ", s->model->n_layers(), " layers, ",
            s->model->weight_bytes() / (1 << 20), " MiB of weights");
  return s;
}

CLI::Validator finite_range(double lo, double hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        double v = 0;
        try {
          size_t used = 0;
          v = std::stod(text, &used);
          if (used != text.size()) return "Value " + text + " is not a number";
        } catch (const std::exception&) {
          return "Value " + text + " is not a number";
        }
        if (!std::isfinite(v)) return "Value " + text + " is not a finite number";
        if (v < lo || v > hi) return "Value " + text + " not in range " + std::to_string(lo) + " to " + std::to_string(hi);
        return {};
      },
      "FLOAT in [" + CLI::detail::to_string(lo) + " - " + CLI::detail::to_string(hi) + "]");
}

void add_device_options(CLI::App& app, std::string& device, int& threads, std::string& matmul_input) {
  app.add_option("--device", device, "cpu, cuda, cuda:N or auto (cuda when a GPU is present)")->capture_default_str();
  app.add_option("--threads", threads, "CPU threads (default: all cores)");
  app.add_option("--matmul-input", matmul_input,
                 "activations entering BF16/F16 matmuls and attention's products: f32 (whole) or bf16 (rounded "
                 "first, as bf16 engines do; a half to a third of the GPU's tensor-core work)")
      ->check(CLI::IsMember({"f32", "bf16"}))
      ->capture_default_str();
}

SamplingParams sampling_defaults(const ModelFiles& files) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  const auto& g = files.generation_config;
  if (!g.is_object() || g.empty()) return p;
  auto num = [&](const char* key, float fallback) {
    auto it = g.find(key);
    return it != g.end() && it->is_number() ? it->get<float>() : fallback;
  };
  p.temperature = num("temperature", 1.0f);
  p.top_p = num("top_p", 1.0f);
  p.top_k = static_cast<int>(num("top_k", 0.0f));
  p.min_p = num("min_p", 0.0f);
  p.repetition_penalty = num("repetition_penalty", 1.0f);
  auto ds = g.find("do_sample");
  if (ds != g.end() && ds->is_boolean() && !ds->get<bool>()) p.temperature = 0.0f;
  return p;
}

std::string read_text_input(const std::string& path) {
  const bool std_in = path == "-";
  const std::string what = std_in ? std::string("stdin") : cat("'", path, "'");
  auto too_big = [&](const std::string& size) {
    fail(what, ": ", size, " is more than the ", kMaxEncodeBytes >> 20, " MiB one text may hold");
  };
  std::ifstream file;
  if (!std_in) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec && size > kMaxEncodeBytes) too_big(cat(size, " bytes"));
    file.open(path, std::ios::binary);
    TF_CHECK(file, what, ": cannot open");
  }
  std::istream& in = std_in ? std::cin : file;
  std::string text;
  char buf[1 << 16];
  while (in.read(buf, sizeof buf) || in.gcount() > 0) {
    text.append(buf, static_cast<size_t>(in.gcount()));
    if (text.size() > kMaxEncodeBytes) too_big("its text");
  }
  TF_CHECK(!in.bad(), what, ": read error");
  return text;
}

std::vector<int32_t> parse_id_list(const std::string& s) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    std::string item = s.substr(i, j - i);
    while (!item.empty() && item.front() == ' ') item.erase(item.begin());
    while (!item.empty() && item.back() == ' ') item.pop_back();
    int32_t v = 0;
    auto r = std::from_chars(item.data(), item.data() + item.size(), v);
    TF_CHECK(!item.empty() && r.ec == std::errc() && r.ptr == item.data() + item.size(),
             "token id list: '", item, "' is not an integer");
    ids.push_back(v);
    i = j + 1;
  }
  return ids;
}

}  // namespace tf::cli
