// tf_kernel_contract: every CUDA kernel against the cpu backend, its batch invariance, and
// planted faults that the same gates must catch. Exits 0 with a message when there is no GPU.
//   tf_kernel_contract [--bench | --bench-few | --bench-moe | --bench-launch | --bench-attention | --bench-sample] [--filter SUBSTRING]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/cuda_factory.h"
#include "contract.h"
#include "contract_moe.h"
#include "contract_recurrent.h"

using namespace tf;
using namespace tf::contract;

namespace {

struct Case {
  std::string name;
  std::function<std::string(Backend&, Backend&)> run;
};

// Runs a gate; an exception counts as a failure with its message.
std::string guarded(const Case& c, Backend& gpu, Backend& cpu) {
  try {
    return c.run(gpu, cpu);
  } catch (const std::exception& e) {
    return std::string("threw: ") + e.what();
  }
}

AttnParams attn(int heads, int kv_heads, int hd, int window = 0, float softcap = 0.0f) {
  AttnParams p;
  p.n_heads = heads, p.n_kv_heads = kv_heads, p.head_dim = hd;
  p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
  p.sliding_window = window, p.softcap = softcap;
  return p;
}

const std::vector<SeqSpec> kSmallSeqs{{21, false, false}, {1, true, false}, {5, true, true},
                                      {8, false, false},  {3, false, false}, {2, true, true}};

SsmParams ssm_params(int heads, int hd, int groups, int n, int chunk, float dt_min, float dt_max) {
  SsmParams p;
  p.heads = heads, p.head_dim = hd, p.groups = groups, p.state_size = n, p.chunk = chunk;
  p.dt_min = dt_min, p.dt_max = dt_max;
  return p;
}

DeltaParams delta_params(int kh, int vh, int kd, int vd, int chunk) {
  DeltaParams p;
  p.k_heads = kh, p.v_heads = vh, p.k_dim = kd, p.v_dim = vd, p.chunk = chunk;
  return p;
}

// The hybrid models' ops (contract_hybrid_rows.cpp, contract_recurrent.cpp).
void add_hybrid_kernels(std::vector<Case>& v) {
  v.push_back({"topk_sigmoid_grouped n=64 8/4 k=6 bias norm", [](Backend& g, Backend& c) {
                 return sigmoid_topk_gate(real_sigmoid_topk(), g, c, 64, 8, 4, 6, true, true, 2.5f, 81);
               }});
  v.push_back({"topk_sigmoid_grouped n=45 3/2 k=5", [](Backend& g, Backend& c) {
                 return sigmoid_topk_gate(real_sigmoid_topk(), g, c, 45, 3, 2, 5, false, false, 1.0f, 82);
               }});
  for (Act a : {Act::SiLU, Act::GeluTanh, Act::Relu2})
    v.push_back({"activate " + std::to_string(static_cast<int>(a)),
                 [a](Backend& g, Backend& c) { return activate_gate(real_activate(), g, c, a, 83); }});
  v.push_back({"mul_sigmoid C=333", [](Backend& g, Backend& c) {
                 return mul_sigmoid_gate(real_mul_sigmoid(), g, c, 333, 84);
               }});
  v.push_back({"gated_rmsnorm F32 C=256 group=64 norm_first", [](Backend& g, Backend& c) {
                 return gated_rmsnorm_gate(real_gated_rmsnorm(), g, c, DType::F32, 256, 64, true, 85);
               }});
  v.push_back({"gated_rmsnorm BF16 C=150 group=50 gate_first", [](Backend& g, Backend& c) {
                 return gated_rmsnorm_gate(real_gated_rmsnorm(), g, c, DType::BF16, 150, 50, false, 86);
               }});
  // Nemotron-3-Nano's Mamba norm (groups of 512: four held columns a thread), and a group past
  // the held columns.
  v.push_back({"gated_rmsnorm BF16 C=4096 group=512 gate_first", [](Backend& g, Backend& c) {
                 return gated_rmsnorm_gate(real_gated_rmsnorm(), g, c, DType::BF16, 4096, 512, false, 186);
               }});
  v.push_back({"gated_rmsnorm F32 C=1400 group=700 norm_first", [](Backend& g, Backend& c) {
                 return gated_rmsnorm_gate(real_gated_rmsnorm(), g, c, DType::F32, 1400, 700, true, 187);
               }});
  v.push_back({"copy", [](Backend& g, Backend& c) { return copy_gate(real_copy(), g, c, 87); }});
  v.push_back({"conv1d_causal C=37 K=4 F32 bias silu", [](Backend& g, Backend& c) {
                 return conv_gate(real_conv(), g, c, 37, 4, DType::F32, true, true, kSmallSeqs, 88);
               }});
  v.push_back({"conv1d_causal C=300 K=3 BF16", [](Backend& g, Backend& c) {
                 return conv_gate(real_conv(), g, c, 300, 3, DType::BF16, false, false, kSmallSeqs, 89);
               }});
  v.push_back({"conv1d_causal C=260 K=4 in place, sequences past one segment", [](Backend& g, Backend& c) {
                 return conv_gate(real_conv(), g, c, 260, 4, DType::BF16, true, true,
                                  {{300, false, false}, {1, true, false}, {130, true, true}, {64, false, false},
                                   {65, false, false}},
                                  95, true);
               }});
  v.push_back({"ssm_scan 4 heads x 64, 2 groups, N=128, chunk 128, aligned", [](Backend& g, Backend& c) {
                 return ssm_gate(real_ssm(), g, c, ssm_params(4, 64, 2, 128, 128, 0.0f, 0.0f),
                                 {{300, false, false}, {1, true, false}, {3, true, true}, {129, false, false},
                                  {128, false, false}, {20, false, false}},
                                 96, true);
               }});
  v.push_back({"ssm_scan 4 heads x 5, 2 groups, N=7, chunk 8", [](Backend& g, Backend& c) {
                 return ssm_gate(real_ssm(), g, c, ssm_params(4, 5, 2, 7, 8, 0.1f, 0.0f), kSmallSeqs, 90);
               }});
  v.push_back({"ssm_scan 2 heads x 64, N=128, chunk 256, dt_max", [](Backend& g, Backend& c) {
                 return ssm_gate(real_ssm(), g, c, ssm_params(2, 64, 1, 128, 256, 0.0f, 0.9f),
                                 {{300, false, false}, {1, true, false}, {3, true, true}, {37, false, false}}, 91);
               }});
  v.push_back({"gated_delta 2/4 heads k_dim=12 v_dim=45 chunk 8", [](Backend& g, Backend& c) {
                 return delta_gate(real_delta(), g, c, delta_params(2, 4, 12, 45, 8), kSmallSeqs, 92);
               }});
  v.push_back({"gated_delta 1/2 heads k_dim=128 v_dim=128 chunk 64", [](Backend& g, Backend& c) {
                 return delta_gate(real_delta(), g, c, delta_params(1, 2, 128, 128, 64),
                                   {{150, false, false}, {1, true, false}, {4, true, true}, {64, false, false}}, 93);
               }});
  v.push_back({"gated_delta 1/2 heads k_dim=136 v_dim=40 chunk 16, past the register step form", [](Backend& g, Backend& c) {
                 return delta_gate(real_delta(), g, c, delta_params(1, 2, 136, 40, 16), kSmallSeqs, 98);
               }});
  v.push_back({"gated_delta 2/6 heads k_dim=128 v_dim=80 chunk 64, partial column tiles", [](Backend& g, Backend& c) {
                 return delta_gate(real_delta(), g, c, delta_params(2, 6, 128, 80, 64),
                                   {{300, false, false}, {1, true, false}, {65, false, false}, {3, true, true},
                                    {63, false, false}, {129, false, false}},
                                   97);
               }});
}

void add_hybrid_controls(std::vector<Case>& v) {
  v.push_back({"topk_sigmoid_grouped ignoring the groups", [](Backend& g, Backend& c) {
                 return sigmoid_topk_gate(control_sigmoid_topk_no_groups(), g, c, 64, 8, 4, 6, true, true, 2.5f, 81);
               }});
  v.push_back({"activate rounding to bf16", [](Backend& g, Backend& c) {
                 return activate_gate(control_activate_bf16(), g, c, Act::SiLU, 83);
               }});
  v.push_back({"mul_sigmoid reading the gate at column 0", [](Backend& g, Backend& c) {
                 return mul_sigmoid_gate(control_mul_sigmoid_col0(), g, c, 333, 84);
               }});
  v.push_back({"gated_rmsnorm over the whole row", [](Backend& g, Backend& c) {
                 return gated_rmsnorm_gate(control_gated_rmsnorm_whole_row(), g, c, DType::F32, 256, 64, true, 85);
               }});
  v.push_back({"copy dropping the last row", [](Backend& g, Backend& c) {
                 return copy_gate(control_copy_short(), g, c, 87);
               }});
  v.push_back({"conv1d_causal starting from a zero state", [](Backend& g, Backend& c) {
                 return conv_gate(control_conv_zero_state(), g, c, 37, 4, DType::F32, true, true, kSmallSeqs, 88);
               }});
  v.push_back({"ssm_scan whose chunk depends on the row count", [](Backend& g, Backend& c) {
                 return ssm_gate(control_ssm_chunk_by_rows(), g, c, ssm_params(4, 5, 2, 7, 8, 1e-3f, 0.0f), kSmallSeqs, 90);
               }});
  v.push_back({"ssm_scan step form not writing kept states", [](Backend& g, Backend& c) {
                 return ssm_gate(control_ssm_no_keep(), g, c, ssm_params(4, 5, 2, 7, 8, 1e-3f, 0.0f), kSmallSeqs, 90);
               }});
  v.push_back({"gated_delta whose chunk depends on the row count", [](Backend& g, Backend& c) {
                 return delta_gate(control_delta_chunk_by_rows(), g, c, delta_params(2, 4, 12, 45, 8), kSmallSeqs, 92);
               }});
  v.push_back({"gated_delta starting from a zero state", [](Backend& g, Backend& c) {
                 return delta_gate(control_delta_zero_state(), g, c, delta_params(2, 4, 12, 45, 8), kSmallSeqs, 92);
               }});
}

std::vector<Case> kernels() {
  std::vector<Case> v;
  auto mm = [&](DType dt, int64_t K, int64_t N, int64_t M, bool bias, uint32_t seed) {
    v.push_back({std::string("matmul ") + dtype_name(dt) + " " + std::to_string(M) + "x" +
                     std::to_string(K) + "x" + std::to_string(N),
                 [=](Backend& g, Backend& c) {
                   return matmul_gate_all(real_matmul(), g, c, dt, K, N, M, bias, seed);
                 }});
  };
  for (DType dt : {DType::BF16, DType::F16, DType::Q8_0, DType::F32}) {
    mm(dt, 64, 48, 64, true, 11);
    mm(dt, dt == DType::Q8_0 ? 96 : 131, 77, 70, false, 12);
  }
  mm(DType::F16, 75, 33, 65, true, 13);
  v.push_back({"matmul BF16 200x1024x520 (sampled m)", [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::BF16, 1024, 520, 200,
                                    {1, 2, 3, 7, 15, 16, 17, 33, 63, 64, 65, 127, 128, 129, 200}, true, 14);
               }});
  // Split-K shapes: several slices (and a short last one) on every path, the skinny, the
  // one-block-per-slice and the folding tiles, with odd K taking the unvectorized loads.
  v.push_back({"matmul BF16 80x4096x72 split-K (sampled m)", [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::BF16, 4096, 72, 80,
                                    {1, 2, 8, 9, 16, 17, 40, 64, 65, 80}, true, 16);
               }});
  // Few rows whose slices span several weight steps, so loads of the next step are in flight.
  v.push_back({"matmul BF16 17x4096x4096 multi-step slices (every m)", [](Backend& g, Backend& c) {
                 return matmul_gate_all(real_matmul(), g, c, DType::BF16, 4096, 4096, 17, true, 20);
               }});
  // 17..64 rows on the warpgroup tiles of 64 rows (a decode round of many lanes), checked against
  // every smaller batch, the few-row kernel's included (at 1..16 rows its 8 slices of 512 take two
  // column tiles a warp, in clusters, where the card has them).
  v.push_back({"matmul BF16 64x4096x2048 decode-round tiles (every m)", [](Backend& g, Backend& c) {
                 return matmul_gate_all(real_matmul(), g, c, DType::BF16, 4096, 2048, 64, true, 26);
               }});
  // 66 tiles of 64 x 128 over two slices: the warpgroup tiles fold the slices in registers.
  v.push_back({"matmul BF16 40x4096x8448 decode-round tiles folding slices (sampled m)",
               [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::BF16, 4096, 8448, 40,
                                    {1, 8, 16, 17, 33, 40}, true, 27);
               }});
  // 9 tiles of 64 x 128 over 8 slices as blocks, the last tile 6 columns wide: columns not in
  // fours, so the last block of a tile folds single floats.
  v.push_back({"matmul BF16 48x2048x1030 decode-round tiles, columns not in fours (sampled m)",
               [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::BF16, 2048, 1030, 48, {1, 5, 17, 30, 48}, true, 28);
               }});
  v.push_back({"matmul F16 12x2048x8192 multi-step slices (every m)", [](Backend& g, Backend& c) {
                 return matmul_gate_all(real_matmul(), g, c, DType::F16, 2048, 8192, 12, false, 22);
               }});
  // Past one wave of one-tile blocks, so warps own two column tiles; two slices meet in partials
  // over the wider tile, and N ends inside a group of 8 columns.
  v.push_back({"matmul BF16 13x2304x23003 two column tiles a warp (every m)", [](Backend& g, Backend& c) {
                 return matmul_gate_all(real_matmul(), g, c, DType::BF16, 2304, 23003, 13, true, 24);
               }});
  // Partials past 64 MiB, so the many-row tiles fold their slices; K = 1000 ends on a partial
  // chunk, and the smaller batches take the slice-per-block form.
  v.push_back({"matmul BF16 1100x1000x8192 folding tiles (sampled m)", [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::BF16, 1000, 8192, 1100,
                                    {1, 16, 17, 64, 65, 300, 1100}, true, 19);
               }});
  // Three slices, the last one shorter, M and N ending inside a block: at 1,040 rows (bf16) tile e's
  // 128-column blocks fold them in registers, or where forced (TF_CUDA_WG_TILE=e) its 128 x 256
  // blocks through y.
  v.push_back({"matmul BF16 1040x4096x4360 128 x 256 blocks folding three slices (sampled m)",
               [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::BF16, 4096, 4360, 1040,
                                    {1, 16, 17, 64, 65, 129, 1040}, true, 29);
               }});
  // Four slices, the last one a single 64-k stage, over whole 256-column tiles: at 1,040 rows (bf16)
  // tile e's 126 blocks of 128 x 256 fold them on chip, totals in registers and shared memory, and
  // store the last row tile's 16 rows alone.
  v.push_back({"matmul BF16 1040x3136x3584 128 x 256 blocks, totals on chip (sampled m)",
               [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::BF16, 3136, 3584, 1040,
                                    {1, 16, 17, 64, 65, 129, 1040}, true, 30);
               }});
  // One slice (K = 200) ending a chunk into a 64-k stage of the many-row tiles, which fold it:
  // the slice stays one chain, and the last stage runs its first chunk's steps alone.
  v.push_back({"matmul BF16 200x200x8448 one slice, one-chunk last stage (sampled m)",
               [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::BF16, 200, 8448, 200,
                                    {1, 16, 17, 64, 65, 129, 200}, true, 23);
               }});
  v.push_back({"matmul F16 70x1003x40 split-K odd K (sampled m)", [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::F16, 1003, 40, 70,
                                    {1, 3, 8, 9, 16, 17, 33, 64, 65, 70}, false, 17);
               }});
  v.push_back({"matmul Q8_0 70x1344x96 split-K (sampled m)", [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::Q8_0, 1344, 96, 70,
                                    {1, 7, 8, 9, 16, 17, 64, 65, 70}, true, 18);
               }});
  v.push_back({"matmul Q8_0 150x512x200 (sampled m)", [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::Q8_0, 512, 200, 150,
                                    {1, 5, 16, 17, 64, 65, 129, 150}, false, 15);
               }});
  v.push_back({"rmsnorm F32 n=4096", [](Backend& g, Backend& c) {
                 return rmsnorm_gate(real_rmsnorm(), g, c, DType::F32, 4096, false, 21);
               }});
  for (int64_t n : {int64_t{4096}, int64_t{333}, int64_t{2688}})
    v.push_back({"add_rmsnorm n=" + std::to_string(n) + (n == 333 ? " add_one" : ""), [n](Backend& g, Backend& c) {
                   return add_rmsnorm_gate(g, c, n, n == 333, 23);
                 }});
  v.push_back({"rmsnorm BF16 n=333 add_one", [](Backend& g, Backend& c) {
                 return rmsnorm_gate(real_rmsnorm(), g, c, DType::BF16, 333, true, 22);
               }});
  // Decode-like and odd widths: n=4098 alternates 16-byte aligned rows, n=3 is all tail.
  auto rms = [&](DType dt, int64_t n, bool one, uint32_t seed) {
    v.push_back({std::string("rmsnorm ") + dtype_name(dt) + " n=" + std::to_string(n) +
                     (one ? " add_one" : ""),
                 [=](Backend& g, Backend& c) {
                   return rmsnorm_gate(real_rmsnorm(), g, c, dt, n, one, seed);
                 }});
  };
  rms(DType::BF16, 4096, true, 23);
  rms(DType::F32, 5120, false, 24);
  rms(DType::F32, 333, false, 25);
  rms(DType::F32, 4098, true, 26);
  rms(DType::F32, 3, false, 27);
  v.push_back({"rope neox hd=64", [](Backend& g, Backend& c) {
                 return rope_gate(real_rope(), g, c, 4, 64, 64, true, 1.0f, 31);
               }});
  v.push_back({"rope interleaved hd=80 rot=32 mscale", [](Backend& g, Backend& c) {
                 return rope_gate(real_rope(), g, c, 3, 80, 32, false, 1.2f, 32);
               }});
  // Decode shapes, partial rotary of both layouts, and more pairs than one pass of the block.
  auto rp = [&](int heads, int hd, int rot, bool neox, float ms, uint32_t seed) {
    v.push_back({"rope " + std::string(neox ? "neox " : "interleaved ") + std::to_string(heads) + "x" +
                     std::to_string(hd) + " rot=" + std::to_string(rot) + (ms != 1.0f ? " mscale" : ""),
                 [=](Backend& g, Backend& c) {
                   return rope_gate(real_rope(), g, c, heads, hd, rot, neox, ms, seed);
                 }});
  };
  rp(32, 128, 128, true, 1.0f, 33);
  rp(8, 128, 128, true, 1.0f, 34);
  rp(16, 64, 64, false, 1.0f, 35);
  rp(4, 256, 64, true, 1.0f, 36);
  rp(4, 256, 64, false, 0.9f, 37);
  rp(40, 128, 128, true, 1.3f, 38);
  for (Act a : {Act::SiLU, Act::GeluTanh, Act::Relu2})
    v.push_back({"act_mul " + std::to_string(static_cast<int>(a)),
                 [a](Backend& g, Backend& c) { return act_gate(real_act(), g, c, a, 41); }});
  // Past 64 rows in bf16 mode, one launch of 128 x (128 gate + 128 up) blocks where one slice covers
  // K; M and N end inside a block, N odd in the second. Rows of the sampled batches come from
  // matmul_many and act_mul.
  const std::vector<int64_t> glu_ms = {1, 16, 17, 64, 65, 129, 300};
  v.push_back({"matmul_act_mul SiLU 520x256x3400 (sampled m)", [glu_ms](Backend& g, Backend& c) {
                 return matmul_act_mul_gate(real_glu(), g, c, Act::SiLU, 256, 3400, 520, glu_ms, 42);
               }});
  v.push_back({"matmul_act_mul GELU 600x256x3401 (sampled m)", [glu_ms](Backend& g, Backend& c) {
                 return matmul_act_mul_gate(real_glu(), g, c, Act::GeluTanh, 256, 3401, 600, glu_ms, 43);
               }});
  v.push_back({"matmul_act_mul squared ReLU 700x192x3000 (sampled m)", [glu_ms](Backend& g, Backend& c) {
                 return matmul_act_mul_gate(real_glu(), g, c, Act::Relu2, 192, 3000, 700, glu_ms, 44);
               }});
  // The whole MLP: down reading act's bf16 plane straight from the gated launch (I % 64 == 0), and
  // where I is not, down on the gated launch's f32 output.
  v.push_back({"mlp_gated SiLU 520 rows 256 -> 3456 -> 256 (sampled m)", [glu_ms](Backend& g, Backend& c) {
                 return mlp_gated_gate(real_mlp(), g, c, Act::SiLU, 256, 3456, 520, glu_ms, 45);
               }});
  v.push_back({"mlp_gated GELU 600 rows 192 -> 3400 -> 192 (sampled m)", [glu_ms](Backend& g, Backend& c) {
                 return mlp_gated_gate(real_mlp(), g, c, Act::GeluTanh, 192, 3400, 600, glu_ms, 46);
               }});
  v.push_back({"add + scale", [](Backend& g, Backend& c) { return add_scale_gate(g, c, 51); }});
  v.push_back({"embed (all dtypes)", [](Backend& g, Backend& c) { return embed_gate(g, c, 52); }});
  v.push_back({"gather_rows + scatter_add_scaled", [](Backend& g, Backend& c) {
                 return gather_scatter_gate(real_scatter(), g, c, 53);
               }});
  v.push_back({"topk_softmax n=64 k=4 norm", [](Backend& g, Backend& c) {
                 return topk_gate(real_topk(), g, c, 64, 4, true, 61);
               }});
  v.push_back({"topk_softmax n=300 k=8", [](Backend& g, Backend& c) {
                 return topk_gate(real_topk(), g, c, 300, 8, false, 62);
               }});
  for (int64_t n : {int64_t{128256}, int64_t{1000}, int64_t{37}})
    v.push_back({"sample_rows n=" + std::to_string(n), [n](Backend& g, Backend& c) {
                   return sample_gate(real_sample(), g, c, n, 63);
                 }});
  // Llama, Qwen3 (q/k norms), Qwen3-Next (zero-centred norms, partial rotary), Nemotron-H
  // (neither), an odd head with a norm tail, the largest head the fused kernel takes, and a head
  // past 256 whose rows move by float4s.
  auto prep = [&](const std::string& name, AttnParams p, int rot, bool neox, bool norms, DType dt, bool one,
                  uint32_t seed) {
    v.push_back({"attention_prep " + name, [=](Backend& g, Backend& c) {
                   return attention_prep_gate(real_prep(), g, c, p, rot, neox, norms, dt, one, seed);
                 }});
  };
  prep("32/8 hd=128 rope", attn(32, 8, 128), 128, true, false, DType::F32, false, 76);
  prep("32/4 hd=128 rope, q/k norms", attn(32, 4, 128), 128, true, true, DType::BF16, false, 77);
  prep("16/2 hd=256 rot=64, 1+w norms", attn(16, 2, 256), 64, true, true, DType::BF16, true, 78);
  prep("5/1 hd=78 rot=26 interleaved, norms", attn(5, 1, 78), 26, false, true, DType::F32, false, 79);
  prep("6/2 hd=64 no rope", attn(6, 2, 64), 0, true, false, DType::F32, false, 80);
  prep("3/1 hd=510 rot=508 interleaved, norms", attn(3, 1, 510), 508, false, true, DType::F32, true, 81);
  prep("4/2 hd=384 rot=384, norms", attn(4, 2, 384), 384, true, true, DType::BF16, false, 83);
  prep("2/1 hd=520 (op by op), norms", attn(2, 1, 520), 64, true, true, DType::F32, false, 82);
  v.push_back({"kv_page_to_host + kv_page_from_host", [](Backend& g, Backend& c) {
                 return kv_page_gate(g, c, 75);
               }});
  auto at = [&](const std::string& name, int L, AttnParams p, int ps, uint32_t seed) {
    v.push_back({"kv_store + attention " + name, [=](Backend& g, Backend& c) {
                   return attention_gate(real_attention(), real_store(), g, c, L, p, ps, seed);
                 }});
  };
  at("L=37 4/2 hd=64", 37, attn(4, 2, 64), 16, 71);
  at("L=300 8/2 hd=128", 300, attn(8, 2, 128), 16, 72);
  at("L=70 4/4 hd=80 window=7 softcap=30", 70, attn(4, 4, 80, 7, 30.0f), 8, 73);
  at("L=45 2/1 hd=256", 45, attn(2, 1, 256), 32, 74);
  // Several splits of 64 keys, staged dims in chunks of 128, sliding windows across split seams.
  at("L=1100 8/2 hd=128", 1100, attn(8, 2, 128), 16, 76);
  at("L=2050 32/8 hd=128", 2050, attn(32, 8, 128), 16, 77);
  at("L=300 6/2 hd=80 page 7", 300, attn(6, 2, 80), 7, 78);
  at("L=400 4/1 hd=256 window=100", 400, attn(4, 1, 256), 16, 79);
  at("L=260 2/2 hd=512 window=70 softcap=50", 260, attn(2, 2, 512, 70, 50.0f), 16, 80);
  at("L=200 4/4 hd=34 window=130", 200, attn(4, 4, 34, 130), 5, 94);
  at("L=150 3/1 hd=384", 150, attn(3, 1, 384), 16, 95);
  // hd_pad past head_dim (36 -> 40) on the flash kernels: the padded dims stage as zeros.
  at("L=300 4/2 hd=36", 300, attn(4, 2, 36), 16, 100);
  // Head dims far below the wgmma flash kernel's 128 staged dims (one or two k16 steps), and 64
  // over several splits: a 64-dim form of that kernel failed these.
  at("L=200 4/2 hd=16", 200, attn(4, 2, 16), 16, 101);
  at("L=300 4/2 hd=64", 300, attn(4, 2, 64), 16, 103);
  at("L=150 8/2 hd=32 page 5", 150, attn(8, 2, 32), 5, 102);
  // One kv head for eight (a block of 8 rows x 8 heads), a window across split seams, 6 k16 steps.
  at("L=333 8/1 hd=96 window=200", 333, attn(8, 1, 96, 200), 16, 104);
  // Pages of fewer keys than a split (8, 32), more (128) and of a size that divides no split
  // (24), at head dims 64 and 128, with windows that start inside a page.
  at("L=700 8/2 hd=128 window=300 page 32", 700, attn(8, 2, 128, 300), 32, 105);
  at("L=500 4/1 hd=64 window=77 page 128", 500, attn(4, 1, 64, 77), 128, 106);
  at("L=300 8/2 hd=128 page 8", 300, attn(8, 2, 128), 8, 107);
  at("L=260 4/2 hd=128 page 24", 260, attn(4, 2, 128), 24, 108);
  // Head dims past 128 over many splits on the wide flash form (single rows stay on the tile
  // kernel, so the variants compare the two): 16 k16 steps, 13 with a window and softcap.
  at("L=1100 16/2 hd=256", 1100, attn(16, 2, 256), 16, 110);
  at("L=1200 16/8 hd=200 window=500 softcap=50", 1200, attn(16, 8, 200, 500, 50.0f), 16, 111);
  auto multi = [&](const std::string& name, std::vector<int> lens, AttnParams p, int ps, uint32_t seed) {
    v.push_back({"attention " + name, [=](Backend& g, Backend& c) {
                   return attention_multi_gate(real_attention(), g, c, lens, p, ps, seed);
                 }});
  };
  multi("4 sequences 700/1/65/130 8/2 hd=128", {700, 1, 65, 130}, attn(8, 2, 128), 16, 96);
  multi("3 sequences 300/129/64 4/2 hd=80 window=90", {300, 129, 64}, attn(4, 2, 80, 90), 16, 97);
  multi("2 sequences 1030/513 32/8 hd=128", {1030, 513}, attn(32, 8, 128), 16, 98);
  multi("3 sequences 80/200/17 4/2 hd=16", {80, 200, 17}, attn(4, 2, 16), 16, 99);
  multi("3 sequences 600/65/200 8/2 hd=128 window=150 page 64", {600, 65, 200}, attn(8, 2, 128, 150), 64, 109);
  multi("4 sequences 700/1/130/500 16/4 hd=136", {700, 1, 130, 500}, attn(16, 4, 136), 16, 112);
  add_hybrid_kernels(v);
  for (auto& [name, run] : moe_kernel_cases()) v.push_back({name, run});
  return v;
}

