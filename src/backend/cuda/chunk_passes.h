#pragma once
// How a chunked op whose scratch holds a fixed number of chunks splits a round's sequences into
// passes: plain C++ so the CPU tests can check it.
#include <cstdint>
#include <vector>

namespace tf::cuda {

// Chunks a scratch sized by the round's rows alone holds: ceil(rows / chunk) + 1, so the warm-up's
// widest round sizes it and a later round never grows it.
inline int64_t chunk_capacity(int64_t rows, int64_t chunk) { return (rows + chunk - 1) / chunk + 1; }

// Splits sequences of n[j] rows (in order) into passes of whole sequences of at most cap chunks of
// `chunk` rows: the first sequence of each pass, then n.size(). A sequence of more than cap
// chunks gets a pass of its own.
inline std::vector<size_t> chunk_passes(const std::vector<int64_t>& n, int64_t chunk, int64_t cap) {
  std::vector<size_t> at{0};
  int64_t held = 0;
  for (size_t j = 0; j < n.size(); ++j) {
    const int64_t c = (n[j] + chunk - 1) / chunk;
    if (held > 0 && held + c > cap) at.push_back(j), held = 0;
    held += c;
  }
  at.push_back(n.size());
  return at;
}

}  // namespace tf::cuda
