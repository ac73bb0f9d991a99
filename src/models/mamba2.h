#pragma once
// The Mamba2 mixer block (Nemotron-H): in_proj -> z | xBC | dt -> causal conv + SiLU -> SSD scan
// -> gated group RMSNorm by z -> out_proj, with its conv and scan state in a recurrent slot.
#include <string>

#include "models/blocks.h"

namespace tf {

struct Mamba2Sizes {
  int64_t hidden = 0;
  SsmParams p;
  int64_t conv_k = 4;
  bool conv_bias = true;
  float eps = 1e-5f;
};

struct Mamba2Block {
  WeightPtr in_z, in_xbc, in_dt;  // the three row blocks of in_proj
  WeightPtr conv_w, conv_b, A_log, D, dt_bias, norm, out_proj;
  SsmParams p;
  int64_t inter = 0, conv_dim = 0, conv_k = 0, norm_group = 0;
  float eps = 1e-5f;
  // A slot part of this layer: the conv state ([K - 1 x conv_dim]) then the scan state.
  int64_t conv_floats() const { return (conv_k - 1) * conv_dim; }
  int64_t state_floats() const { return conv_floats() + inter * p.state_size; }
};

// Activations of one round, each [max_rows x width].
struct Mamba2Scratch {
  Tensor z, xbc, dt, y;
};

Mamba2Block load_mamba2(WeightLoader& L, const std::string& prefix, const Mamba2Sizes& sz);
// Scratch for rounds of up to rows rows of the widest of these blocks (freed by the caller).
Mamba2Scratch alloc_mamba2_scratch(Backend& b, const Mamba2Block& m, int64_t rows);
void free_mamba2_scratch(Backend& b, Mamba2Scratch& s);
// out = mixer(in) for the round's rows; the layer's state is at offset off of each slot.
void mamba2_forward(Backend& b, const Mamba2Block& m, Tensor in, Tensor out, const Mamba2Scratch& s,
                    const RowLayout& rows, const StateRefs& st, int64_t off);

}  // namespace tf
