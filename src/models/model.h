#pragma once
// A loaded model: weights on a backend and a forward pass over one round's rows.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "formats/hf_config.h"

namespace tf {

struct ModelFiles;

// The rows of one round: tokens, where each sits, and which rows need logits.
struct RoundInput {
  std::vector<int32_t> tokens;
  RowLayout layout;
  std::vector<int32_t> logit_rows;
  // Per entry of logit_rows: 1 when the host needs the whole row (empty: every row).
  std::vector<uint8_t> logit_full;
  // Tokens to draw on the backend; a spec's row is an index into logit_rows, its penalty tokens
  // a range of penalties.
  std::vector<SampleSpec> samples;
  std::vector<PenaltyToken> penalties;
  StateRefs states;  // recurrent layers' state slots (empty for attention-only models)
};

class Model {
 public:
  virtual ~Model() = default;
  const HfConfig& config() const { return config_; }
  int32_t vocab_size() const { return static_cast<int32_t>(config_.vocab_size); }
  int n_layers() const { return static_cast<int>(config_.num_hidden_layers); }
  int n_kv_heads() const { return static_cast<int>(config_.num_key_value_heads); }
  int head_dim() const { return static_cast<int>(config_.head_dim); }
  int64_t context_length() const { return config_.max_position_embeddings; }
  uint64_t weight_bytes() const { return weight_bytes_; }
  const std::string& family() const { return family_; }
  // Layers that keep KV pages (every layer of an attention-only model).
  virtual int n_kv_layers() const { return n_layers(); }
  // Floats of recurrent state one sequence carries (0: no recurrent layers).
  virtual int64_t state_floats() const { return 0; }

  // Sizes scratch for rounds of up to max_rows rows, zero-filled now so it counts at startup.
  virtual void reserve(int max_rows) = 0;
  // Runs the round: logits gets one row per entry of in.logit_rows ([n x vocab], host; rows whose
  // in.logit_full entry is 0 are left unwritten), sampled the token of each of in.samples.
  virtual void forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits,
                       std::vector<int32_t>& sampled) = 0;
  void forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits) {
    std::vector<int32_t> sampled;
    forward(in, kv, logits, sampled);
  }

 protected:
  HfConfig config_;
  uint64_t weight_bytes_ = 0;
  std::string family_;
};

using ModelBuilder = std::unique_ptr<Model> (*)(const ModelFiles&, const HfConfig&, Backend&);

struct ModelFamily {
  const char* name;                // family file, e.g. "llama"
  std::vector<std::string> archs;  // config.json architectures / model_type it serves
  ModelBuilder build;
};

const std::vector<ModelFamily>& model_registry();
// Picks the family from architectures[0] (or model_type); unknown ones list the supported.
std::unique_ptr<Model> load_model(const ModelFiles& files, Backend& backend);

}  // namespace tf
