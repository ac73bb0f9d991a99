#pragma once
// The Gated DeltaNet linear-attention block of Qwen3-Next and Qwen3.5: fused input projection,
// causal conv over q|k|v, the gated delta rule, a gated RMSNorm and the output projection.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/blocks.h"

namespace tf {

// Weights assembled from row ranges of checkpoint tensors (reordered or reshaped), kept in
// buffers the model owns for its lifetime: the CPU backend uses weight bytes in place.
class RowAssembler {
 public:
  struct Piece {
    std::string tensor;
    int64_t row0 = 0, rows = 0;
  };
  RowAssembler(const WeightSource& src, Backend& backend, std::vector<std::unique_ptr<uint8_t[]>>& store)
      : src_(src), backend_(backend), store_(store) {}
  // Stacks the pieces (2-D tensors of `cols` columns and one dtype) in order; `splits` cuts the
  // result into consecutive weights of the given row counts (they must sum to the total).
  std::vector<WeightPtr> stack(const std::string& name, const std::vector<Piece>& pieces, int64_t cols,
                               const std::vector<int64_t>& splits);
  // A tensor of exactly `numel` = rows * cols elements seen as [rows x cols] (conv1d [C, 1, K]).
  WeightPtr reshaped(const std::string& tensor, int64_t rows, int64_t cols);
  // Throws unless the tensor has exactly this shape.
  void check_shape(const std::string& tensor, const std::vector<int64_t>& shape) const;
  // A vector of n entries repeated `times` times, as [1 x n * times].
  WeightPtr tiled_vector(const std::string& tensor, int64_t n, int64_t times);
  uint64_t bytes() const { return bytes_; }

 private:
  const WeightSource& src_;
  Backend& backend_;
  std::vector<std::unique_ptr<uint8_t[]>>& store_;
  uint64_t bytes_ = 0;
};

struct DeltaNetBlock {
  WeightPtr in_qkv, in_z;  // views over one buffer of rows [q | k | v | z], q and k by k-head, v and z by v-head
  WeightPtr in_ba;         // rows [b | a], by v-head
  WeightPtr conv;          // [conv_dim x K], depthwise over q|k|v
  WeightPtr A_log, dt_bias, norm, out;
  DeltaParams p;
  int conv_k = 0;
  int64_t conv_dim = 0;
  float eps = 1e-6f;
  int64_t state_off = 0;  // this layer's part of a state slot: conv state, then the delta state
  int64_t state_floats() const {
    return (conv_k - 1) * conv_dim + static_cast<int64_t>(p.v_heads) * p.k_dim * p.v_dim;
  }
};

// Row orders of Qwen3-Next's fused projections: in_proj_qkvz holds per k-head group
// [q (dk) | k (dk) | v (rep dv) | z (rep dv)] and in_proj_ba per group [b (rep) | a (rep)];
// these return the source rows of [q | k | v | z] and [b | a] in order.
std::vector<int64_t> qkvz_row_order(int k_heads, int v_heads, int k_dim, int v_dim);
std::vector<int64_t> ba_row_order(int k_heads, int v_heads);

// fused: Qwen3-Next names (in_proj_qkvz, in_proj_ba); else Qwen3.5 (in_proj_qkv, _z, _b, _a).
DeltaNetBlock load_deltanet(WeightLoader& L, RowAssembler& R, const std::string& prefix, const nlohmann::json& cfg,
                            int64_t hidden, float eps, bool fused);

// Scratch of one round for the block.
struct DeltaNetScratch {
  Tensor qkv, z, ba, conv, y, normed;
};

void deltanet_forward(Backend& b, const DeltaNetBlock& d, Tensor in, Tensor out, DeltaNetScratch& s,
                      const RowLayout& rows, const StateRefs& st);

}  // namespace tf
