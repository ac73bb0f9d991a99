#include "formats/model_files.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"
#include "base/json_capped.h"
#include "formats/gguf_weights.h"
#include "formats/hf_config.h"
#include "formats/safetensors.h"

namespace tf {

nlohmann::json read_json_file(const std::string& path, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  std::error_code ec;
  TF_CHECK(fs::is_regular_file(path, ec), path, ": not a readable file");
  uint64_t size = fs::file_size(path, ec);
  TF_CHECK(!ec, path, ": cannot read its size: ", ec.message());
  TF_CHECK(size <= max_bytes, path, ": ", size, " bytes is over the limit of ", max_bytes, " for a JSON file");
  std::ifstream in(path, std::ios::binary);
  TF_CHECK(in, path, ": cannot open");
  std::string text(size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(size));
  TF_CHECK(static_cast<uint64_t>(in.gcount()) == size, path, ": short read");
  try {
    return parse_json_capped<nlohmann::json>(
        text, [&] { fail(path, ": JSON nests deeper than ", kMaxJsonDepth, " levels"); });
  } catch (const nlohmann::json::exception& e) {
    fail(path, ": invalid JSON: ", e.what());
  }
}

namespace {

nlohmann::json read_optional(const std::filesystem::path& p, nlohmann::json fallback) {
  std::error_code ec;
  if (!std::filesystem::exists(p, ec)) return fallback;
  return read_json_file(p.string());
}

bool has_gguf_magic(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char m[4] = {};
  return in.read(m, 4) && std::string(m, 4) == "GGUF";
}

}  // namespace

ModelFiles open_model(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ModelFiles mf;
  mf.path = path;
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    const fs::path cfg = dir / "config.json";
    TF_CHECK(fs::exists(cfg, ec), path, ": config.json is missing from the model folder");
    mf.config = read_json_file(cfg.string());
    TF_CHECK(mf.config.is_object(), cfg.string(), ": config is not a JSON object");
    mf.generation_config = read_optional(dir / "generation_config.json", nlohmann::json::object());
    mf.tokenizer_json = read_optional(dir / "tokenizer.json", nullptr);
    mf.tokenizer_config = read_optional(dir / "tokenizer_config.json", nlohmann::json::object());
    mf.weights = std::make_shared<SafetensorsSet>(path);
    return mf;
  }
  TF_CHECK(fs::is_regular_file(path, ec), path, ": no such model folder or file");
  const bool gguf_name = path.size() >= 5 && path.compare(path.size() - 5, 5, ".gguf") == 0;
  TF_CHECK(gguf_name || has_gguf_magic(path), path, ": not a model folder or a .gguf file");
  mf.gguf = std::make_shared<GgufFile>(path);
  auto weights = std::make_shared<GgufWeights>(mf.gguf);
  mf.config = gguf_hf_config(*mf.gguf, *weights);
  parse_hf_config(mf.config, path + " (config from GGUF metadata)");  // fail at open, not at build
  mf.weights = weights;
  mf.generation_config = nlohmann::json::object();
  mf.tokenizer_json = nullptr;
  mf.tokenizer_config = nlohmann::json::object();
  return mf;
}

}  // namespace tf
