// MoE layers on the device: routing (cuda_moe_route.cu), grouped expert matmuls and the weighted
// sum, with no host round trip.
//
// Order rule: routing's (cuda_moe_route.cu). An expert's rows run through the grouped matmul,
// whose per-row bits are matmul's. Row r's output starts at 0 and adds weight * expert output for
// its chosen experts in increasing expert index.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_hopper.cuh"
#include "backend/cuda/cuda_matmul.cuh"
#include "backend/cuda/cuda_moe.cuh"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

namespace {

constexpr int kRowsPerItem = 16;  // rows of one grouped-matmul work item (the skinny kernel's M)

enum Slot { kIdx = kSlotMoe, kWeight, kOrder, kItems, kGate, kUp, kDown, kPlane };
static_assert(kPlane < kSlotMoe + kSlotMoeCount, "the MoE layer has at most eight buffer slots");

// out[r][c] = 0 + w * down[pair][c] over the row's pairs in increasing expert index: block
// (x, y) takes columns of rows y, y + gridDim.y, ..., ranking each row's pairs by expert first.
// With shared set, out = shared (times sigmoid(sgate[r]) when set) + that sum, rounded as
// mul_sigmoid_rows and add round them.
__global__ void moe_combine_kernel(const int32_t* idx, const float* w, const float* down, int k,
                                   int64_t rows, int64_t cols, float* out, const float* shared,
                                   const float* sgate) {
  grid_wait();
  grid_launch_next();
  __shared__ int32_t by_expert[kMaxK];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int32_t* ir = idx + r * k;
    if (static_cast<int>(threadIdx.x) < k) {
      const int j = static_cast<int>(threadIdx.x);
      const int32_t ej = ir[j];
      int rank = 0;
#pragma unroll 8
      for (int t = 0; t < k; ++t) rank += ir[t] < ej || (ir[t] == ej && t < j);
      by_expert[rank] = j;
    }
    __syncthreads();
    if (c < cols) {
      float acc = 0.0f;
      // Unrolled so a run of pairs' loads go out together; the adds stay in rank order.
#pragma unroll 8
      for (int t = 0; t < k; ++t) {
        const int j = by_expert[t];
        acc = acc + w[r * k + j] * down[(r * k + j) * cols + c];
      }
      if (shared) {
        float v = shared[r * cols + c];
        if (sgate) v = v * sigmoid_f(sgate[r]);
        acc = v + acc;
      }
      out[r * cols + c] = acc;
    }
    __syncthreads();  // the next row overwrites by_expert
  }
}

// Whether the down matmul's first weight loads go out before its wait (TF_CUDA_MOE_EARLY=0:
// never, for side-by-side timing; the same loads and products, so the same bits).
bool moe_early() {
  static const bool on = !env_zero("TF_CUDA_MOE_EARLY");
  return on;
}

// Whether a layer's expert matmuls run on the warpgroup tiles' 128-row items: BF16 experts that
// average 12 pairs or more (a prefill chunk's; a decode round's few rows keep the few-row kernel's
// items of kRowsPerItem). TF_CUDA_MOE_WG=0: never; =1: wherever they can run (side-by-side timing
// and checks). Either kernel gives a pair the same bits.
bool moe_wg(DType dt, int64_t pairs, int64_t E, int64_t H, int64_t I) {
  static const int forced = env_switch("TF_CUDA_MOE_WG");
  if (forced == 0 || dt != DType::BF16 || H % 8 != 0 || I % 8 != 0 || !wgmma_ready()) return false;
  return forced == 1 || pairs >= 12 * E;
}

}  // namespace

void* CudaBackend::buffer(int slot, uint64_t n) {
  if (buffers_.size() <= static_cast<size_t>(slot)) buffers_.resize(static_cast<size_t>(slot) + 1);
  Buffer& b = buffers_[static_cast<size_t>(slot)];
  if (n <= b.n) return b.p;
  graph_refuse();
  const uint64_t want = std::max<uint64_t>(n, b.n * 2);
  void* p = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&p, want), "buffer: allocating ", want, " bytes");
  cudaFree(b.p);
  blocks_.counter()->fetch_sub(b.n);
  blocks_.counter()->fetch_add(want);
  b.p = p, b.n = want;
  return p;
}

