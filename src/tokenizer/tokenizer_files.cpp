// Reads only what a tokenizer needs from a model folder or GGUF file.
#include <filesystem>

#include "base/error.h"
#include "formats/model_files.h"
#include "tokenizer/tokenizer.h"

namespace tf {

ModelFiles open_tokenizer_files(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  ModelFiles mf;
  mf.path = path;
  mf.config = nlohmann::json::object();
  mf.generation_config = nlohmann::json::object();
  mf.tokenizer_config = nlohmann::json::object();
  if (fs::is_directory(path, ec)) {
    const fs::path dir(path);
    auto optional = [&](const char* name, nlohmann::json fallback) {
      return fs::exists(dir / name, ec) ? read_json_file((dir / name).string()) : fallback;
    };
    mf.config = optional("config.json", nlohmann::json::object());
    mf.generation_config = optional("generation_config.json", nlohmann::json::object());
    mf.tokenizer_config = optional("tokenizer_config.json", nlohmann::json::object());
    mf.tokenizer_json = optional("tokenizer.json", nullptr);
    TF_CHECK(!mf.tokenizer_json.is_null(), path, ": tokenizer.json is missing from the model folder");
    return mf;
  }
  TF_CHECK(fs::is_regular_file(path, ec), path, ": no such model folder or file");
  mf.gguf = std::make_shared<GgufFile>(path);
  return mf;
}

}  // namespace tf
