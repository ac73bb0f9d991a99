#pragma once
// Kernel contract of the hybrid-model ops (sigmoid router, activate, mul_sigmoid, gated
// rmsnorm, causal conv, Mamba2 scan, gated delta rule, copy): gates over op functors and the
// planted faults they must catch.
#include "contract.h"

namespace tf::contract {

using SigTopkFn = std::function<void(Backend&, const Tensor&, const Weight*, int, int, int, bool, float,
                                     int32_t*, float*)>;
using ActivateFn = std::function<void(Backend&, Act, const Tensor&, Tensor)>;
using MulSigFn = std::function<void(Backend&, Tensor, Cols)>;
using GatedNormFn = std::function<void(Backend&, const Tensor&, Cols, const Weight&, int, float, bool, Tensor)>;
using ConvFn = std::function<void(Backend&, const Tensor&, const Weight&, const Weight*, bool,
                                  const RowLayout&, const StateRefs&, int64_t, Tensor)>;
using SsmFn = std::function<void(Backend&, Cols, Cols, Cols, Cols, const Weight&, const Weight&,
                                 const Weight&, const SsmParams&, const RowLayout&, const StateRefs&,
                                 int64_t, Tensor)>;
using DeltaFn = std::function<void(Backend&, Cols, Cols, Cols, Cols, Cols, const Weight&, const Weight&,
                                   const DeltaParams&, const RowLayout&, const StateRefs&, int64_t, Tensor)>;
using CopyFn = std::function<void(Backend&, const Tensor&, Tensor)>;

SigTopkFn real_sigmoid_topk();
ActivateFn real_activate();
MulSigFn real_mul_sigmoid();
GatedNormFn real_gated_rmsnorm();
ConvFn real_conv();
SsmFn real_ssm();
DeltaFn real_delta();
CopyFn real_copy();

// One sequence of a recurrent gate: its length, the step form or not, and kept states.
struct SeqSpec {
  int len = 1;
  bool step = false;
  bool keep = false;
};

std::string sigmoid_topk_gate(const SigTopkFn& f, Backend& gpu, Backend& cpu, int64_t n, int n_group,
                              int topk_group, int k, bool bias, bool norm, float scale, uint32_t seed);
std::string activate_gate(const ActivateFn& f, Backend& gpu, Backend& cpu, Act act, uint32_t seed);
std::string mul_sigmoid_gate(const MulSigFn& f, Backend& gpu, Backend& cpu, int64_t C, uint32_t seed);
std::string gated_rmsnorm_gate(const GatedNormFn& f, Backend& gpu, Backend& cpu, DType gdt, int64_t C,
                               int group, bool norm_first, uint32_t seed);
std::string copy_gate(const CopyFn& f, Backend& gpu, Backend& cpu, uint32_t seed);
// Recurrent gates: the round of all sequences against the cpu backend and a float64 sequential
// reference, then bit equality with each sequence alone and with the rows split into items at
// marks (multiples of `mark` for chunked sequences) with the state carried between rounds.
// in_place: the conv writes over its input, as Mamba2's does. aligned: the scan's B and C start
// at multiples of 4 columns of rows of a multiple of 4, as a real model's do.
std::string conv_gate(const ConvFn& f, Backend& gpu, Backend& cpu, int64_t C, int K, DType wdt, bool bias,
                      bool silu, const std::vector<SeqSpec>& seqs, uint32_t seed, bool in_place = false);
std::string ssm_gate(const SsmFn& f, Backend& gpu, Backend& cpu, const SsmParams& p,
                     const std::vector<SeqSpec>& seqs, uint32_t seed, bool aligned = false);
std::string delta_gate(const DeltaFn& f, Backend& gpu, Backend& cpu, const DeltaParams& p,
                       const std::vector<SeqSpec>& seqs, uint32_t seed);

// Planted faults (contract_recurrent_controls.cpp).
SigTopkFn control_sigmoid_topk_no_groups();
ActivateFn control_activate_bf16();
MulSigFn control_mul_sigmoid_col0();
GatedNormFn control_gated_rmsnorm_whole_row();
ConvFn control_conv_zero_state();
SsmFn control_ssm_chunk_by_rows();
SsmFn control_ssm_no_keep();
DeltaFn control_delta_chunk_by_rows();
DeltaFn control_delta_zero_state();
CopyFn control_copy_short();

}  // namespace tf::contract
