#pragma once
// Event pairs around ops and their summed times (CudaBackend::set_profiling).
#include <string>
#include <unordered_map>
#include <vector>

#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

struct OpProfile {
  struct Rec {
    int key;
    cudaEvent_t a, b;
  };
  std::vector<cudaEvent_t> spare;
  std::vector<Rec> pending;
  std::unordered_map<std::string, int> index;
  std::vector<std::string> keys;
  std::vector<double> ms;
  std::vector<double> host_ms;  // the host's time inside each op's call (launch work, waits)
  std::vector<int64_t> calls;

  ~OpProfile() {
    for (const Rec& r : pending) cudaEventDestroy(r.a), cudaEventDestroy(r.b);
    for (cudaEvent_t e : spare) cudaEventDestroy(e);
  }
  cudaEvent_t event() {
    if (!spare.empty()) {
      cudaEvent_t e = spare.back();
      spare.pop_back();
      return e;
    }
    cudaEvent_t e = nullptr;
    TF_CUDA_CHECK(cudaEventCreate(&e), "profile: event");
    return e;
  }
  int key(const std::string& k) {
    auto [it, added] = index.emplace(k, static_cast<int>(keys.size()));
    if (added) keys.push_back(k), ms.push_back(0.0), host_ms.push_back(0.0), calls.push_back(0);
    return it->second;
  }
  // Waits for every recorded op and adds its time.
  void drain() {
    if (pending.empty()) return;
    TF_CUDA_CHECK(cudaEventSynchronize(pending.back().b), "profile: sync");
    for (const Rec& r : pending) {
      float t = 0.0f;
      TF_CUDA_CHECK(cudaEventElapsedTime(&t, r.a, r.b), "profile: elapsed");
      ms[static_cast<size_t>(r.key)] += t;
      ++calls[static_cast<size_t>(r.key)];
      spare.push_back(r.a), spare.push_back(r.b);
    }
    pending.clear();
  }
};

}  // namespace tf::cuda
