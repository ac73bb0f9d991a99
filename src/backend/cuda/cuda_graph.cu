// Graph replay of a round's launches. A key's first round runs directly; its second is captured
// into a graph; later ones run the model's code with launches recorded, not issued (a dry run),
// and launch the graph when the record has the graph's kernels, blocks and overlap attributes in
// the graph's order. Grids, shared memory and arguments that differ are patched into the graph's
// nodes first, so a replay always runs what the dry run computed. Per-round arrays (meta) go into
// a fixed arena sent in one copy before the launch. Anything else (other launches, an allocation,
// a copy to or from the host) runs the round again directly.
#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_graph.cuh"

namespace tf::cuda {

thread_local LaunchLog* tl_launch_log = nullptr;

namespace {

constexpr int kGraphRows = 64;   // rounds of more rows run directly
constexpr size_t kMaxGraphs = 64;  // the least recently used graph goes past this

bool same_shape(const dim3& a, const dim3& b) { return a.x == b.x && a.y == b.y && a.z == b.z; }

// Same kernels, blocks, overlap and cluster attributes and argument sizes in the same order: the graph's
// nodes and edges. Grids, shared memory and argument values are patched into the nodes.
bool same_launches(const LaunchLog& a, const LaunchLog& b) {
  if (a.recs.size() != b.recs.size() || a.arg_size != b.arg_size) return false;
  for (size_t i = 0; i < a.recs.size(); ++i) {
    const LaunchRec &x = a.recs[i], &y = b.recs[i];
    if (x.kernel != y.kernel || !same_shape(x.block, y.block) || x.attrs != y.attrs || x.cluster_y != y.cluster_y ||
        x.n_args != y.n_args)
      return false;
  }
  return true;
}

bool same_args(const LaunchLog& a, const LaunchLog& b, const LaunchRec& r) {
  for (int k = 0; k < r.n_args; ++k) {
    const uint32_t i = r.first_arg + static_cast<uint32_t>(k);
    if (std::memcmp(a.bytes.data() + a.arg_off[i], b.bytes.data() + b.arg_off[i], a.arg_size[i]) != 0)
      return false;
  }
  return true;
}

}  // namespace

void LaunchLog::clear() {
  recs.clear();
  bytes.clear();
  arg_off.clear();
  arg_size.clear();
  nodes.clear();
  lost_node = false;
}

bool log_launch(LaunchLog& log, const void* kernel, const cudaLaunchConfig_t& cfg, void* const* args,
                const size_t* sizes, int n) {
  LaunchRec r;
  r.kernel = kernel;
  r.grid = cfg.gridDim;
  r.block = cfg.blockDim;
  r.smem = cfg.dynamicSmemBytes;
  r.attrs = cfg.numAttrs;
  for (unsigned i = 0; i < cfg.numAttrs; ++i)
    if (cfg.attrs[i].id == cudaLaunchAttributeClusterDimension) r.cluster_y = cfg.attrs[i].val.clusterDim.y;
  r.first_arg = static_cast<uint32_t>(log.arg_off.size());
  r.n_args = n;
  for (int i = 0; i < n; ++i) {
    const size_t off = (log.bytes.size() + 15) / 16 * 16;
    log.bytes.resize(off + sizes[i]);
    std::memcpy(log.bytes.data() + off, args[i], sizes[i]);
    log.arg_off.push_back(static_cast<uint32_t>(off));
    log.arg_size.push_back(static_cast<uint32_t>(sizes[i]));
  }
  log.recs.push_back(r);
  return !log.dry;
}

void log_lost(LaunchLog& log) {
  log.lost_node = true;
  log.nodes.push_back(nullptr);
}

void log_captured(LaunchLog& log) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = nullptr;
  const cudaGraphEdgeData* edges = nullptr;
  size_t n = 0;
  // The capture's frontier after a kernel launch on one in-order stream is that kernel's node.
  if (cudaStreamGetCaptureInfo(stream(), &st, nullptr, nullptr, &deps, &edges, &n) != cudaSuccess ||
      st != cudaStreamCaptureStatusActive || n != 1) {
    log.lost_node = true;
    log.nodes.push_back(nullptr);
    return;
  }
  log.nodes.push_back(deps[0]);
}

GraphState::~GraphState() {
  for (auto& [k, g] : graphs) {
    if (g.exec) cudaGraphExecDestroy(g.exec);
    if (g.graph) cudaGraphDestroy(g.graph);
  }
  for (int i = 0; i < 2; ++i) {
    if (sent[i]) cudaEventDestroy(sent[i]);
    if (host[i]) cudaFreeHost(host[i]);
  }
  if (dev) cudaFree(dev);
}

