#pragma once
// What every command that runs a model needs: files, backend, model, tokenizer, engine.
#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "backend/backend.h"
#include "engine/engine.h"
#include "formats/model_files.h"
#include "models/model.h"
#include "tokenizer/tokenizer.h"

namespace tf::cli {

// The model used when --model is not given: the folder that ships with the project.
std::string default_model_path();

struct ModelSession {
  ModelFiles files;
  std::unique_ptr<Backend> backend;
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<Engine> engine;
};

struct SessionOptions {
  std::string model;  // empty: the default model
  int threads = 0;    // 0: all cores
  std::string device = "auto";  // cpu | cuda | cuda:N | auto (cuda when a GPU is present)
  std::string matmul_input = "f32";  // f32 | bf16 (MatmulInput)
  EngineOptions engine;  // round_tokens 0: default_round_tokens for the backend
  bool need_tokenizer = true;  // false: load it only where the model has one
};

std::unique_ptr<ModelSession> open_session(const SessionOptions& opt);

// Sampling defaults from generation_config.json (temperature, top_p, top_k, min_p,
// repetition_penalty; greedy when do_sample is false).
SamplingParams sampling_defaults(const ModelFiles& files);

// Adds --device, --threads and --matmul-input to a command.
void add_device_options(CLI::App& app, std::string& device, int& threads, std::string& matmul_input);

// A number in [lo, hi]; unlike CLI::Range it refuses nan (every comparison with nan is false).
CLI::Validator finite_range(double lo, double hi);

// "1,2,3" -> ids; errors name the bad entry.
std::vector<int32_t> parse_id_list(const std::string& s);

// All of the text in file `path` ("-": stdin), for tokenizing; fails before reading past
// kMaxEncodeBytes, or at once for a file larger than that.
std::string read_text_input(const std::string& path);

}  // namespace tf::cli
