#pragma once
// Graph replay of a round's launches (Backend::graph_begin): the record of a round's launches, and
// the backend's graphs with the metadata arena their kernels read.
#include <cuda_runtime.h>

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_util.cuh"

namespace tf::cuda {

// One launch: its kernel, shape and overlap attribute, and where its arguments sit in the log.
struct LaunchRec {
  const void* kernel = nullptr;
  dim3 grid, block;
  size_t smem = 0;
  unsigned attrs = 0;
  unsigned cluster_y = 1;  // blocks a cluster along y (1: no clusters)
  uint32_t first_arg = 0;  // index into LaunchLog::arg_off / arg_size
  int n_args = 0;
};

struct LaunchLog {
  bool dry = false;                    // record only (replay), else launch too (capture)
  std::vector<LaunchRec> recs;
  std::vector<uint8_t> bytes;          // argument values, each at a 16-byte boundary
  std::vector<uint32_t> arg_off, arg_size;
  std::vector<cudaGraphNode_t> nodes;  // capture: the graph node each launch made
  bool lost_node = false;              // a capture whose node could not be told
  void clear();
};

// A captured round: its graph, the instance launched, and the launches it holds.
struct RoundGraph {
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  LaunchLog log;
  uint64_t last_use = 0;
  int64_t replays = 0;  // since the capture
};

struct GraphState {
  enum class Mode { Off, Capture, Dry };
  bool on = false;  // TF_CUDA_GRAPHS=1
  Mode mode = Mode::Off;
  uint64_t key = 0, tick = 0;
  LaunchLog log;  // the open round's launches
  std::unordered_map<uint64_t, RoundGraph> graphs;
  std::unordered_map<uint64_t, int> seen;     // direct rounds of a key without a graph
  std::unordered_map<uint64_t, int> skip;     // rounds of a key to run directly, after a refusal
  std::unordered_map<uint64_t, int> refused;  // refusals of a key in a row
  std::unordered_map<uint64_t, int> missed;   // replays of a key missed in a row
  // Metadata arena: a graphed round's per-round arrays, staged on the host (two buffers, so one
  // may be written while the other's copy is in flight) and sent in one copy before the launch.
  uint8_t* dev = nullptr;
  uint8_t* host[2] = {nullptr, nullptr};
  cudaEvent_t sent[2] = {nullptr, nullptr};
  int cur = 0;
  uint64_t cap = 0, used = 0, want = 1 << 20;
  bool grow_failed = false;  // a bigger arena could not be had: no more tries
  struct Entry {
    uint64_t off = 0, n = 0;
  };
  std::vector<Entry> recent;
  GraphStats stats;
  ~GraphState();
  void drop(uint64_t key);
};

}  // namespace tf::cuda