void GraphState::drop(uint64_t k) {
  auto it = graphs.find(k);
  if (it == graphs.end()) return;
  if (it->second.exec) cudaGraphExecDestroy(it->second.exec);
  if (it->second.graph) cudaGraphDestroy(it->second.graph);
  graphs.erase(it);
}

namespace {

// Replaces the arena with one of G.want bytes (at least 1 MiB); false, with the old one kept, when
// the memory is not there.
bool grow_arena(GraphState& G, std::atomic<uint64_t>& counter) {
  // A new arena moves every array a graph's kernels read; the patched arguments follow it.
  TF_CUDA_CHECK(cudaStreamSynchronize(stream()), "graph arena");
  for (int i = 0; i < 2; ++i)
    if (G.sent[i]) TF_CUDA_CHECK(cudaEventSynchronize(G.sent[i]), "graph arena");
  const uint64_t cap = std::max<uint64_t>(G.want, 1 << 20);
  uint8_t* dev = nullptr;
  uint8_t* host[2] = {nullptr, nullptr};
  bool ok = cudaMalloc(&dev, cap) == cudaSuccess;
  for (int i = 0; ok && i < 2; ++i) {
    ok = cudaHostAlloc(reinterpret_cast<void**>(&host[i]), cap, cudaHostAllocDefault) == cudaSuccess;
    if (ok && !G.sent[i]) ok = cudaEventCreateWithFlags(&G.sent[i], cudaEventDisableTiming) == cudaSuccess;
  }
  if (!ok) {
    (void)cudaGetLastError();
    for (uint8_t* h : host)
      if (h) cudaFreeHost(h);
    if (dev) cudaFree(dev);
    return false;
  }
  for (int i = 0; i < 2; ++i) {
    if (G.host[i]) cudaFreeHost(G.host[i]);
    G.host[i] = host[i];
  }
  if (G.dev) cudaFree(G.dev);
  counter.fetch_sub(G.cap);
  counter.fetch_add(cap);
  G.dev = dev, G.cap = cap;
  return true;
}

}  // namespace

void CudaBackend::graph_refuse() const {
  if (graph_ && graph_->mode != GraphState::Mode::Off) throw GraphRefused{};
}

GraphStats CudaBackend::graph_stats() const { return graph_ ? graph_->stats : GraphStats{}; }

