// Picks the backend for a --device string.
#include <charconv>

#include "backend/backend.h"
#include "base/error.h"
#include "base/thread_pool.h"
#ifdef TF_HAVE_CUDA
#include "backend/cuda/cuda_factory.h"
#endif

namespace tf {

namespace {

std::unique_ptr<Backend> cpu_backend(int threads) {
  return make_cpu_backend(threads > 0 ? threads : default_thread_count());
}

// The GPU index of "cuda" (0) or "cuda:N"; throws on anything else after "cuda".
int cuda_index(const std::string& device) {
  if (device == "cuda") return 0;
  const char* b = device.data() + 5;
  const char* e = device.data() + device.size();
  int idx = -1;
  const auto [ptr, ec] = std::from_chars(b, e, idx);
  TF_CHECK(ec == std::errc() && ptr == e && b != e && idx >= 0, "device '", device,
           "': expected cuda:N with N a GPU index");
  return idx;
}

}  // namespace

std::unique_ptr<Backend> make_backend(const std::string& device, int threads) {
  if (device == "cpu") return cpu_backend(threads);
  if (device == "cuda" || device.rfind("cuda:", 0) == 0) {
    const int idx = cuda_index(device);
#ifdef TF_HAVE_CUDA
    return make_cuda_backend(idx);
#else
    fail("device '", device, "' (GPU ", idx,
         "): this build has no CUDA backend; rebuild with -DTF_CUDA=ON or use --device cpu");
#endif
  }
  if (device == "auto") {
#ifdef TF_HAVE_CUDA
    if (cuda_device_count() > 0) return make_cuda_backend(0);
#endif
    return cpu_backend(threads);
  }
  fail("unknown device '", device, "'; expected cpu, cuda, cuda:N or auto");
}

}  // namespace tf
