#pragma once
// Kernel contract of the CUDA backend: gates that compare it with the cpu backend and check
// batch invariance, written over op functors so planted faults can be run through them.
#include <functional>
#include <string>
#include <vector>

#include "../unit/cpu_test_gates.h"
#include "backend/backend.h"

namespace tf::contract {

using cputest::HostWeight;
using cputest::make_weight;
using cputest::random_floats;

using MatmulFn = std::function<void(Backend&, const Tensor&, const Weight&, const Weight*, Tensor)>;
using RmsFn = std::function<void(Backend&, const Tensor&, const Weight&, float, bool, Tensor)>;
using RopeFn = std::function<void(Backend&, Tensor, int, const int32_t*, const RopeParams&)>;
using ActFn = std::function<void(Backend&, Act, const Tensor&, const Tensor&, Tensor)>;
using StoreFn = std::function<void(Backend&, KvStorage&, int, const Tensor&, const Tensor&, const RowLayout&)>;
using AttnFn = std::function<void(Backend&, const Tensor&, Tensor, const KvStorage&, int,
                                  const RowLayout&, const AttnParams&)>;
using PrepFn = std::function<void(Backend&, Tensor, Tensor, const Tensor&, const QkNorm&, const RopeParams&,
                                   const AttnParams&, KvStorage&, int, const RowLayout&)>;
// matmul_act_mul: false where the backend left the shape to matmul_many and act_mul.
using GluFn = std::function<bool(Backend&, Act, const Tensor&, const Weight&, const Weight&, Tensor)>;
// mlp_gated: false where the backend left the MLP to its ops.
using MlpFn = std::function<bool(Backend&, Act, const Tensor&, const Weight&, const Weight&, const Weight&, Tensor,
                                 Tensor)>;
using TopkFn = std::function<void(Backend&, const Tensor&, int, bool, int32_t*, float*)>;
using ScatterFn = std::function<void(Backend&, Tensor, const Tensor&, const int32_t*, const float*, int)>;
using SampleFn = std::function<void(Backend&, const Tensor&, const std::vector<SampleSpec>&,
                                   const std::vector<PenaltyToken>&, int32_t*)>;

MatmulFn real_matmul();
RmsFn real_rmsnorm();
RopeFn real_rope();
ActFn real_act();
GluFn real_glu();
MlpFn real_mlp();
StoreFn real_store();
AttnFn real_attention();
PrepFn real_prep();
TopkFn real_topk();
ScatterFn real_scatter();
SampleFn real_sample();

// "" when |got - ref| <= tol * mag (+ extra) for every element, else the first element that is
// not; NaN anywhere fails.
std::string close(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<double>& mag,
                  double tol, const std::string& what, const std::vector<double>* extra = nullptr);
// "" when got and ref hold the same bits, else the first element that differs.
std::string exact(const std::vector<float>& got, const std::vector<float>& ref, const std::string& what);

// Where a batch of m rows starts inside M rows: spread over the range, the same for every gate.
int64_t offset_for(int64_t m, int64_t M);

// Each gate returns "" when the op passes, else the first failure. gpu is checked against cpu.
std::string matmul_gate(const MatmulFn& f, Backend& gpu, Backend& cpu, DType dt, int64_t K,
                        int64_t N, int64_t M, const std::vector<int64_t>& ms, bool bias,
                        uint32_t seed);
// matmul_gate with every m in 1..min(64, M).
std::string matmul_gate_all(const MatmulFn& f, Backend& gpu, Backend& cpu, DType dt, int64_t K,
                            int64_t N, int64_t M, bool bias, uint32_t seed);
// matmul_act_mul (act(x gate^T) * (x up^T), BF16 weights N x K, M rows) against the cpu's matmuls
// and act_mul, bit-equal to the gpu's matmul_many then act_mul, and across row batches of ms.
std::string matmul_act_mul_gate(const GluFn& f, Backend& gpu, Backend& cpu, Act act, int64_t K, int64_t N,
                                int64_t M, const std::vector<int64_t>& ms, uint32_t seed);
// mlp_gated (H -> I -> H, BF16 weights, M rows) against the cpu's ops, bit-equal to the gpu's
// matmul_many, act_mul and matmul, and across row batches of ms.
std::string mlp_gated_gate(const MlpFn& f, Backend& gpu, Backend& cpu, Act act, int64_t H, int64_t I, int64_t M,
                           const std::vector<int64_t>& ms, uint32_t seed);
// add_rmsnorm against the cpu, bit-equal to the gpu's add then rmsnorm, and across row batches.
std::string add_rmsnorm_gate(Backend& gpu, Backend& cpu, int64_t n, bool add_one, uint32_t seed);
std::string rmsnorm_gate(const RmsFn& f, Backend& gpu, Backend& cpu, DType gdt, int64_t n,
                         bool add_one, uint32_t seed);
std::string rope_gate(const RopeFn& f, Backend& gpu, Backend& cpu, int n_heads, int head_dim,
                      int rot_dim, bool neox, float mscale, uint32_t seed);
std::string act_gate(const ActFn& f, Backend& gpu, Backend& cpu, Act act, uint32_t seed);
std::string add_scale_gate(Backend& gpu, Backend& cpu, uint32_t seed);
std::string embed_gate(Backend& gpu, Backend& cpu, uint32_t seed);
std::string gather_scatter_gate(const ScatterFn& f, Backend& gpu, Backend& cpu, uint32_t seed);
std::string topk_gate(const TopkFn& f, Backend& gpu, Backend& cpu, int64_t n, int k, bool norm,
                      uint32_t seed);
// sample_rows: the cpu's ids exactly, greedy and sampled (penalties, temperature, top_k, top_p,
// min_p), on random rows and rows of ties, NaNs, infinities and signed zeros, and across batches.
std::string sample_gate(const SampleFn& f, Backend& gpu, Backend& cpu, int64_t n, uint32_t seed);
// attention_prep (norms false: no q/k norms; rot_dim 0: no rope) against the cpu backend in
// q, k and the pool, bit-equal to the gpu's rmsnorm, rope and kv_store one by one, and across
// calls of 1, 7, 33 and 64 rows.
std::string attention_prep_gate(const PrepFn& f, Backend& gpu, Backend& cpu, const AttnParams& p, int rot_dim,
                                bool neox, bool norms, DType norm_dt, bool add_one, uint32_t seed);
// kv_page_to_host / kv_page_from_host: same host layout and bits as the cpu backend.
std::string kv_page_gate(Backend& gpu, Backend& cpu, uint32_t seed);
std::string attention_gate(const AttnFn& f, const StoreFn& st, Backend& gpu, Backend& cpu, int L,
                           const AttnParams& p, int page_size, uint32_t seed);
// Rows of several sequences in one call, interleaved, one at a time, and as decode-like calls.
std::string attention_multi_gate(const AttnFn& f, Backend& gpu, Backend& cpu, const std::vector<int>& lens,
                                 const AttnParams& p, int page_size, uint32_t seed);

// Planted faults, compiled only into this test (contract_controls.cu).
MatmulFn control_matmul_korder_by_m();
MatmulFn control_matmul_drop_last_k();
MatmulFn control_matmul_x_bf16();
MatmulFn control_matmul_x_whole();
RmsFn control_rmsnorm_order_by_m();
RopeFn control_rope_row_as_pos();
ActFn control_act_gelu_erf();
GluFn control_glu_swapped();
MlpFn control_mlp_down_unrounded();
StoreFn control_store_ignores_pages();
PrepFn control_prep_norm_reversed();
PrepFn control_prep_store_before_rope();
AttnFn control_attention_drop_last_key();
AttnFn control_attention_order_by_rows();
AttnFn control_attention_one_sequence();
TopkFn control_topk_ties_high();
ScatterFn control_scatter_reversed();
SampleFn control_sample_keyed_by_index();
SampleFn control_sample_without_penalties();

// Timings for the report: copy bandwidth, big bf16 matmul, batch-1 matmuls.
void run_bench(Backend& gpu);
void run_bench_moe(Backend& gpu);  // the MoE layer timings of run_bench alone
void run_bench_few(Backend& gpu);  // run_bench's decode (few-row) matmuls and MoE layers alone
void run_bench_sample(Backend& gpu);  // run_bench's sampling: 1 and 64 rows, greedy and each filter
void run_bench_attention(Backend& gpu);  // run_bench's attention timings alone
void run_bench_launch(Backend& gpu);  // what a launch costs in a chain of dependent kernels

}  // namespace tf::contract