const ExpertPtr* CudaBackend::expert_ptrs(const MoeExperts& ex) {
  // A weight freed and another made at its host and device addresses is a new weight (new id):
  // the table is remade.
  const uint64_t tag = as_cuda(*ex.up[0], "moe_experts").id;
  const size_t E = ex.up.size();
  auto it = expert_ptrs_.find(ex.up[0]);
  if (it != expert_ptrs_.end() && it->second.tag == tag && it->second.experts == E) return it->second.table;
  graph_refuse();
  if (it != expert_ptrs_.end()) {
    cudaFree(it->second.table);
    blocks_.counter()->fetch_sub(it->second.bytes);
    expert_ptrs_.erase(it);
  }
  std::vector<ExpertPtr> host(3 * E);
  for (size_t e = 0; e < E; ++e) {
    const Weight* ws[3] = {ex.gate.empty() ? nullptr : ex.gate[e], ex.up[e], ex.down[e]};
    for (int j = 0; j < 3; ++j) {
      if (!ws[j]) continue;
      const CudaWeight& cw = as_cuda(*ws[j], "moe_experts");
      host[j * E + e] = {cw.data, cw.scales};
    }
  }
  void* d = nullptr;
  TF_CUDA_CHECK(cudaMalloc(&d, host.size() * sizeof(ExpertPtr)), "moe_experts: expert table");
  blocks_.counter()->fetch_add(host.size() * sizeof(ExpertPtr));
  upload_bytes(d, host.data(), host.size() * sizeof(ExpertPtr));
  expert_ptrs_[ex.up[0]] = ExpertTable{static_cast<ExpertPtr*>(d), tag, E, host.size() * sizeof(ExpertPtr)};
  return static_cast<ExpertPtr*>(d);
}

