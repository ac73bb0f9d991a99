#pragma once
// A pre-norm decoder stack (embedding, layers of attention + MLP or MoE, final norm, head)
// that the llama, qwen3 and qwen3_moe families fill with their weights.
#include <functional>
#include <memory>
#include <vector>

#include "models/blocks.h"
#include "models/model.h"

namespace tf {

struct DecoderLayer {
  WeightPtr input_norm, post_attn_norm;
  AttentionBlock attn;
  std::unique_ptr<MlpBlock> mlp;
  std::unique_ptr<MoeBlock> moe;
};

struct ModelFiles;

// Which blocks a family's layers use.
struct DecoderSpec {
  const char* family = "";
  bool qk_norm = false;                    // per-head RMSNorm of queries and keys (Qwen3)
  std::function<bool(int64_t)> sparse;     // layer uses a MoE block; null: all dense
};

class TransformerModel;
// Loads the usual Hugging Face layout (model.layers.N.{input_layernorm, self_attn, mlp, ...}).
std::unique_ptr<TransformerModel> build_decoder(const ModelFiles& files, const HfConfig& cfg, Backend& backend,
                                                const DecoderSpec& spec);

class TransformerModel : public Model {
 public:
  TransformerModel(const HfConfig& cfg, Backend& backend, std::string family);
  ~TransformerModel() override;

  void reserve(int max_rows) override;
  using Model::forward;
  void forward(const RoundInput& in, KvStorage& kv, std::vector<float>& logits, std::vector<int32_t>& sampled) override;

  // Filled by the family builders.
  WeightPtr embed, final_norm, lm_head;  // lm_head null when tied to embed
  std::vector<DecoderLayer> layers;
  RopeParams rope;
  void set_weight_bytes(uint64_t b) { weight_bytes_ = b; }

  // Loads embed, final norm and head (tied or not) under the usual Hugging Face names.
  void load_embeddings(WeightLoader& L);

 private:
  void free_scratch();
  Backend& b_;
  Scratch s_;
};

}  // namespace tf
