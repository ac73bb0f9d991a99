// tf_kernel_contract: every CUDA kernel against the cpu backend, its batch invariance, and
// planted faults that the same gates must catch. Exits 0 with a message when there is no GPU.
//   tf_kernel_contract [--bench]
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend/cuda/cuda_factory.h"
#include "contract.h"

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
  v.push_back({"matmul Q8_0 150x512x200 (sampled m)", [](Backend& g, Backend& c) {
                 return matmul_gate(real_matmul(), g, c, DType::Q8_0, 512, 200, 150,
                                    {1, 5, 16, 17, 64, 65, 129, 150}, false, 15);
               }});
  v.push_back({"rmsnorm F32 n=4096", [](Backend& g, Backend& c) {
                 return rmsnorm_gate(real_rmsnorm(), g, c, DType::F32, 4096, false, 21);
               }});
  v.push_back({"rmsnorm BF16 n=333 add_one", [](Backend& g, Backend& c) {
                 return rmsnorm_gate(real_rmsnorm(), g, c, DType::BF16, 333, true, 22);
               }});
  v.push_back({"rope neox hd=64", [](Backend& g, Backend& c) {
                 return rope_gate(real_rope(), g, c, 4, 64, 64, true, 1.0f, 31);
               }});
  v.push_back({"rope interleaved hd=80 rot=32 mscale", [](Backend& g, Backend& c) {
                 return rope_gate(real_rope(), g, c, 3, 80, 32, false, 1.2f, 32);
               }});
  for (Act a : {Act::SiLU, Act::GeluTanh, Act::Relu2})
    v.push_back({"act_mul " + std::to_string(static_cast<int>(a)),
                 [a](Backend& g, Backend& c) { return act_gate(real_act(), g, c, a, 41); }});
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
  return v;
}

std::vector<Case> controls() {
  std::vector<Case> v;
  v.push_back({"matmul whose K order depends on M", [](Backend& g, Backend& c) {
                 return matmul_gate_all(control_matmul_korder_by_m(), g, c, DType::BF16, 64, 48, 64, true, 11);
               }});
  v.push_back({"matmul dropping the last k", [](Backend& g, Backend& c) {
                 return matmul_gate_all(control_matmul_drop_last_k(), g, c, DType::BF16, 64, 48, 64, true, 11);
               }});
  v.push_back({"matmul rounding x to bf16", [](Backend& g, Backend& c) {
                 return matmul_gate_all(control_matmul_x_bf16(), g, c, DType::BF16, 64, 48, 64, true, 11);
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
  v.push_back({"kv_store ignoring the page table", [](Backend& g, Backend& c) {
                 return attention_gate(real_attention(), control_store_ignores_pages(), g, c, 37, attn(4, 2, 64), 16, 71);
               }});
  v.push_back({"attention dropping the row's own key", [](Backend& g, Backend& c) {
                 return attention_gate(control_attention_drop_last_key(), real_store(), g, c, 37, attn(4, 2, 64), 16, 71);
               }});
  v.push_back({"attention whose key order depends on the row count", [](Backend& g, Backend& c) {
                 return attention_gate(control_attention_order_by_rows(), real_store(), g, c, 37, attn(4, 2, 64), 16, 71);
               }});
  v.push_back({"topk ranking ties to the higher index", [](Backend& g, Backend& c) {
                 return topk_gate(control_topk_ties_high(), g, c, 64, 4, true, 61);
               }});
  v.push_back({"scatter_add applied in reverse order", [](Backend& g, Backend& c) {
                 return gather_scatter_gate(control_scatter_reversed(), g, c, 53);
               }});
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  const bool bench = argc > 1 && std::strcmp(argv[1], "--bench") == 0;
  if (cuda_device_count() == 0) {
    std::printf("SKIP: no CUDA device or driver here; the kernel contract needs a GPU\n");
    return 0;
  }
  try {
    auto gpu = make_cuda_backend(0);
    auto cpu = make_cpu_backend(2);
    std::printf("gpu backend: %s, reference: %s\n", gpu->name().c_str(), cpu->name().c_str());
    int passed = 0, caught = 0;
    const auto ks = kernels(), cs = controls();
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
    return passed == static_cast<int>(ks.size()) && caught == static_cast<int>(cs.size()) ? 0 : 1;
  } catch (const std::exception& e) {
    std::printf("ERROR: %s\n", e.what());
    return 1;
  }
}