bool CudaBackend::moe_experts(const Tensor& x, const Tensor& logits, const MoeRoute& route,
                              const MoeExperts& ex, Tensor out, const MoeShared& shared) {
  const char* op = "moe_experts";
  const int64_t E = static_cast<int64_t>(ex.up.size());
  if (E == 0 || E > kMaxExperts || route.k < 1 || route.k > kMaxK || route.k > E) return false;
  if (ex.down.size() != ex.up.size() || (!ex.gate.empty() && ex.gate.size() != ex.up.size()))
    return false;
  const DType dt = ex.up[0]->dtype;
  if (dt != DType::BF16 && dt != DType::F16 && dt != DType::Q8_0) return false;
  const int64_t H = x.cols, I = ex.up[0]->rows;
  for (int64_t e = 0; e < E; ++e) {
    const Weight* u = ex.up[static_cast<size_t>(e)];
    const Weight* d = ex.down[static_cast<size_t>(e)];
    const Weight* g = ex.gate.empty() ? u : ex.gate[static_cast<size_t>(e)];
    if (u->dtype != dt || d->dtype != dt || g->dtype != dt || u->rows != I || u->cols != H ||
        g->rows != I || g->cols != H || d->rows != H || d->cols != I)
      return false;
  }
  if (route.sigmoid && (route.n_group < 1 || route.n_group > 32)) return false;
  check_tensor(x, op, "x");
  check_tensor(logits, op, "logits");
  check_tensor(out, op, "out");
  if (shared.y) {
    check_tensor(*shared.y, op, "shared");
    TF_CHECK(shared.y->rows == x.rows && shared.y->cols == out.cols, op, ": shared [", shared.y->rows, " x ",
             shared.y->cols, "] for ", x.rows, " rows of ", out.cols);
    if (shared.gate) {
      check_tensor(*shared.gate, op, "shared gate");
      TF_CHECK(shared.gate->rows == x.rows && shared.gate->cols == 1, op, ": shared gate [", shared.gate->rows,
               " x ", shared.gate->cols, "] for ", x.rows, " rows");
    }
  }
  TF_CHECK(logits.rows == x.rows && logits.cols == E && out.rows == x.rows && out.cols == H, op,
           ": x [", x.rows, " x ", x.cols, "], logits [", logits.rows, " x ", logits.cols,
           "], out [", out.rows, " x ", out.cols, "] for ", E, " experts");
  if (route.sigmoid)
    TF_CHECK(E % route.n_group == 0 && route.topk_group >= 1 && route.topk_group <= route.n_group &&
                 route.k <= static_cast<int64_t>(route.topk_group) * (E / route.n_group),
             op, ": ", E, " experts in ", route.n_group, " groups, best ", route.topk_group,
             " groups, k ", route.k);
  const int64_t m = x.rows, k = route.k, P = m * k;
  if (m == 0) return true;
  const bool wg = moe_wg(dt, P, E, H, I);
  const int rpi = wg ? mm::kWgGroupRows : kRowsPerItem;
  const int64_t max_items = P / rpi + std::min<int64_t>(E, P);
  if (2 * max_items > 65535) return false;  // more work items than one launch takes

  auto* idx = static_cast<int32_t*>(buffer(kIdx, static_cast<uint64_t>(P) * 4));
  auto* wts = static_cast<float*>(buffer(kWeight, static_cast<uint64_t>(P) * 4));
  auto* order = static_cast<int32_t*>(buffer(kOrder, static_cast<uint64_t>(P) * 4));
  auto* items = static_cast<int32_t*>(buffer(kItems, static_cast<uint64_t>(3 * max_items + 1) * 4));
  {
    const ProfScope ps(*this, "moe route", nullptr, m);
    const float* bias = nullptr;
    if (route.sigmoid && route.bias) {
      const CudaWeight& bw = as_cuda(*route.bias, op);
      TF_CHECK(bw.rows == 1 && bw.cols == E && bw.f32, op, ": bias ", bw.name, " is not a vector of ", E);
      bias = bw.f32;
    }
    moe_route(logits.data, bias, static_cast<int>(m), static_cast<int>(E), route, rpi,
              {idx, wts, order, items, items + 3 * max_items});
    check_launch(op);
  }
  const ExpertPtr* ptrs = expert_ptrs(ex);
  const bool gated = !ex.gate.empty();
  auto* gbuf = static_cast<float*>(buffer(kGate, static_cast<uint64_t>(P * I) * 4));
  auto* ubuf = static_cast<float*>(buffer(kUp, static_cast<uint64_t>(P * I) * 4));
  auto* dbuf = static_cast<float*>(buffer(kDown, static_cast<uint64_t>(P * H) * 4));
  if (wg) {
    // x's rows in list order as split_x's planes, gate and up into list places, act(gate) * up
    // (or act(up)) split likewise, and down into the pairs' rows: the warpgroup tiles' operands.
    const int planes = mm::x_lo(*this) ? 2 : 1;
    const int64_t Hp = (H + 31) / 32 * 32, Ip = (I + 31) / 32 * 32;
    auto* plane = static_cast<uint16_t*>(buffer(kPlane, static_cast<uint64_t>(planes * P * std::max(Hp, Ip)) * 2));
    auto split_rows = [&](const float* src, int64_t K, const int32_t* rows, int x_div, const float* x2, int act) {
      const int64_t Kp = (K + 31) / 32 * 32;
      const bool vec = K % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0 &&
                       reinterpret_cast<uintptr_t>(x2) % 16 == 0;
      launch_kernel(mm::split_x_kernel, grid_for(P * (Kp / 8), 256), 256, 0, src, P, K, Kp, vec, plane,
                    planes == 2 ? plane + P * Kp : nullptr, rows, x_div, x2, act);
    };
    mm::WgGroup g;
    g.items = items;
    g.n_items = items + 3 * max_items;
    const int items_max = static_cast<int>(max_items);
    {
      const ProfScope ps(*this, gated ? "moe gate+up" : "moe up", nullptr, m);
      split_rows(x.data, H, order, static_cast<int>(k), nullptr, -1);
      g.w[0] = gated ? ptrs : ptrs + E;
      if (gated) g.w[1] = ptrs + E, g.y2 = ubuf;
      mm::launch_bf16_wgmma_grouped(*this, plane, P, H, g, gated ? 2 : 1, items_max, gated ? gbuf : ubuf, I);
    }
    {
      const ProfScope ps(*this, "moe down", nullptr, m);
      split_rows(gated ? gbuf : ubuf, I, nullptr, 1, gated ? ubuf : nullptr, act_code(ex.act));
      g.w[0] = ptrs + 2 * E, g.w[1] = nullptr, g.y2 = nullptr, g.ymap = order;
      mm::launch_bf16_wgmma_grouped(*this, plane, P, I, g, 1, items_max, dbuf, H);
    }
    check_launch(op);
  } else {
    GroupedRows gr;
    gr.items = items;
    gr.n_items = items + 3 * max_items;
    gr.order = order;
    gr.max_items = static_cast<int>(max_items);
    gr.rows_max = static_cast<int>(std::min<int64_t>(kRowsPerItem, m));
    gr.pairs = P;
    gr.x_div = static_cast<int>(k);
    gr.w = gated ? ptrs : ptrs + E;
    if (gated) gr.w2 = ptrs + E, gr.y2 = ubuf;
    {
      const ProfScope ps(*this, gated ? "moe gate+up" : "moe up", nullptr, m);
      matmul_grouped(x.data, H, gr, dt, I, gated ? gbuf : ubuf);
    }
    // Down reads act(gate) * up (or act(up)) as it splits its x, as act_mul and activate compute it.
    GroupedRows gd = gr;
    gd.w = ptrs + 2 * E, gd.w2 = nullptr, gd.y2 = nullptr, gd.x_div = 1;
    gd.act = act_code(ex.act);
    gd.x2 = gated ? ubuf : nullptr;
    // Routing wrote the items before gate + up ran, so down's first weight loads need not wait.
    gd.items_early = moe_early();
    {
      const ProfScope ps(*this, "moe down", nullptr, m);
      matmul_grouped(gated ? gbuf : ubuf, I, gd, dt, H, dbuf);
    }
  }
  const ProfScope ps(*this, "moe combine", nullptr, m);
  const dim3 cgrid(grid_for(H, 256), static_cast<unsigned>(std::min<int64_t>(m, 65535)));
  launch_kernel(moe_combine_kernel, cgrid, 256, 0, idx, wts, dbuf, static_cast<int>(k), m, H,
                out.data, shared.y ? static_cast<const float*>(shared.y->data) : nullptr,
                shared.gate ? static_cast<const float*>(shared.gate->data) : nullptr);
  check_launch(op);
  return true;
}

}  // namespace tf::cuda