bool CudaBackend::graph_begin(int rows, uint64_t key) {
  if (!graph_ || !graph_->on || prof_ || rows < 1 || rows > kGraphRows) return false;
  GraphState& G = *graph_;
  ++G.tick;
  if (auto s = G.skip.find(key); s != G.skip.end() && s->second > 0) {
    --s->second;
    return false;
  }
  // Out of memory for a bigger arena: rounds keep the one there is, or run directly without one.
  if (G.want > G.cap && !G.grow_failed && !grow_arena(G, *blocks_.counter())) G.grow_failed = true;
  if (G.cap == 0) return false;
  // The staging buffer is reused once its last copy has gone out.
  G.cur ^= 1;
  TF_CUDA_CHECK(cudaEventSynchronize(G.sent[G.cur]), "graph arena");
  G.used = 0;
  G.recent.clear();
  G.log.clear();
  auto it = G.graphs.find(key);
  if (it != G.graphs.end()) {
    G.mode = GraphState::Mode::Dry;
    G.log.dry = true;
  } else {
    if (++G.seen[key] < 2) return false;  // first sightings run directly (and make their buffers)
    if (cudaStreamBeginCapture(stream(), cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
      (void)cudaGetLastError();
      return false;
    }
    G.mode = GraphState::Mode::Capture;
    G.log.dry = false;
  }
  G.key = key;
  rope_blob_.clear();  // the table kernel runs inside every graphed round
  tl_launch_log = &G.log;
  return true;
}

const void* CudaBackend::graph_meta(const void* src, uint64_t n) {
  GraphState& G = *graph_;
  for (auto it = G.recent.rbegin(); it != G.recent.rend(); ++it)
    if (it->n == n && std::memcmp(G.host[G.cur] + it->off, src, n) == 0) return G.dev + it->off;
  const uint64_t len = (std::max<uint64_t>(n, 1) + 15) / 16 * 16;
  if (G.used + len > G.cap) {
    G.want = std::max(G.want, 2 * (G.used + len));
    throw GraphRefused{};
  }
  const uint64_t off = G.used;
  G.used += len;
  if (n > 0) std::memcpy(G.host[G.cur] + off, src, n);
  if (G.recent.size() >= 16) G.recent.erase(G.recent.begin());
  G.recent.push_back({off, n});
  return G.dev + off;
}

bool CudaBackend::graph_end() {
  GraphState& G = *graph_;
  tl_launch_log = nullptr;
  rope_blob_.clear();
  const GraphState::Mode mode = G.mode;
  G.mode = GraphState::Mode::Off;
  auto send_and_launch = [&](cudaGraphExec_t exec) {
    if (G.used > 0)
      TF_CUDA_CHECK(cudaMemcpyAsync(G.dev, G.host[G.cur], G.used, cudaMemcpyHostToDevice, stream()),
                    "graph arena: upload of ", G.used, " bytes");
    TF_CUDA_CHECK(cudaEventRecord(G.sent[G.cur], stream()), "graph arena");
    TF_CUDA_CHECK(cudaGraphLaunch(exec, stream()), "graph launch");
  };
  if (mode == GraphState::Mode::Capture) {
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(stream(), &g);
    cudaGraphExec_t exec = nullptr;
    if (e != cudaSuccess || g == nullptr || G.log.lost_node || G.log.recs.empty() ||
        cudaGraphInstantiate(&exec, g, 0) != cudaSuccess) {
      (void)cudaGetLastError();
      if (g) cudaGraphDestroy(g);
      ++G.stats.refusals;
      G.skip[G.key] = 64;
      G.seen.erase(G.key);
      return false;
    }
    if (G.graphs.size() >= kMaxGraphs) {
      auto lru = std::min_element(G.graphs.begin(), G.graphs.end(),
                                  [](const auto& a, const auto& b) { return a.second.last_use < b.second.last_use; });
      G.drop(lru->first);
    }
    RoundGraph& rg = G.graphs[G.key];
    rg.graph = g, rg.exec = exec, rg.last_use = G.tick;
    rg.log = G.log;
    G.seen.erase(G.key);
    G.refused.erase(G.key);
    ++G.stats.captures;
    send_and_launch(exec);
    return true;
  }
  RoundGraph& rg = G.graphs.at(G.key);
  bool ok = same_launches(rg.log, G.log);
  int64_t patched = 0;
  for (size_t i = 0; ok && i < G.log.recs.size(); ++i) {
    const LaunchRec& r = G.log.recs[i];
    const LaunchRec& was = rg.log.recs[i];
    if (same_shape(r.grid, was.grid) && r.smem == was.smem && same_args(rg.log, G.log, r)) continue;
    void* params[64];
    if (r.n_args > 64) {
      ok = false;
      break;
    }
    for (int k = 0; k < r.n_args; ++k) params[k] = G.log.bytes.data() + G.log.arg_off[r.first_arg + static_cast<uint32_t>(k)];
    cudaKernelNodeParams p = {};
    p.func = const_cast<void*>(r.kernel);
    p.gridDim = r.grid;
    p.blockDim = r.block;
    p.sharedMemBytes = static_cast<unsigned>(r.smem);
    p.kernelParams = params;
    ok = cudaGraphExecKernelNodeSetParams(rg.exec, rg.log.nodes[i], &p) == cudaSuccess;
    ++patched;
  }
  if (!ok) {
    // A round of other launches: it runs directly, and the key is captured again on its next
    // round unless its graph keeps missing.
    (void)cudaGetLastError();
    ++G.stats.misses;
    // Misses close together (a graph replayed few times) mean the launches keep changing.
    int& missed = G.missed[G.key];
    missed = rg.replays < 16 ? missed + 1 : 1;
    G.drop(G.key);
    if (missed >= 3) {
      G.skip[G.key] = 64;
      G.missed.erase(G.key);
    } else {
      G.seen[G.key] = 1;
    }
    return false;
  }
  // The instance now holds this round's grids and arguments.
  for (size_t i = 0; i < G.log.recs.size(); ++i) {
    rg.log.recs[i].grid = G.log.recs[i].grid;
    rg.log.recs[i].smem = G.log.recs[i].smem;
  }
  rg.log.bytes = G.log.bytes;
  ++rg.replays;
  G.refused.erase(G.key);
  rg.last_use = G.tick;
  G.stats.updates += patched;
  ++G.stats.replays;
  send_and_launch(rg.exec);
  return true;
}

void CudaBackend::graph_abort() {
  GraphState& G = *graph_;
  tl_launch_log = nullptr;
  rope_blob_.clear();
  if (G.mode == GraphState::Mode::Capture) {
    cudaGraph_t g = nullptr;
    (void)cudaStreamEndCapture(stream(), &g);
    if (g) cudaGraphDestroy(g);
  }
  (void)cudaGetLastError();
  // A dry run's graph stays: the direct round grows what was missing, and the next dry run
  // patches the new addresses in.
  G.mode = GraphState::Mode::Off;
  ++G.stats.refusals;
  // A refusal from growth passes once the direct round has grown the buffers; one that repeats
  // (a host read in the round) backs off further each time.
  const int n = ++G.refused[G.key];
  G.skip[G.key] = n <= 1 ? 0 : std::min(1 << std::min(n, 10), 1024);
  G.seen[G.key] = 1;
}

}  // namespace tf::cuda