// With --matmul-input bf16 rounding x is right, so the x control keeps x whole instead.
std::vector<Case> controls(MatmulInput mi) {
  std::vector<Case> v;
  v.push_back({"matmul whose K order depends on M", [](Backend& g, Backend& c) {
                 return matmul_gate_all(control_matmul_korder_by_m(), g, c, DType::BF16, 64, 48, 64, true, 11);
               }});
  v.push_back({"matmul dropping the last k", [](Backend& g, Backend& c) {
                 return matmul_gate_all(control_matmul_drop_last_k(), g, c, DType::BF16, 64, 48, 64, true, 11);
               }});
  if (mi == MatmulInput::F32)
    v.push_back({"matmul rounding x to bf16", [](Backend& g, Backend& c) {
                   return matmul_gate_all(control_matmul_x_bf16(), g, c, DType::BF16, 64, 48, 64, true, 11);
                 }});
  else
    v.push_back({"matmul taking x whole under --matmul-input bf16", [](Backend& g, Backend& c) {
                   return matmul_gate_all(control_matmul_x_whole(), g, c, DType::BF16, 64, 48, 64, true, 11);
                 }});
  v.push_back({"rmsnorm whose order depends on M", [](Backend& g, Backend& c) {
                 return rmsnorm_gate(control_rmsnorm_order_by_m(), g, c, DType::F32, 4096, false, 21);
               }});
  v.push_back({"rope taking the row index as position", [](Backend& g, Backend& c) {
                 return rope_gate(control_rope_row_as_pos(), g, c, 4, 64, 64, true, 1.0f, 31);
               }});
  v.push_back({"act_mul with erf gelu", [](Backend& g, Backend& c) {
                 return act_gate(control_act_gelu_erf(), g, c, Act::GeluTanh, 41);
               }});
  v.push_back({"matmul_act_mul with gate and up swapped", [](Backend& g, Backend& c) {
                 return matmul_act_mul_gate(control_glu_swapped(), g, c, Act::SiLU, 256, 3400, 520, {1, 65}, 42);
               }});
  v.push_back({"mlp_gated with down on unrounded activations (bf16) or gate and up swapped (f32)",
               [](Backend& g, Backend& c) {
                 return mlp_gated_gate(control_mlp_down_unrounded(), g, c, Act::SiLU, 256, 3456, 520, {1, 65}, 45);
               }});
  v.push_back({"attention_prep adding a head's squares in reverse", [](Backend& g, Backend& c) {
                 return attention_prep_gate(control_prep_norm_reversed(), g, c, attn(32, 4, 128), 128, true, true,
                                            DType::BF16, false, 77);
               }});
  v.push_back({"attention_prep storing k before its rotation", [](Backend& g, Backend& c) {
                 return attention_prep_gate(control_prep_store_before_rope(), g, c, attn(32, 8, 128), 128, true,
                                            false, DType::F32, false, 76);
               }});
  v.push_back({"kv_store ignoring the page table", [](Backend& g, Backend& c) {
                 return attention_gate(real_attention(), control_store_ignores_pages(), g, c, 37, attn(4, 2, 64), 16, 71);
               }});
  v.push_back({"attention dropping the row's own key", [](Backend& g, Backend& c) {
                 return attention_gate(control_attention_drop_last_key(), real_store(), g, c, 37, attn(4, 2, 64), 16, 71);
               }});
  v.push_back({"attention whose key order depends on the row count", [](Backend& g, Backend& c) {
                 return attention_gate(control_attention_order_by_rows(), real_store(), g, c, 37, attn(4, 2, 64), 16, 71);
               }});
  v.push_back({"attention reading every row's keys from the first sequence", [](Backend& g, Backend& c) {
                 return attention_multi_gate(control_attention_one_sequence(), g, c, {300, 129, 64},
                                             attn(4, 2, 80, 90), 16, 97);
               }});
  v.push_back({"topk ranking ties to the higher index", [](Backend& g, Backend& c) {
                 return topk_gate(control_topk_ties_high(), g, c, 64, 4, true, 61);
               }});
  v.push_back({"scatter_add applied in reverse order", [](Backend& g, Backend& c) {
                 return gather_scatter_gate(control_scatter_reversed(), g, c, 53);
               }});
  v.push_back({"sampling keyed by the spec's index, not its position", [](Backend& g, Backend& c) {
                 return sample_gate(control_sample_keyed_by_index(), g, c, 1000, 63);
               }});
  v.push_back({"sampling that drops the penalties", [](Backend& g, Backend& c) {
                 return sample_gate(control_sample_without_penalties(), g, c, 1000, 63);
               }});
  add_hybrid_controls(v);
  for (auto& [name, run] : moe_control_cases()) v.push_back({name, run});
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  bool bench = false, bench_few = false, bench_moe = false, bench_launch = false, bench_attn = false,
       bench_sample = false;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // lines survive a run cut short by a timeout
  std::string filter;  // --filter S: only the kernel cases whose names contain S, no controls
  MatmulInput mi = MatmulInput::F32;  // --matmul-input bf16: both backends round x into matmuls
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--bench") == 0) bench = true;
    else if (std::strcmp(argv[i], "--bench-moe") == 0) bench_moe = true;
    else if (std::strcmp(argv[i], "--bench-few") == 0) bench_few = true;
    else if (std::strcmp(argv[i], "--bench-launch") == 0) bench_launch = true;
    else if (std::strcmp(argv[i], "--bench-attention") == 0) bench_attn = true;
    else if (std::strcmp(argv[i], "--bench-sample") == 0) bench_sample = true;
    else if (std::strcmp(argv[i], "--filter") == 0 && i + 1 < argc) filter = argv[++i];
    else if (std::strcmp(argv[i], "--matmul-input") == 0 && i + 1 < argc &&
             (std::strcmp(argv[i + 1], "f32") == 0 || std::strcmp(argv[i + 1], "bf16") == 0))
      mi = parse_matmul_input(argv[++i]);
    else {
      std::printf("usage: tf_kernel_contract [--bench | --bench-few | --bench-moe | --bench-launch | --bench-attention | --bench-sample] [--filter SUBSTRING] [--matmul-input f32|bf16]\n");
      return 2;
    }
  }
  if (cuda_device_count() == 0) {
    std::printf("SKIP: no CUDA device or driver here; the kernel contract needs a GPU\n");
    return 0;
  }
  try {
    auto gpu = make_cuda_backend(0);
    auto cpu = make_cpu_backend(2);
    gpu->set_matmul_input(mi);
    cpu->set_matmul_input(mi);
    std::printf("gpu backend: %s, reference: %s, matmul input %s\n", gpu->name().c_str(),
                cpu->name().c_str(), matmul_input_name(mi));
    int passed = 0, caught = 0;
    auto ks = kernels(), cs = controls(mi);
    if (!filter.empty()) {
      std::erase_if(ks, [&](const Case& c) { return c.name.find(filter) == std::string::npos; });
      cs.clear();
    }
    for (const auto& c : ks) {
      const std::string e = guarded(c, *gpu, *cpu);
      passed += e.empty();
      std::printf("%s kernel  %s%s%s\n", e.empty() ? "PASS" : "FAIL", c.name.c_str(),
                  e.empty() ? "" : ": ", e.c_str());
      std::fflush(stdout);
    }
    for (const auto& c : cs) {
      const std::string e = guarded(c, *gpu, *cpu);
      caught += !e.empty();
      std::printf("%s control %s%s%s\n", e.empty() ? "MISSED" : "CAUGHT", c.name.c_str(),
                  e.empty() ? "" : ": ", e.c_str());
      std::fflush(stdout);
    }
    std::printf("SUMMARY: kernels passed %d/%zu, controls caught %d/%zu\n", passed, ks.size(),
                caught, cs.size());
    if (bench) run_bench(*gpu);
    else if (bench_attn) run_bench_attention(*gpu);
    else if (bench_few) run_bench_few(*gpu);
    else if (bench_moe) run_bench_moe(*gpu);
    else if (bench_launch) run_bench_launch(*gpu);
    else if (bench_sample) run_bench_sample(*gpu);
    return passed == static_cast<int>(ks.size()) && caught == static_cast<int>(cs.size()) ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    return 1;
  }
}
